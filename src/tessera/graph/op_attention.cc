// The attention op families of the op table (op_table.h): rope, causal attention (GQA, sliding
// window, packed segments, sinks) and decoding's cached attention, each with its shapes, sharding rule,
// backward rule, kernel call and FLOPs side by side. Activations are [N, heads*D], seen as [B, T, heads, D]
// by the kernels.
#include "tessera/core/error.h"
#include "tessera/graph/autodiff.h"
#include "tessera/graph/op_families.h"
#include "tessera/graph/sharding.h"
#include "tessera/graph/workspace.h"
#include "tessera/ops/attention.h"
#include "tessera/ops/decode_attention.h"
#include "tessera/ops/rope.h"

namespace tessera::graph {

namespace {

// ---- rope: rotate-half rotary embeddings at the given positions [B, T] --------------------------

std::vector<OutputSpec> rope_infer(const Graph& g, const Node& n) {
  const RopeAttrs& a = n.attr<RopeAttrs>();
  const Value& x = g.value(n.in[0]);
  TESSERA_CHECK_SHAPE(x.shape.rank() == 2 && x.shape[1] == static_cast<int64_t>(a.heads) * a.head_dim &&
                          x.shape[0] == static_cast<int64_t>(a.batch) * a.seq,
                      "{}: {} heads of {} over {} x {} tokens do not match {}", n.name, a.heads, a.head_dim,
                      a.batch, a.seq, x.shape.str());
  return {{"", x.shape, x.dtype}};
}

// Rotation is per head: a tensor rank rotates the heads it holds.
void rope_shard(ShardBuilder& sb, Node n) {
  const Value& x = sb.graph().value(n.in[0]);
  RopeAttrs& a = n.attr<RopeAttrs>();
  a.heads = static_cast<int>(x.shape[1] / a.head_dim);
  sb.set_shard(n.out[0], x.tp);
  sb.emit(std::move(n));
}

void rope_backward(GradBuilder& gb, const Node& f, ValueId dy) {
  ValueId dx = gb.grad_value(f.in[0]);
  gb.add(gb.node(OpKind::kRopeBwd, {dy, f.in[1]}, {dx}, ".bwd"));
  gb.contribute(f.in[0], dx);
}

Tensor rope_view(const Tensor& t, const RopeAttrs& a) {
  return heads_view(t, a.batch, a.seq, a.heads, a.head_dim);
}

// The executor's table, or its local companion for a local node (Gemma 3's sliding layers).
const ops::RopeTable& rope_table(const RunContext& c, const Node& n) {
  TESSERA_CHECK(c.rope != nullptr, ErrorKind::kInternal, "{}: the executor has no RoPE table", n.name);
  if (!n.attr<RopeAttrs>().local) return *c.rope;
  TESSERA_CHECK(c.rope->local() != nullptr, ErrorKind::kInternal,
                "{}: a local rotation, but the RoPE table has no local companion", n.name);
  return *c.rope->local();
}

void rope_run(const RunContext& c, const Node& n) {
  const RopeAttrs& a = n.attr<RopeAttrs>();
  ops::rope_fwd(rope_view(c.in(n, 0), a), c.in(n, 1), rope_table(c, n), ops::RopeLayout::kRotateHalf,
                rope_view(c.out(n, 0), a));
}

void rope_bwd_run(const RunContext& c, const Node& n) {  // in: dy, positions
  const RopeAttrs& a = n.attr<RopeAttrs>();
  ops::rope_bwd(rope_view(c.in(n, 0), a), c.in(n, 1), rope_table(c, n), ops::RopeLayout::kRotateHalf,
                rope_view(c.out(n, 0), a));
}

// ---- attention: o = softmax(q kᵀ / sqrt(D), causal) v; lse [B, heads, T] kept for the backward ----
// in: q, k, v [, segment_ids]

std::vector<OutputSpec> attention_infer(const Graph& g, const Node& n) {
  const AttentionAttrs& a = n.attr<AttentionAttrs>();
  const Value& q = g.value(n.in[0]);
  const Value& k = g.value(n.in[1]);
  const Value& v = g.value(n.in[2]);
  TESSERA_CHECK_SHAPE(q.shape[1] == static_cast<int64_t>(a.heads) * a.head_dim &&
                          k.shape[1] == static_cast<int64_t>(a.kv_heads) * a.head_dim && v.shape == k.shape,
                      "{}: {} query and {} kv heads of {} do not match q {}, k {} and v {}", n.name, a.heads,
                      a.kv_heads, a.head_dim, q.shape.str(), k.shape.str(), v.shape.str());
  return {{"", q.shape, q.dtype}, {".lse", Shape{a.batch, a.heads, a.seq}, DType::kF32}};
}

// A tensor rank attends with the query heads it holds and their key/value heads.
void attention_shard(ShardBuilder& sb, Node n) {
  const Graph& g = sb.graph();
  const TensorShard tp = sb.shard(n.in[0]);
  TESSERA_CHECK(tp.split() == sb.shard(n.in[1]).split() && tp.split() == sb.shard(n.in[2]).split(),
                ErrorKind::kConfig,
                "{}: the query, key and value projections must be split over the tensor axis alike (heads, "
                "kv_heads in logical_axis_rules)",
                n.name);
  AttentionAttrs& a = n.attr<AttentionAttrs>();
  TESSERA_CHECK(!a.sinks || sb.shard(n.in.back()).split() == tp.split(), ErrorKind::kConfig,
                "{}: the attention sinks must be split over the tensor axis like the query heads", n.name);
  a.heads = static_cast<int>(g.value(n.in[0]).shape[1] / a.head_dim);
  a.kv_heads = static_cast<int>(g.value(n.in[1]).shape[1] / a.head_dim);
  sb.set_shard(n.out[0], tp);
  sb.emit(std::move(n));
}

void attention_backward(GradBuilder& gb, const Node& f, ValueId dy) {
  ValueId dq = gb.grad_value(f.in[0]), dk = gb.grad_value(f.in[1]), dv = gb.grad_value(f.in[2]);
  std::vector<ValueId> in = {dy, f.in[0], f.in[1], f.in[2], f.out[0], f.out[1]};
  in.insert(in.end(), f.in.begin() + 3, f.in.end());  // segment ids, sinks
  std::vector<ValueId> out = {dq, dk, dv};
  if (f.attr<AttentionAttrs>().sinks) {
    TESSERA_ASSERT(gb.is_param(f.in.back()));
    out.push_back(gb.param_grad(f.in.back()));
  }
  gb.add(gb.node(OpKind::kAttentionBwd, in, out, ".bwd"));
  gb.contribute(f.in[0], dq);
  gb.contribute(f.in[1], dk);
  gb.contribute(f.in[2], dv);
}

// The node's segment ids sit at seg_index when present; its sinks, when it has them, last.
ops::AttentionOptions attention_options(const RunContext& c, const Node& n, size_t seg_index) {
  ops::AttentionOptions o;
  const AttentionAttrs& a = n.attr<AttentionAttrs>();
  o.sliding_window = a.sliding_window;
  o.scale = a.scale;
  o.logits_soft_cap = a.logits_soft_cap;
  const size_t optional = n.in.size() - seg_index;  // segment ids and sinks
  if (optional > (a.sinks ? 1u : 0u)) o.segment_ids = c.in(n, seg_index);
  if (a.sinks) o.sinks = c.in(n, n.in.size() - 1);
  return o;
}

Tensor q_view(const Tensor& t, const AttentionAttrs& a) {
  return heads_view(t, a.batch, a.seq, a.heads, a.head_dim);
}
Tensor kv_view(const Tensor& t, const AttentionAttrs& a) {
  return heads_view(t, a.batch, a.seq, a.kv_heads, a.head_dim);
}

void attention_run(const RunContext& c, const Node& n) {
  const AttentionAttrs& a = n.attr<AttentionAttrs>();
  ops::attention_fwd(q_view(c.in(n, 0), a), kv_view(c.in(n, 1), a), kv_view(c.in(n, 2), a),
                     q_view(c.out(n, 0), a), c.out(n, 1), attention_options(c, n, 3));
}

void attention_bwd_run(const RunContext& c, const Node& n) {  // in: do, q, k, v, o, lse [, seg] [, sinks]
  const AttentionAttrs& a = n.attr<AttentionAttrs>();
  const ops::AttentionOptions o = attention_options(c, n, 6);
  ops::attention_bwd(q_view(c.in(n, 0), a), q_view(c.in(n, 1), a), kv_view(c.in(n, 2), a),
                     kv_view(c.in(n, 3), a), q_view(c.in(n, 4), a), c.in(n, 5), q_view(c.out(n, 0), a),
                     kv_view(c.out(n, 1), a), kv_view(c.out(n, 2), a), o);
  if (a.sinks)
    ops::attention_sinks_bwd(q_view(c.in(n, 0), a), q_view(c.in(n, 4), a), c.in(n, 5), c.out(n, 3), o);
}

double attention_flops(const Graph&, const Node& n) {
  const AttentionAttrs& a = n.attr<AttentionAttrs>();
  return ops::attention_fwd_flops(a.batch, a.seq, a.heads, a.head_dim, a.sliding_window);
}

double attention_bwd_flops(const Graph&, const Node& n) {
  const AttentionAttrs& a = n.attr<AttentionAttrs>();
  return ops::attention_bwd_flops(a.batch, a.seq, a.heads, a.head_dim, a.sliding_window);
}

// ---- cached attention (decoding): store each row's k, v in the KV cache, then attend ------------
// in: q [M, H*D], k, v [M, K*D], k_cache, v_cache [S, T, K, D], positions [1, M], slots [M] [, sinks]
// out: o [M, H*D], index [2, M] int32 (the kernel's slot and length per row: scratch), lse [H, M]
// f32 (scratch of the prompt path below)
// A step whose rows are one slot's positions 0..M-1 (a prompt's first chunk) is causal attention
// over those cache rows, which the tiled training kernel (ops/attention.h) computes at GEMM-like
// speed; any other step (decode rows, a later chunk attending to earlier ones) runs the decoding
// kernel (ops/decode_attention.h), one query row at a time against its slot's cache.

std::vector<OutputSpec> cached_attention_infer(const Graph& g, const Node& n) {
  const AttentionAttrs& a = n.attr<AttentionAttrs>();
  const Value& q = g.value(n.in[0]);
  const Value& k = g.value(n.in[1]);
  const Value& v = g.value(n.in[2]);
  const Value& kc = g.value(n.in[3]);
  const Value& vc = g.value(n.in[4]);
  const Value& pos = g.value(n.in[5]);
  const Value& slots = g.value(n.in[6]);
  const int64_t M = q.shape[0], H = a.heads, K = a.kv_heads, D = a.head_dim;
  TESSERA_CHECK_SHAPE(q.shape == (Shape{M, H * D}) && k.shape == (Shape{M, K * D}) && v.shape == k.shape &&
                          a.batch == 1 && a.seq == M,
                      "{}: {} query and {} kv heads of {} over {} rows do not match q {}, k {} and v {}",
                      n.name, H, K, D, a.seq, q.shape.str(), k.shape.str(), v.shape.str());
  TESSERA_CHECK_SHAPE(kc.kind == ValueKind::kCache && vc.kind == ValueKind::kCache && kc.shape.rank() == 4 &&
                          kc.shape[2] == K && kc.shape[3] == D && vc.shape == kc.shape &&
                          kc.dtype == q.dtype && vc.dtype == q.dtype && k.dtype == q.dtype &&
                          v.dtype == q.dtype,
                      "{}: the caches must be {} KV caches [S, T, {}, {}], got {} and {}", n.name,
                      dtype_name(q.dtype), K, D, kc.shape.str(), vc.shape.str());
  TESSERA_CHECK_SHAPE(pos.shape.numel() == M && pos.dtype == DType::kI32 && slots.shape == (Shape{M}) &&
                          slots.dtype == DType::kI32,
                      "{}: positions and slots must be int32 with {} elements, got {} and {}", n.name, M,
                      pos.shape.str(), slots.shape.str());
  return {{"", q.shape, q.dtype}, {".index", Shape{2, M}, DType::kI32}, {".lse", Shape{H, M}, DType::kF32}};
}

// Whether rows [0, M) are positions 0..M-1 of one slot.
bool fresh_prompt(const int32_t* pos, const int32_t* slot, int64_t M) {
  if (M < 2 || slot[0] < 0) return false;
  for (int64_t m = 0; m < M; ++m)
    if (slot[m] != slot[0] || pos[m] != m) return false;
  return true;
}

void cached_attention_run(const RunContext& c, const Node& n) {
  const AttentionAttrs& a = n.attr<AttentionAttrs>();
  const Tensor &q = c.in(n, 0), &k = c.in(n, 1), &v = c.in(n, 2), &kc = c.in(n, 3), &vc = c.in(n, 4);
  const int32_t* pos = c.in(n, 5).ptr<int32_t>();
  const int32_t* slot = c.in(n, 6).ptr<int32_t>();
  const Tensor& out = c.out(n, 0);
  const Tensor& index = c.out(n, 1);
  const int64_t M = q.dim(0), S = kc.dim(0), T = kc.dim(1), H = a.heads, K = a.kv_heads, D = a.head_dim;
  const size_t row_bytes = static_cast<size_t>(K * D) * dtype_size(q.dtype());
  int32_t* idx_slot = index.ptr<int32_t>();
  int32_t* idx_len = idx_slot + M;
  bool padded = false;
  for (int64_t m = 0; m < M; ++m) {  // every row's key and value first: a prefill's rows see each other's
    if (slot[m] < 0) {
      idx_slot[m] = 0, idx_len[m] = 1, padded = true;  // attends to something; its output is cleared
      continue;
    }
    TESSERA_CHECK_SHAPE(slot[m] < S && pos[m] >= 0 && pos[m] < T,
                        "{}: row {} is at slot {}, position {}; the cache has {} slots of {} positions",
                        n.name, m, slot[m], pos[m], S, T);
    const size_t at = static_cast<size_t>(slot[m] * T + pos[m]) * row_bytes;
    std::memcpy(static_cast<char*>(kc.data()) + at, static_cast<const char*>(k.data()) + m * row_bytes,
                row_bytes);
    std::memcpy(static_cast<char*>(vc.data()) + at, static_cast<const char*>(v.data()) + m * row_bytes,
                row_bytes);
    idx_slot[m] = slot[m], idx_len[m] = pos[m] + 1;
  }
  const Tensor sinks = a.sinks ? c.in(n, n.in.size() - 1) : Tensor();
  if (fresh_prompt(pos, slot, M)) {
    const auto rows = [&](const Tensor& cache) {
      return Tensor(static_cast<char*>(cache.data()) + static_cast<size_t>(slot[0] * T) * row_bytes,
                    Shape{1, M, K, D}, cache.dtype());
    };
    ops::AttentionOptions o{
        .scale = a.scale, .sliding_window = a.sliding_window, .logits_soft_cap = a.logits_soft_cap};
    o.sinks = sinks;
    ops::attention_fwd(q.reshape(Shape{1, M, H, D}), rows(kc), rows(vc), out.reshape(Shape{1, M, H, D}),
                       c.out(n, 2).reshape(Shape{1, H, M}), o);
    return;
  }
  ops::DecodeAttentionOptions o{
      .scale = a.scale, .sliding_window = a.sliding_window, .logits_soft_cap = a.logits_soft_cap};
  o.sinks = sinks;
  ops::decode_attention(q.reshape(Shape{M, H, D}), kc, vc, index.slice0(0, 1).reshape(Shape{M}),
                        index.slice0(1, 2).reshape(Shape{M}), out.reshape(Shape{M, H, D}), o);
  if (padded)
    for (int64_t m = 0; m < M; ++m)
      if (slot[m] < 0) std::memset(out.slice0(m, m + 1).data(), 0, out.slice0(m, m + 1).nbytes());
}

[[noreturn]] void cached_attention_backward(GradBuilder&, const Node& f, ValueId) {
  fail(ErrorKind::kInternal, "{}: cached attention is a decoding op (inference graphs have no backward)",
       f.name);
}

// The FLOPs of rows that each see the whole window or cache (the keys a row sees are known only
// when it runs): an upper bound, for reports.
double cached_attention_flops(const Graph& g, const Node& n) {
  const AttentionAttrs& a = n.attr<AttentionAttrs>();
  const int64_t T = g.value(n.in[3]).shape[1];
  const int64_t keys = a.sliding_window > 0 ? std::min<int64_t>(a.sliding_window, T) : T;
  return 4.0 * static_cast<double>(a.seq) * static_cast<double>(keys) * a.heads * a.head_dim;
}

}  // namespace

std::vector<OpDef> attention_op_defs() {
  return {
      {.kind = OpKind::kRope,
       .name = "rope",
       .infer = rope_infer,
       .backward = rope_backward,
       .shard = rope_shard,
       .run = rope_run},
      {.kind = OpKind::kRopeBwd, .name = "rope_bwd", .run = rope_bwd_run},
      {.kind = OpKind::kAttention,
       .name = "attention",
       .infer = attention_infer,
       .backward = attention_backward,
       .shard = attention_shard,
       .run = attention_run,
       .flops = attention_flops},
      {.kind = OpKind::kAttentionBwd,
       .name = "attention_bwd",
       .run = attention_bwd_run,
       .flops = attention_bwd_flops},
      {.kind = OpKind::kCachedAttention,
       .name = "cached_attention",
       .infer = cached_attention_infer,
       .backward = cached_attention_backward,
       .run = cached_attention_run,
       .flops = cached_attention_flops},
  };
}

}  // namespace tessera::graph
