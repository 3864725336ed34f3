#include "tessera/graph/graph.h"

#include <fmt/format.h>

#include "tessera/core/error.h"

namespace tessera::graph {

const char* op_name(OpKind op) {
  switch (op) {
    case OpKind::kEmbedding: return "embedding";
    case OpKind::kEmbeddingBwd: return "embedding_bwd";
    case OpKind::kRmsNorm: return "rms_norm";
    case OpKind::kRmsNormBwd: return "rms_norm_bwd";
    case OpKind::kMatmul: return "matmul";
    case OpKind::kRope: return "rope";
    case OpKind::kRopeBwd: return "rope_bwd";
    case OpKind::kAttention: return "attention";
    case OpKind::kAttentionBwd: return "attention_bwd";
    case OpKind::kGlu: return "glu";
    case OpKind::kGluBwd: return "glu_bwd";
    case OpKind::kAdd: return "add";
    case OpKind::kCrossEntropy: return "cross_entropy";
    case OpKind::kCrossEntropyBwd: return "cross_entropy_bwd";
    case OpKind::kTpCopy: return "tp_copy";
    case OpKind::kTpAllReduce: return "tp_all_reduce";
    case OpKind::kVocabEmbedding: return "vocab_embedding";
    case OpKind::kVocabEmbeddingBwd: return "vocab_embedding_bwd";
    case OpKind::kVocabCrossEntropy: return "vocab_cross_entropy";
    case OpKind::kVocabCrossEntropyBwd: return "vocab_cross_entropy_bwd";
    case OpKind::kAdamW: return "adamw";
    case OpKind::kSgd: return "sgd";
  }
  return "?";
}

int64_t TensorParallel::ways(const std::string& logical) const {
  if (size <= 1) return 1;
  for (const std::string& a : axes)
    if (a == logical) return size;
  return 1;
}

Shape global_shape(const Value& v) {
  Shape s = v.shape;
  if (v.tp.split()) s[v.tp.dim] = v.tp.global;
  return s;
}

std::string describe_tensor_shard(const Value& v) {
  if (!v.tp.split()) return "";
  const std::string axis =
      v.tp.dim < static_cast<int>(v.logical_axes.size()) ? " (" + v.logical_axes[v.tp.dim] + ")" : "";
  return fmt::format("tensor slice [{}:{}] of dim {}{} of {}", v.tp.offset, v.tp.offset + v.shape[v.tp.dim], v.tp.dim,
                     axis, global_shape(v).str());
}

void Graph::set_tensor_parallel(TensorParallel tp) {
  TESSERA_CHECK(tp.size >= 1 && tp.rank >= 0 && tp.rank < tp.size, ErrorKind::kInternal,
                "tensor parallelism: rank {} of {}", tp.rank, tp.size);
  TESSERA_CHECK(params().empty(), ErrorKind::kInternal, "set_tensor_parallel after the first parameter");
  tp_ = std::move(tp);
}

ValueId Graph::add_value(Value v) {
  values_.push_back(std::move(v));
  return static_cast<ValueId>(values_.size() - 1);
}

// `shape` is the global shape; the value keeps this rank's shard along the (at most one) dimension
// whose logical axis the tensor axis splits.
ValueId Graph::param(const std::string& name, Shape shape, std::vector<std::string> logical_axes,
                     bool weight_decay) {
  TESSERA_ASSERT(static_cast<int>(logical_axes.size()) == shape.rank());
  TensorShard tp;
  for (int d = 0; d < shape.rank(); ++d) {
    if (tp_.ways(logical_axes[d]) == 1) continue;
    TESSERA_CHECK(
        !tp.split(), ErrorKind::kConfig,
        "parameter {}: logical_axis_rules map both of its axes {} and {} onto the tensor mesh axis; "
        "Tessera's tensor parallelism splits one dimension per parameter",
        name, logical_axes[tp.dim], logical_axes[d]);
    TESSERA_CHECK(shape[d] % tp_.size == 0, ErrorKind::kConfig,
                  "parameter {} {}: its {} dimension ({}) is not divisible by the tensor parallelism {}",
                  name, shape.str(), logical_axes[d], shape[d], tp_.size);
    const int64_t local = shape[d] / tp_.size;
    tp = TensorShard{.dim = d, .offset = tp_.rank * local, .global = shape[d]};
    shape[d] = local;
  }
  Value v{.name = name, .shape = shape, .dtype = DType::kF32, .kind = ValueKind::kParam};
  v.tp = tp;
  v.logical_axes = std::move(logical_axes);
  v.weight_decay = weight_decay;
  ValueId id = add_value(v);
  Value g{.name = name + ".grad", .shape = shape, .dtype = DType::kF32, .kind = ValueKind::kGrad};
  g.master = id;
  g.tp = tp;
  ValueId gid = add_value(g);
  values_[id].grad = gid;
  return id;
}

ValueId Graph::input(const std::string& name, Shape shape, DType dtype) {
  return add_value(Value{.name = name, .shape = shape, .dtype = dtype, .kind = ValueKind::kInput});
}

ValueId Graph::activation(const std::string& name, Shape shape, DType dtype) {
  return add_value(Value{.name = name, .shape = shape, .dtype = dtype, .kind = ValueKind::kActivation,
                         .layer = layer_});
}

ValueId Graph::compute_view(ValueId param, DType compute_dtype) {
  Value& p = values_[param];
  TESSERA_ASSERT(p.kind == ValueKind::kParam);
  if (compute_dtype == DType::kF32) return param;
  if (p.compute_copy != kNoValue) return p.compute_copy;
  Value c{.name = p.name + ".compute", .shape = p.shape, .dtype = compute_dtype,
          .kind = ValueKind::kParamCompute};
  c.master = param;
  c.tp = p.tp;
  ValueId id = add_value(c);
  values_[param].compute_copy = id;
  return id;
}

int Graph::add_node(Node n) {
  int idx = static_cast<int>(nodes_.size());
  for (ValueId o : n.out)
    if (values_[o].kind == ValueKind::kActivation && values_[o].producer < 0) values_[o].producer = idx;
  nodes_.push_back(std::move(n));
  return idx;
}

namespace {
Node make(OpKind op, std::vector<ValueId> in, std::vector<ValueId> out, std::string name, Phase phase,
          int layer, std::string ckpt = "") {
  Node n{.op = op, .in = std::move(in), .out = std::move(out)};
  n.name = std::move(name);
  n.ckpt_name = std::move(ckpt);
  n.phase = phase;
  n.layer = layer;
  return n;
}
}  // namespace

ValueId Graph::embedding(ValueId table, ValueId ids, DType out_dtype, const std::string& name) {
  if (values_[table].tp.split()) return embedding_shard(table, ids, out_dtype, name);
  const Shape& ts = values_[table].shape;
  ValueId y = activation(name, Shape{values_[ids].shape.numel(), ts[1]}, out_dtype);
  add_node(make(OpKind::kEmbedding, {table, ids}, {y}, name, phase_, layer_));
  return y;
}

// Vocab-parallel: this rank looks up the ids of its rows (zeros elsewhere); g sums the shards.
ValueId Graph::embedding_shard(ValueId table, ValueId ids, DType out_dtype, const std::string& name) {
  const TensorShard tp = values_[table].tp;
  TESSERA_CHECK(
      tp.dim == 0, ErrorKind::kConfig,
      "{}: the embedding table is split over the tensor axis on its embed dimension; Tessera splits "
      "it by vocabulary rows only (map `embed` to no tensor axis in logical_axis_rules)",
      name);
  const Shape& ts = values_[table].shape;
  ValueId part = activation(name + ".shard", Shape{values_[ids].shape.numel(), ts[1]}, out_dtype);
  Node n = make(OpKind::kVocabEmbedding, {table, ids}, {part}, name + ".shard", phase_, layer_);
  n.attrs.vocab_offset = tp.offset;
  n.attrs.vocab = tp.global;
  add_node(n);
  return tp_all_reduce(part, name);
}

ValueId Graph::rms_norm(ValueId x, ValueId gamma, float eps, const std::string& name) {
  const Value& xv = values_[x];
  TESSERA_CHECK(!xv.tp.split() && !values_[gamma].tp.split(), ErrorKind::kConfig,
                "{}: a norm needs its whole input and scale, but they are split over the tensor axis", name);
  ValueId y = activation(name, xv.shape, xv.dtype);
  ValueId rstd = activation(name + ".rstd", Shape{xv.shape[0]}, DType::kF32);
  Node n = make(OpKind::kRmsNorm, {x, gamma}, {y, rstd}, name, phase_, layer_);
  n.attrs.eps = eps;
  add_node(n);
  return y;
}

// c = a·op(b). With a tensor-split b (see the file comment): column-parallel when b is split on its
// output dimension, row-parallel (partial sums, then g) when split on its input dimension.
ValueId Graph::matmul(ValueId a, ValueId b, const std::string& name, const std::string& ckpt, bool trans_b) {
  const TensorShard at = values_[a].tp, bt = values_[b].tp;
  const int b_in = trans_b ? 1 : 0, b_out = trans_b ? 0 : 1;
  const bool row_parallel = bt.split() && bt.dim == b_in;
  if (bt.split() && bt.dim == b_out) {
    TESSERA_CHECK(!at.split(), ErrorKind::kConfig,
                  "{}: both operands are split over the tensor axis ({} on its columns and {} on its output)",
                  name, values_[a].name, values_[b].name);
    a = tp_copy(a, values_[a].name + ".tp_copy");
  } else if (row_parallel) {
    TESSERA_CHECK(
        at.dim == 1 && at.offset == bt.offset && at.global == bt.global, ErrorKind::kConfig,
        "{}: {} is split over the tensor axis on its input dimension, but {} is not split the same way", name,
        values_[b].name, values_[a].name);
  } else {
    TESSERA_CHECK(!at.split(), ErrorKind::kConfig,
                  "{}: {} is split over the tensor axis but the weight {} is whole", name, values_[a].name,
                  values_[b].name);
  }
  const Value& av = values_[a];
  const Value& bv = values_[b];
  int64_t k = bv.shape[b_in];
  TESSERA_CHECK_SHAPE(av.shape[1] == k, "{}: inner dimensions differ, {} vs {}", name, av.shape.str(),
                      bv.shape.str());
  const std::string cname = row_parallel ? name + ".partial" : name;
  ValueId c = activation(cname, Shape{av.shape[0], bv.shape[b_out]}, av.dtype);
  Node n = make(OpKind::kMatmul, {a, b}, {c}, cname, phase_, layer_, row_parallel ? "" : ckpt);
  n.attrs.trans_b = trans_b;
  add_node(n);
  if (row_parallel) return tp_all_reduce(c, name, ckpt);
  if (bt.split()) values_[c].tp = TensorShard{.dim = 1, .offset = bt.offset, .global = bt.global};
  return c;
}

ValueId Graph::rope(ValueId x, ValueId positions, int batch, int seq, int heads, int head_dim,
                    const std::string& name) {
  const Value& xv = values_[x];
  TESSERA_CHECK_SHAPE(xv.shape[1] == static_cast<int64_t>(heads) * head_dim,
                      "{}: {} heads of {} do not match {}", name, heads, head_dim, xv.shape.str());
  const TensorShard tp = xv.tp;
  ValueId y = activation(name, xv.shape, xv.dtype);
  values_[y].tp = tp;
  Node n = make(OpKind::kRope, {x, positions}, {y}, name, phase_, layer_);
  n.attrs.batch = batch;
  n.attrs.seq = seq;
  n.attrs.heads = heads;
  n.attrs.head_dim = head_dim;
  add_node(n);
  return y;
}

ValueId Graph::attention(ValueId q, ValueId k, ValueId v, ValueId segment_ids, const NodeAttrs& shape,
                         const std::string& name) {
  const Value& qv = values_[q];
  const TensorShard tp = qv.tp;
  TESSERA_CHECK(tp.split() == values_[k].tp.split() && tp.split() == values_[v].tp.split(),
                ErrorKind::kConfig,
                "{}: the query, key and value projections must be split over the tensor axis alike (heads, "
                "kv_heads in logical_axis_rules)",
                name);
  TESSERA_CHECK_SHAPE(qv.shape[1] == static_cast<int64_t>(shape.heads) * shape.head_dim &&
                          values_[k].shape[1] == static_cast<int64_t>(shape.kv_heads) * shape.head_dim,
                      "{}: {} query and {} kv heads of {} do not match q {} and k {}", name, shape.heads,
                      shape.kv_heads, shape.head_dim, qv.shape.str(), values_[k].shape.str());
  ValueId o = activation(name, qv.shape, qv.dtype);
  values_[o].tp = tp;
  ValueId lse = activation(name + ".lse", Shape{shape.batch, shape.heads, shape.seq}, DType::kF32);
  std::vector<ValueId> in = {q, k, v};
  if (segment_ids != kNoValue) in.push_back(segment_ids);
  Node n = make(OpKind::kAttention, in, {o, lse}, name, phase_, layer_, "context");
  n.attrs = shape;
  add_node(n);
  return o;
}

ValueId Graph::glu(int act, ValueId gate, ValueId up, const std::string& name, const std::string& ckpt) {
  const Value& gv = values_[gate];
  const TensorShard tp = gv.tp;
  TESSERA_CHECK(tp == values_[up].tp, ErrorKind::kConfig,
                "{}: the gate and up projections are split differently over the tensor axis", name);
  ValueId y = activation(name, gv.shape, gv.dtype);
  values_[y].tp = tp;
  Node n = make(OpKind::kGlu, {gate, up}, {y}, name, phase_, layer_, ckpt);
  n.attrs.activation = act;
  add_node(n);
  return y;
}

ValueId Graph::add(ValueId a, ValueId b, const std::string& name) {
  const Value& av = values_[a];
  TESSERA_CHECK_SHAPE(av.shape == values_[b].shape && av.dtype == values_[b].dtype,
                      "{}: add of {} and {}", name, av.shape.str(), values_[b].shape.str());
  TESSERA_CHECK(av.tp == values_[b].tp, ErrorKind::kConfig,
                "{}: the two terms are split differently over the tensor axis", name);
  const TensorShard tp = av.tp;
  ValueId y = activation(name, av.shape, av.dtype);
  values_[y].tp = tp;
  add_node(make(OpKind::kAdd, {a, b}, {y}, name, phase_, layer_));
  return y;
}

ValueId Graph::cross_entropy(ValueId logits, ValueId targets, float z_loss, const std::string& name) {
  if (values_[logits].tp.split()) return cross_entropy_shard(logits, targets, z_loss, name);
  int64_t n_tok = values_[logits].shape[0];
  ValueId loss = activation(name, Shape{n_tok}, DType::kF32);
  ValueId lse = activation(name + ".lse", Shape{n_tok}, DType::kF32);
  Node n = make(OpKind::kCrossEntropy, {logits, targets}, {loss, lse}, name, phase_, layer_);
  n.attrs.z_loss = z_loss;
  add_node(n);
  return loss;
}

// Vocab-parallel: the node runs ops/vocab_parallel.h's three steps around two all-reduces of [N]
// and [2, N] floats (stats); every tensor rank ends with the whole loss and lse.
ValueId Graph::cross_entropy_shard(ValueId logits, ValueId targets, float z_loss, const std::string& name) {
  const TensorShard tp = values_[logits].tp;
  TESSERA_ASSERT(tp.dim == 1);
  int64_t n_tok = values_[logits].shape[0];
  ValueId loss = activation(name, Shape{n_tok}, DType::kF32);
  ValueId lse = activation(name + ".lse", Shape{n_tok}, DType::kF32);
  ValueId stats = activation(name + ".stats", Shape{2, n_tok}, DType::kF32);
  Node n = make(OpKind::kVocabCrossEntropy, {logits, targets}, {loss, lse, stats}, name, phase_, layer_);
  n.attrs.z_loss = z_loss;
  n.attrs.vocab_offset = tp.offset;
  n.attrs.vocab = tp.global;
  add_node(n);
  return loss;
}

ValueId Graph::tp_copy(ValueId x, const std::string& name) {
  for (auto [from, to] : copies_)
    if (from == x) return to;
  const Value xv = values_[x];
  ValueId y = activation(name, xv.shape, xv.dtype);
  values_[y].alias_of = x;  // the identity: no copy, the readers see x's buffer
  add_node(make(OpKind::kTpCopy, {x}, {y}, name, phase_, layer_));
  copies_.emplace_back(x, y);
  return y;
}

ValueId Graph::tp_all_reduce(ValueId x, const std::string& name, const std::string& ckpt, bool in_place) {
  const Value xv = values_[x];
  ValueId y = activation(name, xv.shape, xv.dtype);
  if (in_place) values_[y].alias_of = x;
  std::vector<ValueId> out = {y};
  // Reductions run in f32 (communicator.h): a bf16 value is summed through an f32 copy.
  if (xv.dtype != DType::kF32) out.push_back(activation(name + ".f32", xv.shape, DType::kF32));
  add_node(make(OpKind::kTpAllReduce, {x}, out, name, phase_, layer_, ckpt));
  return y;
}

TensorParallelTraffic tensor_parallel_traffic(const Graph& g) {
  TensorParallelTraffic t;
  for (const Node& n : g.nodes()) {
    double bytes = 0;
    if (n.op == OpKind::kTpAllReduce) {
      bytes = 4.0 * static_cast<double>(g.value(n.in[0]).shape.numel());
      t.all_reduces += 1;
    } else if (n.op == OpKind::kVocabCrossEntropy) {
      bytes = 4.0 * 3 * static_cast<double>(g.value(n.in[0]).shape[0]);  // max of [N], sums of [2, N]
      t.all_reduces += 2;
    }
    (n.phase == Phase::kForward ? t.forward : n.phase == Phase::kRecompute ? t.recompute : t.backward) += bytes;
  }
  return t;
}

std::vector<ValueId> Graph::params() const {
  std::vector<ValueId> out;
  for (size_t i = 0; i < values_.size(); ++i)
    if (values_[i].kind == ValueKind::kParam) out.push_back(static_cast<ValueId>(i));
  return out;
}

}  // namespace tessera::graph
