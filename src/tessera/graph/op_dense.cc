// The dense op families of the op table (op_table.h): matmul, add, glu and rms_norm, each with its
// shapes, sharding rule, backward rule, kernel call and FLOPs side by side.
#include <fmt/format.h>

#include "tessera/core/error.h"
#include "tessera/graph/autodiff.h"
#include "tessera/graph/op_families.h"
#include "tessera/graph/sharding.h"
#include "tessera/ops/activation.h"
#include "tessera/ops/elementwise.h"
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
        "{}: {} is split over the tensor axis on its input dimension, but {} is not split the same way", n.name,
        g.value(b).name, g.value(a).name);
    const std::string name = n.name, ckpt = n.ckpt_name;
    const ValueId partial = n.out[0];
    sb.graph().value(partial).name += ".partial";
    n.name += ".partial";
    n.ckpt_name.clear();
    sb.emit(std::move(n));
    sb.replace(partial, sb.all_reduce(partial, name, ckpt));
    return;
  }
  TESSERA_CHECK(!at.split(), ErrorKind::kConfig, "{}: {} is split over the tensor axis but the weight {} is whole",
                n.name, g.value(a).name, g.value(b).name);
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
    Node n = gb.node(OpKind::kMatmul, tb ? std::vector{dy, a} : std::vector{a, dy}, {gb.param_grad(b)}, ".dw");
    n.attrs = MatmulAttrs{.trans_a = true, .accumulate = true};
    gb.add(std::move(n));
  } else {
    TESSERA_ASSERT(!gb.needs(b));  // activation x activation products go through attention
  }
}

void matmul_run(const RunContext& c, const Node& n) {
  const MatmulAttrs& a = n.attr<MatmulAttrs>();
  ops::matmul(c.in(n, 0), c.in(n, 1), c.out(n, 0),
              {.trans_a = a.trans_a, .trans_b = a.trans_b, .accumulate = a.accumulate});
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

void add_run(const RunContext& c, const Node& n) { ops::add(c.in(n, 0), c.in(n, 1), c.out(n, 0)); }

// ---- glu: y = act(gate) * up ---------------------------------------------------------------------

std::vector<OutputSpec> glu_infer(const Graph& g, const Node& n) {
  const Value& gate = g.value(n.in[0]);
  const Value& up = g.value(n.in[1]);
  TESSERA_CHECK_SHAPE(gate.shape == up.shape && gate.dtype == up.dtype, "{}: gate {} and up {} differ", n.name,
                      gate.shape.str(), up.shape.str());
  return {{"", gate.shape, gate.dtype}};
}

void glu_backward(GradBuilder& gb, const Node& f, ValueId dy) {
  ValueId dgate = gb.grad_value(f.in[0]), dup = gb.grad_value(f.in[1]);
  gb.add(gb.node(OpKind::kGluBwd, {dy, f.in[0], f.in[1]}, {dgate, dup}, ".bwd"));
  gb.contribute(f.in[0], dgate);
  gb.contribute(f.in[1], dup);
}

ops::Activation activation_of(const Node& n) {
  return static_cast<ops::Activation>(n.attr<GluAttrs>().activation);
}

void glu_run(const RunContext& c, const Node& n) {
  ops::glu_fwd(activation_of(n), c.in(n, 0), c.in(n, 1), c.out(n, 0));
}

void glu_bwd_run(const RunContext& c, const Node& n) {  // in: dy, gate, up
  ops::glu_bwd(activation_of(n), c.in(n, 1), c.in(n, 2), c.in(n, 0), c.out(n, 0), c.out(n, 1));
}

// ---- rms_norm: y = x / rms(x) * gamma over each row; rstd [N] kept for the backward --------------

std::vector<OutputSpec> rms_norm_infer(const Graph& g, const Node& n) {
  const Value& x = g.value(n.in[0]);
  const Value& gamma = g.value(n.in[1]);
  TESSERA_CHECK_SHAPE(x.shape.rank() == 2 && gamma.shape == Shape{x.shape[1]}, "{}: norm of {} with scale {}",
                      n.name, x.shape.str(), gamma.shape.str());
  return {{"", x.shape, x.dtype}, {".rstd", Shape{x.shape[0]}, DType::kF32}};
}

void rms_norm_backward(GradBuilder& gb, const Node& f, ValueId dy) {
  const ValueId x = f.in[0];
  TESSERA_ASSERT(gb.needs(x));
  ValueId dx = gb.grad_value(x);
  gb.add(gb.node(OpKind::kRmsNormBwd, {dy, x, f.in[1], f.out[1]}, {dx, gb.param_grad(f.in[1])}, ".bwd"));
  gb.contribute(x, dx);
}

void rms_norm_run(const RunContext& c, const Node& n) {
  ops::rmsnorm_fwd(c.in(n, 0), c.in(n, 1), n.attr<NormAttrs>().eps, c.out(n, 0), c.out(n, 1));
}

void rms_norm_bwd_run(const RunContext& c, const Node& n) {  // in: dy, x, gamma, rstd
  ops::rmsnorm_bwd(c.in(n, 1), c.in(n, 2), c.in(n, 3), c.in(n, 0), c.out(n, 0), c.out(n, 1));
}

}  // namespace

std::vector<OpDef> dense_op_defs() {
  return {
      {.kind = OpKind::kMatmul, .name = "matmul", .infer = matmul_infer, .backward = matmul_backward,
       .shard = matmul_shard, .run = matmul_run, .flops = matmul_flops},
      {.kind = OpKind::kAdd, .name = "add", .infer = add_infer, .backward = add_backward,
       .shard = shard_like_inputs, .run = add_run},
      {.kind = OpKind::kGlu, .name = "glu", .infer = glu_infer, .backward = glu_backward,
       .shard = shard_like_inputs, .run = glu_run},
      {.kind = OpKind::kGluBwd, .name = "glu_bwd", .run = glu_bwd_run},
      {.kind = OpKind::kRmsNorm, .name = "rms_norm", .infer = rms_norm_infer, .backward = rms_norm_backward,
       .run = rms_norm_run},
      {.kind = OpKind::kRmsNormBwd, .name = "rms_norm_bwd", .run = rms_norm_bwd_run},
  };
}

}  // namespace tessera::graph
