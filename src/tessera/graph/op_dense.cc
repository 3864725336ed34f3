// The dense op families of the op table (op_table.h): matmul (and an inference graph's
// shared-input matmuls), add, bias_add, glu, activation, rms_norm and layer_norm, each with its shapes,
// sharding rule, backward rule, kernel call and FLOPs side by side.
#include <fmt/format.h>

#include <array>
#include <span>

#include "tessera/core/error.h"
#include "tessera/graph/autodiff.h"
#include "tessera/graph/op_families.h"
#include "tessera/graph/sharding.h"
#include "tessera/ops/activation.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/gemv.h"
#include "tessera/ops/matmul.h"
#include "tessera/ops/norm.h"

namespace tessera::graph {

namespace {

// ---- matmul: c = op(a)·op(b), op(x) = xᵀ when trans (+= c when accumulate) ----------------------

std::vector<OutputSpec> matmul_infer(const Graph& g, const Node& n) {
  const MatmulAttrs& a = n.attr<MatmulAttrs>();
  const Value& av = g.value(n.in[0]);
  const Value& bv = g.value(n.in[1]);
  const int64_t m = a.trans_a ? av.shape[1] : av.shape[0], k = a.trans_a ? av.shape[0] : av.shape[1];
  const int b_in = a.trans_b ? 1 : 0, b_out = a.trans_b ? 0 : 1;
  TESSERA_CHECK_SHAPE(k == bv.shape[b_in], "{}: inner dimensions differ, {} vs {}", n.name, av.shape.str(),
                      bv.shape.str());
  return {{"", Shape{m, bv.shape[b_out]}, av.dtype}};
}

// With a tensor-split weight b (sharding.h): column-parallel when b is split on its output
// dimension, row-parallel (partial sums, then g) when split on its input dimension.
void matmul_shard(ShardBuilder& sb, Node n) {
  const Graph& g = sb.graph();
  const ValueId a = n.in[0], b = n.in[1];
  const TensorShard at = sb.shard(a), bt = sb.shard(b);
  const bool trans_b = n.attr<MatmulAttrs>().trans_b;
  const int b_in = trans_b ? 1 : 0, b_out = trans_b ? 0 : 1;
  if (bt.split() && bt.dim == b_out) {
    TESSERA_CHECK(!at.split(), ErrorKind::kConfig,
                  "{}: both operands are split over the tensor axis ({} on its columns and {} on its output)",
                  n.name, g.value(a).name, g.value(b).name);
    n.in[0] = sb.tp_copy(a);
    sb.set_shard(n.out[0], TensorShard{.dim = 1, .offset = bt.offset, .global = bt.global});
    sb.emit(std::move(n));
    return;
  }
  if (bt.split() && bt.dim == b_in) {
    TESSERA_CHECK(
        at.dim == 1 && at.offset == bt.offset && at.global == bt.global, ErrorKind::kConfig,
        "{}: {} is split over the tensor axis on its input dimension, but {} is not split the same way",
        n.name, g.value(b).name, g.value(a).name);
    const std::string name = n.name, ckpt = n.ckpt_name;
    const ValueId partial = n.out[0];
    sb.graph().value(partial).name += ".partial";
    n.name += ".partial";
    n.ckpt_name.clear();
    sb.emit(std::move(n));
    sb.replace(partial, sb.all_reduce(partial, name, ckpt));
    return;
  }
  TESSERA_CHECK(!at.split(), ErrorKind::kConfig,
                "{}: {} is split over the tensor axis but the weight {} is whole", n.name, g.value(a).name,
                g.value(b).name);
  sb.emit(std::move(n));
}

void matmul_backward(GradBuilder& gb, const Node& f, ValueId dy) {
  const ValueId a = f.in[0], b = f.in[1];
  const bool tb = f.attr<MatmulAttrs>().trans_b;
  if (gb.needs(a)) {  // c = a·op(b)  =>  da = dc·op(b)ᵀ
    ValueId da = gb.grad_value(a);
    Node n = gb.node(OpKind::kMatmul, {dy, b}, {da}, ".dx");
    n.attrs = MatmulAttrs{.trans_b = !tb};
    gb.add(std::move(n));
    gb.contribute(a, da);
  }
  if (gb.is_param(b)) {  // db += aᵀ·dc, or for op(b) = bᵀ: db += dcᵀ·a
    Node n =
        gb.node(OpKind::kMatmul, tb ? std::vector{dy, a} : std::vector{a, dy}, {gb.param_grad(b)}, ".dw");
    n.attrs = MatmulAttrs{.trans_a = true, .accumulate = true};
    gb.add(std::move(n));
  } else {
    TESSERA_ASSERT(!gb.needs(b));  // activation x activation products go through attention
  }
}

void matmul_run(const RunContext& c, const Node& n) {
  const MatmulAttrs& a = n.attr<MatmulAttrs>();
  const Tensor& x = c.in(n, 0);
  if (c.graph->inference() && a.trans_b && !a.trans_a && ops::gemv_is_faster(x)) {
    ops::gemv(x, c.in(n, 1), c.out(n, 0), {.accumulate = a.accumulate});
    return;
  }
  ops::matmul(c.in(n, 0), c.in(n, 1), c.out(n, 0),
              {.trans_a = a.trans_a, .trans_b = a.trans_b, .accumulate = a.accumulate});
}

// Products of one input as one gemv call (graph.h's kSharedInputMatmuls), or, where the device's
// GEMM is the faster at these rows, as the products the node stands for.
void shared_input_matmuls_run(const RunContext& c, const Node& n) {
  std::array<Tensor, ops::kMaxGemvProducts> w, y;
  TESSERA_ASSERT(n.out.size() <= w.size() && n.in.size() == n.out.size() + 1);
  for (size_t p = 0; p < n.out.size(); ++p) w[p] = c.in(n, p + 1), y[p] = c.out(n, p);
  const Tensor& x = c.in(n, 0);
  if (ops::gemv_is_faster(x)) {
    ops::gemv(x, std::span(w.data(), n.out.size()), std::span(y.data(), n.out.size()));
    return;
  }
  for (size_t p = 0; p < n.out.size(); ++p) ops::matmul(x, w[p], y[p], {.trans_b = true});
}

double shared_input_matmuls_flops(const Graph& g, const Node& n) {
  double f = 0;
  for (ValueId c : n.out) {
    const Shape& s = g.value(c).shape;
    f += 2.0 * static_cast<double>(s[0]) * static_cast<double>(s[1]) *
         static_cast<double>(g.value(n.in[0]).shape[1]);
  }
  return f;
}

double matmul_flops(const Graph& g, const Node& n) {
  const Shape& c = g.value(n.out[0]).shape;
  const Shape& a = g.value(n.in[0]).shape;
  const int64_t k = n.attr<MatmulAttrs>().trans_a ? a[0] : a[1];
  return 2.0 * static_cast<double>(c[0]) * static_cast<double>(c[1]) * static_cast<double>(k);
}

// ---- add: y = a + b ------------------------------------------------------------------------------

std::vector<OutputSpec> add_infer(const Graph& g, const Node& n) {
  const Value& a = g.value(n.in[0]);
  const Value& b = g.value(n.in[1]);
  TESSERA_CHECK_SHAPE(a.shape == b.shape && a.dtype == b.dtype, "{}: add of {} and {}", n.name, a.shape.str(),
                      b.shape.str());
  return {{"", a.shape, a.dtype}};
}

void add_backward(GradBuilder& gb, const Node& f, ValueId dy) {
  gb.contribute(f.in[0], dy);
  gb.contribute(f.in[1], dy);
}

void add_run(const RunContext& c, const Node& n) {
  ops::add(c.in(n, 0), c.in(n, 1), c.out(n, 0));
}

// ---- glu: y = act(gate) * up ---------------------------------------------------------------------

std::vector<OutputSpec> glu_infer(const Graph& g, const Node& n) {
  const Value& gate = g.value(n.in[0]);
  const Value& up = g.value(n.in[1]);
  TESSERA_CHECK_SHAPE(gate.shape == up.shape && gate.dtype == up.dtype, "{}: gate {} and up {} differ",
                      n.name, gate.shape.str(), up.shape.str());
  return {{"", gate.shape, gate.dtype}};
}

void glu_backward(GradBuilder& gb, const Node& f, ValueId dy) {
  ValueId dgate = gb.grad_value(f.in[0]), dup = gb.grad_value(f.in[1]);
  gb.add(gb.node(OpKind::kGluBwd, {dy, f.in[0], f.in[1]}, {dgate, dup}, ".bwd"));
  gb.contribute(f.in[0], dgate);
  gb.contribute(f.in[1], dup);
}

ops::Activation activation_of(const Node& n) {
  return static_cast<ops::Activation>(n.attr<ActivationAttrs>().activation);
}

ops::GluOptions glu_options(const Node& n) {
  const ActivationAttrs& a = n.attr<ActivationAttrs>();
  return {.limit = a.limit, .up_offset = a.up_offset};
}

void glu_run(const RunContext& c, const Node& n) {
  ops::glu_fwd(activation_of(n), c.in(n, 0), c.in(n, 1), c.out(n, 0), glu_options(n));
}

void glu_bwd_run(const RunContext& c, const Node& n) {  // in: dy, gate, up
  ops::glu_bwd(activation_of(n), c.in(n, 1), c.in(n, 2), c.in(n, 0), c.out(n, 0), c.out(n, 1),
               glu_options(n));
}

// ---- rms_norm: y = x / rms(x) * gamma over each row; rstd [N] kept for the backward --------------
// With group G > 0 the rows are runs of G columns (x [N, C] seen as [N*C/G, G], gamma [G], rstd
// [N*C/G]): QK-norm over each head's D.

int64_t norm_width(const Node& n, const Shape& x) {
  const int64_t g = n.attr<NormAttrs>().group;
  return g > 0 ? g : x[1];
}

std::vector<OutputSpec> rms_norm_infer(const Graph& g, const Node& n) {
  const Value& x = g.value(n.in[0]);
  const Value& gamma = g.value(n.in[1]);
  TESSERA_CHECK_SHAPE(x.shape.rank() == 2, "{}: norm of {}: want [N, C]", n.name, x.shape.str());
  const int64_t w = norm_width(n, x.shape);
  TESSERA_CHECK_SHAPE(x.shape[1] % w == 0 && gamma.shape == Shape{w},
                      "{}: norm of {} in groups of {} with scale {}", n.name, x.shape.str(), w,
                      gamma.shape.str());
  return {{"", x.shape, x.dtype}, {".rstd", Shape{x.shape[0] * (x.shape[1] / w)}, DType::kF32}};
}

// A grouped norm (per head) runs on whatever heads this rank holds; a whole-row norm needs the
// whole row.
void rms_norm_shard(ShardBuilder& sb, Node n) {
  const TensorShard xt = sb.shard(n.in[0]);
  const int64_t group = n.attr<NormAttrs>().group;
  if (!xt.split() || group <= 0) return shard_whole(sb, std::move(n));
  TESSERA_CHECK(xt.dim == 1 && xt.offset % group == 0 && !sb.shard(n.in[1]).split(), ErrorKind::kConfig,
                "{}: a per-head norm needs whole heads on each tensor rank", n.name);
  sb.set_shard(n.out[0], xt);
  sb.emit(std::move(n));
}

void rms_norm_backward(GradBuilder& gb, const Node& f, ValueId dy) {
  const ValueId x = f.in[0];
  TESSERA_ASSERT(gb.needs(x));
  ValueId dx = gb.grad_value(x);
  gb.add(gb.node(OpKind::kRmsNormBwd, {dy, x, f.in[1], f.out[1]}, {dx, gb.param_grad(f.in[1])}, ".bwd"));
  gb.contribute(x, dx);
}

// x as the kernels see it: rows of the norm's width.
Tensor rows_of(const Tensor& t, const Node& n) {
  const int64_t w = norm_width(n, t.shape());
  return t.reshape(Shape{t.numel() / w, w});
}

void rms_norm_run(const RunContext& c, const Node& n) {
  const NormAttrs& a = n.attr<NormAttrs>();
  ops::rmsnorm_fwd(rows_of(c.in(n, 0), n), c.in(n, 1), a.eps, rows_of(c.out(n, 0), n), c.out(n, 1), a.offset);
}

void rms_norm_bwd_run(const RunContext& c, const Node& n) {  // in: dy, x, gamma, rstd [, dx's prior]
  const NormAttrs& a = n.attr<NormAttrs>();
  ops::rmsnorm_bwd(rows_of(c.in(n, 1), n), c.in(n, 2), c.in(n, 3), rows_of(c.in(n, 0), n),
                   rows_of(c.out(n, 0), n), c.out(n, 1), a.offset, a.accumulate);
}

// ---- layer_norm: y = (x - mean) * rstd * gamma + beta over each row; mean, rstd [N] kept ----------

std::vector<OutputSpec> layer_norm_infer(const Graph& g, const Node& n) {
  const Value& x = g.value(n.in[0]);
  const Shape col{x.shape.rank() == 2 ? x.shape[1] : 0};
  TESSERA_CHECK_SHAPE(x.shape.rank() == 2 && g.value(n.in[1]).shape == col && g.value(n.in[2]).shape == col,
                      "{}: norm of {} with scale {} and bias {}", n.name, x.shape.str(),
                      g.value(n.in[1]).shape.str(), g.value(n.in[2]).shape.str());
  return {{"", x.shape, x.dtype},
          {".mean", Shape{x.shape[0]}, DType::kF32},
          {".rstd", Shape{x.shape[0]}, DType::kF32}};
}

void layer_norm_backward(GradBuilder& gb, const Node& f, ValueId dy) {
  const ValueId x = f.in[0];
  TESSERA_ASSERT(gb.needs(x));
  ValueId dx = gb.grad_value(x);
  gb.add(gb.node(OpKind::kLayerNormBwd, {dy, x, f.in[1], f.out[1], f.out[2]},
                 {dx, gb.param_grad(f.in[1]), gb.param_grad(f.in[2])}, ".bwd"));
  gb.contribute(x, dx);
}

void layer_norm_run(const RunContext& c, const Node& n) {
  ops::layernorm_fwd(c.in(n, 0), c.in(n, 1), c.in(n, 2), n.attr<NormAttrs>().eps, c.out(n, 0), c.out(n, 1),
                     c.out(n, 2));
}

void layer_norm_bwd_run(const RunContext& c, const Node& n) {  // in: dy, x, gamma, mean, rstd [, prior]
  ops::layernorm_bwd(c.in(n, 1), c.in(n, 2), c.in(n, 3), c.in(n, 4), c.in(n, 0), c.out(n, 0), c.out(n, 1),
                     c.out(n, 2), n.attr<NormAttrs>().accumulate);
}

// ---- bias_add: y = x + bias over the rows; bias an f32 parameter [C] ------------------------------

std::vector<OutputSpec> bias_add_infer(const Graph& g, const Node& n) {
  const Value& x = g.value(n.in[0]);
  const Value& b = g.value(n.in[1]);
  TESSERA_CHECK_SHAPE(x.shape.rank() == 2 && b.shape == Shape{x.shape[1]} && b.dtype == DType::kF32,
                      "{}: bias {} {} for {}", n.name, dtype_name(b.dtype), b.shape.str(), x.shape.str());
  return {{"", x.shape, x.dtype}};
}

// A column-parallel projection's bias is split like its columns; a whole one stays whole.
void bias_add_shard(ShardBuilder& sb, Node n) {
  const TensorShard xt = sb.shard(n.in[0]), bt = sb.shard(n.in[1]);
  const bool whole = !xt.split() && !bt.split();
  const bool alike = xt.dim == 1 && bt.dim == 0 && xt.offset == bt.offset && xt.global == bt.global;
  TESSERA_CHECK(whole || alike, ErrorKind::kConfig,
                "{}: {} and its bias {} are split differently over the tensor axis", n.name,
                sb.graph().value(n.in[0]).name, sb.graph().value(n.in[1]).name);
  sb.set_shard(n.out[0], xt);
  sb.emit(std::move(n));
}

void bias_add_backward(GradBuilder& gb, const Node& f, ValueId dy) {
  gb.contribute(f.in[0], dy);
  if (gb.is_param(f.in[1])) gb.add(gb.node(OpKind::kBiasGrad, {dy}, {gb.param_grad(f.in[1])}, ".dbias"));
}

void bias_add_run(const RunContext& c, const Node& n) {
  ops::bias_add(c.in(n, 0), c.in(n, 1), c.out(n, 0));
}
void bias_grad_run(const RunContext& c, const Node& n) {
  ops::bias_grad(c.in(n, 0), c.out(n, 0));
}

// ---- activation: y = act(x) (the plain MLP) -------------------------------------------------------

std::vector<OutputSpec> activation_infer(const Graph& g, const Node& n) {
  const Value& x = g.value(n.in[0]);
  return {{"", x.shape, x.dtype}};
}

void activation_backward(GradBuilder& gb, const Node& f, ValueId dy) {
  ValueId dx = gb.grad_value(f.in[0]);
  gb.add(gb.node(OpKind::kActivationBwd, {dy, f.in[0]}, {dx}, ".bwd"));
  gb.contribute(f.in[0], dx);
}

void activation_run(const RunContext& c, const Node& n) {
  ops::act_fwd(activation_of(n), c.in(n, 0), c.out(n, 0));
}

void activation_bwd_run(const RunContext& c, const Node& n) {  // in: dy, x
  ops::act_bwd(activation_of(n), c.in(n, 1), c.in(n, 0), c.out(n, 0));
}

// ---- scale: y = a * x; soft_cap: y = cap * tanh(x / cap) ----------------------------------------

float scalar_of(const Node& n) {
  return n.attr<ScalarAttrs>().value;
}

void scale_backward(GradBuilder& gb, const Node& f, ValueId dy) {  // dx = a * dy
  ValueId dx = gb.grad_value(f.in[0]);
  gb.add(gb.node(OpKind::kScale, {dy}, {dx}, ".bwd"));
  gb.contribute(f.in[0], dx);
}

void scale_run(const RunContext& c, const Node& n) {
  ops::scale(c.in(n, 0), scalar_of(n), c.out(n, 0));
}

void soft_cap_backward(GradBuilder& gb, const Node& f, ValueId dy) {
  ValueId dx = gb.grad_value(f.in[0]);
  gb.add(gb.node(OpKind::kSoftCapBwd, {dy, f.in[0]}, {dx}, ".bwd"));
  gb.contribute(f.in[0], dx);
}

void soft_cap_run(const RunContext& c, const Node& n) {
  ops::soft_cap_fwd(c.in(n, 0), scalar_of(n), c.out(n, 0));
}

void soft_cap_bwd_run(const RunContext& c, const Node& n) {  // in: dy, x
  ops::soft_cap_bwd(c.in(n, 1), c.in(n, 0), scalar_of(n), c.out(n, 0));
}

}  // namespace

std::vector<OpDef> dense_op_defs() {
  return {
      {.kind = OpKind::kMatmul,
       .name = "matmul",
       .infer = matmul_infer,
       .backward = matmul_backward,
       .shard = matmul_shard,
       .run = matmul_run,
       .flops = matmul_flops},
      {.kind = OpKind::kSharedInputMatmuls,
       .name = "shared_input_matmuls",
       .run = shared_input_matmuls_run,
       .flops = shared_input_matmuls_flops},
      {.kind = OpKind::kAdd,
       .name = "add",
       .infer = add_infer,
       .backward = add_backward,
       .shard = shard_like_inputs,
       .run = add_run},
      {.kind = OpKind::kGlu,
       .name = "glu",
       .infer = glu_infer,
       .backward = glu_backward,
       .shard = shard_like_inputs,
       .run = glu_run},
      {.kind = OpKind::kGluBwd, .name = "glu_bwd", .run = glu_bwd_run},
      {.kind = OpKind::kRmsNorm,
       .name = "rms_norm",
       .infer = rms_norm_infer,
       .backward = rms_norm_backward,
       .shard = rms_norm_shard,
       .run = rms_norm_run},
      {.kind = OpKind::kRmsNormBwd, .name = "rms_norm_bwd", .run = rms_norm_bwd_run},
      {.kind = OpKind::kLayerNorm,
       .name = "layer_norm",
       .infer = layer_norm_infer,
       .backward = layer_norm_backward,
       .run = layer_norm_run},
      {.kind = OpKind::kLayerNormBwd, .name = "layer_norm_bwd", .run = layer_norm_bwd_run},
      {.kind = OpKind::kBiasAdd,
       .name = "bias_add",
       .infer = bias_add_infer,
       .backward = bias_add_backward,
       .shard = bias_add_shard,
       .run = bias_add_run},
      {.kind = OpKind::kBiasGrad, .name = "bias_grad", .run = bias_grad_run},
      {.kind = OpKind::kActivation,
       .name = "activation",
       .infer = activation_infer,
       .backward = activation_backward,
       .shard = shard_like_inputs,
       .run = activation_run},
      {.kind = OpKind::kActivationBwd, .name = "activation_bwd", .run = activation_bwd_run},
      {.kind = OpKind::kScale,
       .name = "scale",
       .infer = activation_infer,
       .backward = scale_backward,
       .shard = shard_like_inputs,
       .run = scale_run},
      {.kind = OpKind::kSoftCap,
       .name = "soft_cap",
       .infer = activation_infer,
       .backward = soft_cap_backward,
       .shard = shard_like_inputs,
       .run = soft_cap_run},
      {.kind = OpKind::kSoftCapBwd, .name = "soft_cap_bwd", .run = soft_cap_bwd_run},
  };
}

}  // namespace tessera::graph
