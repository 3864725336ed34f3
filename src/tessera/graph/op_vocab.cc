// The vocabulary op families of the op table (op_table.h): the token embedding and the
// cross-entropy loss, and their vocab-parallel forms (ops/vocab_parallel.h), which the sharding
// pass chooses when the table or the logits are split by vocabulary rows. Each with its shapes,
// sharding rule, backward rule and kernel call side by side.
#include "tessera/core/error.h"
#include "tessera/dist/communicator.h"
#include "tessera/graph/autodiff.h"
#include "tessera/graph/op_families.h"
#include "tessera/graph/sharding.h"
#include "tessera/ops/cross_entropy.h"
#include "tessera/ops/embedding.h"
#include "tessera/ops/vocab_parallel.h"

namespace tessera::graph {

namespace {

// The ids as the kernels take them, [N] (positions arrive as [B, T]).
Tensor ids_of(const RunContext& c, const Node& n) {
  const Tensor& ids = c.in(n, 1);
  return ids.reshape(Shape{ids.numel()});
}

ops::VocabShardRange range_of(const EmbeddingAttrs& a) {
  return {.offset = a.vocab_offset, .vocab = a.vocab};
}
ops::VocabShardRange range_of(const CrossEntropyAttrs& a) {
  return {.offset = a.vocab_offset, .vocab = a.vocab};
}

// ---- embedding: x = table[ids]; in: table [V, E], ids [N]; out: x [N, E] -------------------------

std::vector<OutputSpec> embedding_infer(const Graph& g, const Node& n) {
  const Value& table = g.value(n.in[0]);
  const Value& ids = g.value(n.in[1]);
  TESSERA_CHECK_SHAPE(table.shape.rank() == 2 && ids.dtype == DType::kI32,
                      "{}: embedding of table {} by ids {}", n.name, table.shape.str(), ids.shape.str());
  return {{"", Shape{ids.shape.numel(), table.shape[1]}, n.attr<EmbeddingAttrs>().dtype}};
}

// A table split by rows: this rank looks up the ids of its rows (zeros elsewhere); g sums the shards.
void embedding_shard(ShardBuilder& sb, Node n) {
  const TensorShard tp = sb.shard(n.in[0]);
  if (!tp.split()) return shard_whole(sb, std::move(n));
  TESSERA_CHECK(
      tp.dim == 0, ErrorKind::kConfig,
      "{}: the embedding table is split over the tensor axis on its embed dimension; Tessera splits "
      "it by vocabulary rows only (map `embed` to no tensor axis in logical_axis_rules)",
      n.name);
  const std::string name = n.name;
  const ValueId part = n.out[0];
  n.op = OpKind::kVocabEmbedding;
  EmbeddingAttrs& a = n.attr<EmbeddingAttrs>();
  a.vocab_offset = tp.offset;
  a.vocab = tp.global;
  n.name += ".shard";
  sb.graph().value(part).name += ".shard";
  sb.emit(std::move(n));
  sb.replace(part, sb.all_reduce(part, name, ""));
}

void embedding_backward(GradBuilder& gb, const Node& f, ValueId dy) {
  gb.add(gb.node(OpKind::kEmbeddingBwd, {dy, f.in[1]}, {gb.param_grad(f.in[0])}, ".bwd"));
}

void embedding_run(const RunContext& c, const Node& n) {
  ops::embedding_forward(c.in(n, 0), ids_of(c, n), c.out(n, 0));
}

void embedding_bwd_run(const RunContext& c, const Node& n) {  // in: dx, ids; out: dtable (accumulated)
  ops::embedding_backward(c.in(n, 0), ids_of(c, n), c.out(n, 0));
}

// dy is whole on every rank: each adds its own rows, no collective.
void vocab_embedding_backward(GradBuilder& gb, const Node& f, ValueId dy) {
  gb.add(gb.node(OpKind::kVocabEmbeddingBwd, {dy, f.in[1]}, {gb.param_grad(f.in[0])}, ".bwd"));
}

void vocab_embedding_run(const RunContext& c, const Node& n) {
  ops::vocab_embedding_forward(c.in(n, 0), ids_of(c, n), range_of(n.attr<EmbeddingAttrs>()), c.out(n, 0));
}

void vocab_embedding_bwd_run(const RunContext& c, const Node& n) {
  ops::vocab_embedding_backward(c.in(n, 0), ids_of(c, n), range_of(n.attr<EmbeddingAttrs>()), c.out(n, 0));
}

// ---- cross_entropy: in: logits [N, V], targets [N]; out: loss [N], lse [N] ------------------------
// (vocab-parallel: logits [N, Vl]; out also stats [2, N], the partial sums the all-reduces combine)

std::vector<OutputSpec> cross_entropy_infer(const Graph& g, const Node& n) {
  const Value& logits = g.value(n.in[0]);
  const Value& targets = g.value(n.in[1]);
  const int64_t N = logits.shape[0];
  TESSERA_CHECK_SHAPE(logits.shape.rank() == 2 && targets.shape == Shape{N}, "{}: logits {} with targets {}",
                      n.name, logits.shape.str(), targets.shape.str());
  std::vector<OutputSpec> out = {{"", Shape{N}, DType::kF32}, {".lse", Shape{N}, DType::kF32}};
  if (n.op == OpKind::kVocabCrossEntropy) out.push_back({".stats", Shape{2, N}, DType::kF32});
  return out;
}

// Logits split by vocabulary: ops/vocab_parallel.h's three steps around two all-reduces of [N]
// and [2, N] floats (stats); every tensor rank ends with the whole loss and lse.
void cross_entropy_shard(ShardBuilder& sb, Node n) {
  const TensorShard tp = sb.shard(n.in[0]);
  if (!tp.split()) return shard_whole(sb, std::move(n));
  TESSERA_ASSERT(tp.dim == 1);
  n.op = OpKind::kVocabCrossEntropy;
  CrossEntropyAttrs& a = n.attr<CrossEntropyAttrs>();
  a.vocab_offset = tp.offset;
  a.vocab = tp.global;
  const int64_t N = sb.graph().value(n.in[0]).shape[0];
  n.out.push_back(sb.graph().activation(n.name + ".stats", Shape{2, N}, DType::kF32));
  sb.emit(std::move(n));
}

// dlogits = dloss * (softmax - onehot), written over the logits (dead afterwards; autodiff gives it
// a buffer of its own when a later node reads them).
template <OpKind kBwd>
void cross_entropy_backward(GradBuilder& gb, const Node& f, ValueId dy) {
  const ValueId logits = f.in[0];
  ValueId dlogits = gb.grad_value(logits);
  gb.graph().value(dlogits).alias_of = logits;
  gb.add(gb.node(kBwd, {logits, f.in[1], f.out[1], dy}, {dlogits}, ".bwd"));
  gb.contribute(logits, dlogits);
}

void cross_entropy_run(const RunContext& c, const Node& n) {
  ops::cross_entropy_forward(c.in(n, 0), c.in(n, 1), c.out(n, 0), c.out(n, 1),
                             n.attr<CrossEntropyAttrs>().z_loss);
}

void cross_entropy_bwd_run(const RunContext& c, const Node& n) {  // in: logits, targets, lse, dloss
  ops::cross_entropy_backward(c.in(n, 0), c.in(n, 1), c.in(n, 2), c.in(n, 3), c.out(n, 0),
                              n.attr<CrossEntropyAttrs>().z_loss);
}

// The loss and its gradient in one visit of the logits (fuse_loss_gradient); an evaluation pass
// needs only the loss.
void cross_entropy_grad_run(const RunContext& c, const Node& n) {  // in: logits, targets, dloss
  const float z = n.attr<CrossEntropyAttrs>().z_loss;
  if (c.forward_only) return ops::cross_entropy_forward(c.in(n, 0), c.in(n, 1), c.out(n, 0), c.out(n, 1), z);
  ops::cross_entropy_forward_backward(c.in(n, 0), c.in(n, 1), c.in(n, 2), c.out(n, 0), c.out(n, 1),
                                      c.out(n, 2), z);
}

void vocab_cross_entropy_run(const RunContext& c, const Node& n) {
  const CrossEntropyAttrs& a = n.attr<CrossEntropyAttrs>();
  const Tensor &logits = c.in(n, 0), &targets = c.in(n, 1);
  const Tensor &loss = c.out(n, 0), &lse = c.out(n, 1), &stats = c.out(n, 2);
  ops::vocab_cross_entropy_partials(logits, targets, range_of(a), lse, stats);
  c.tensor->all_reduce(lse.data(), static_cast<size_t>(lse.numel()), DType::kF32, dist::ReduceOp::kMax);
  ops::vocab_cross_entropy_rescale(lse, stats);
  c.tensor->all_reduce(stats.data(), static_cast<size_t>(stats.numel()), DType::kF32);
  ops::vocab_cross_entropy_finish(targets, stats, a.z_loss, lse, loss);
}

void vocab_cross_entropy_bwd_run(const RunContext& c, const Node& n) {  // in: logits, targets, lse, dloss
  const CrossEntropyAttrs& a = n.attr<CrossEntropyAttrs>();
  ops::vocab_cross_entropy_backward(c.in(n, 0), c.in(n, 1), range_of(a), c.in(n, 2), c.in(n, 3), c.out(n, 0),
                                    a.z_loss);
}

NodeTraffic vocab_cross_entropy_traffic(const Graph& g, const Node& n) {
  return {.bytes = 4.0 * 3 * static_cast<double>(g.value(n.in[0]).shape[0]),
          .calls = 2};  // max [N], sums [2, N]
}

}  // namespace

std::vector<OpDef> vocab_op_defs() {
  return {
      {.kind = OpKind::kEmbedding,
       .name = "embedding",
       .infer = embedding_infer,
       .backward = embedding_backward,
       .shard = embedding_shard,
       .run = embedding_run},
      {.kind = OpKind::kEmbeddingBwd, .name = "embedding_bwd", .run = embedding_bwd_run},
      {.kind = OpKind::kVocabEmbedding,
       .name = "vocab_embedding",
       .infer = embedding_infer,
       .backward = vocab_embedding_backward,
       .run = vocab_embedding_run},
      {.kind = OpKind::kVocabEmbeddingBwd, .name = "vocab_embedding_bwd", .run = vocab_embedding_bwd_run},
      {.kind = OpKind::kCrossEntropy,
       .name = "cross_entropy",
       .infer = cross_entropy_infer,
       .backward = cross_entropy_backward<OpKind::kCrossEntropyBwd>,
       .shard = cross_entropy_shard,
       .run = cross_entropy_run},
      {.kind = OpKind::kCrossEntropyBwd, .name = "cross_entropy_bwd", .run = cross_entropy_bwd_run},
      {.kind = OpKind::kCrossEntropyGrad, .name = "cross_entropy_grad", .run = cross_entropy_grad_run},
      {.kind = OpKind::kVocabCrossEntropy,
       .name = "vocab_cross_entropy",
       .infer = cross_entropy_infer,
       .backward = cross_entropy_backward<OpKind::kVocabCrossEntropyBwd>,
       .run = vocab_cross_entropy_run,
       .traffic = vocab_cross_entropy_traffic},
      {.kind = OpKind::kVocabCrossEntropyBwd,
       .name = "vocab_cross_entropy_bwd",
       .run = vocab_cross_entropy_bwd_run},
  };
}

}  // namespace tessera::graph
