// The mixture-of-experts op families of the op table (op_table.h): routing, the load-balance loss,
// the dispatch into rows grouped by expert, the grouped matmul and the weighted combine (ops/moe.h),
// each with its shapes, backward rule, kernel call and FLOPs side by side. None is sharded over the
// tensor axis yet: their inputs must be whole (the sharding pass says so by name).
#include "tessera/core/error.h"
#include "tessera/graph/autodiff.h"
#include "tessera/graph/op_families.h"
#include "tessera/graph/sharding.h"
#include "tessera/ops/moe.h"

namespace tessera::graph {

namespace {

ops::MoeDispatch dispatch_of(const Node& n) {
  const MoeAttrs& a = n.attr<MoeAttrs>();
  return {.experts = a.experts, .seq = a.seq, .capacity = a.capacity, .dense = a.dense};
}

int64_t buffer_rows(const MoeAttrs& a, int64_t tokens) {
  return a.dense ? tokens * a.experts : tokens * a.k;
}

// ---- moe_route: weights, experts = top-k softmax of the router logits [N, X] ----------------------

std::vector<OutputSpec> route_infer(const Graph& g, const Node& n) {
  const MoeAttrs& a = n.attr<MoeAttrs>();
  const Value& l = g.value(n.in[0]);
  TESSERA_CHECK_SHAPE(l.shape.rank() == 2 && l.shape[1] == a.experts && a.k >= 1 && a.k <= a.experts,
                      "{}: routing logits {} for {} experts, top-{}", n.name, l.shape.str(), a.experts, a.k);
  return {{"", Shape{l.shape[0], a.k}, DType::kF32}, {".experts", Shape{l.shape[0], a.k}, DType::kI32}};
}

void route_backward(GradBuilder& gb, const Node& f, ValueId dy) {
  if (!gb.needs(f.in[0])) return;
  const ValueId dl = gb.grad_value(f.in[0]);
  gb.add(gb.node(OpKind::kMoeRouteBwd, {dy, f.out[0], f.out[1]}, {dl}, ".bwd"));
  gb.contribute(f.in[0], dl);
}

void route_run(const RunContext& c, const Node& n) {
  ops::moe_route(c.in(n, 0), c.out(n, 0), c.out(n, 1));
}

void route_bwd_run(const RunContext& c, const Node& n) {  // in: dweights, weights, experts
  ops::moe_route_backward(c.in(n, 1), c.in(n, 2), c.in(n, 0), c.out(n, 0));
}

// ---- moe_load_balance: MaxText's load-balance loss [1] of the routing -------------------------------

std::vector<OutputSpec> load_balance_infer(const Graph& g, const Node& n) {
  const MoeAttrs& a = n.attr<MoeAttrs>();
  const Value& l = g.value(n.in[0]);
  const Value& e = g.value(n.in[1]);
  TESSERA_CHECK_SHAPE(l.shape.rank() == 2 && l.shape[1] == a.experts && e.shape == (Shape{l.shape[0], a.k}) &&
                          a.batch >= 1 && l.shape[0] % a.batch == 0,
                      "{}: load balance of logits {} and experts {} over {} sequences", n.name, l.shape.str(),
                      e.shape.str(), a.batch);
  return {{"", Shape{1}, DType::kF32}};
}

void load_balance_backward(GradBuilder& gb, const Node& f, ValueId dy) {
  if (!gb.needs(f.in[0])) return;
  const ValueId dl = gb.grad_value(f.in[0]);
  gb.add(gb.node(OpKind::kMoeLoadBalanceBwd, {dy, f.in[0], f.in[1]}, {dl}, ".bwd"));
  gb.contribute(f.in[0], dl);
}

void load_balance_run(const RunContext& c, const Node& n) {
  const MoeAttrs& a = n.attr<MoeAttrs>();
  c.out(n, 0).ptr<float>()[0] =
      static_cast<float>(ops::moe_load_balance(c.in(n, 0), c.in(n, 1), a.batch, a.lb_weight));
}

void load_balance_bwd_run(const RunContext& c, const Node& n) {  // in: dloss [1], logits, experts
  const MoeAttrs& a = n.attr<MoeAttrs>();
  ops::moe_load_balance_backward(c.in(n, 1), c.in(n, 2), a.batch, a.lb_weight, c.in(n, 0).ptr<float>()[0],
                                 c.out(n, 0));
}

// ---- moe_dispatch: the tokens' rows grouped by expert ----------------------------------------------

std::vector<OutputSpec> dispatch_infer(const Graph& g, const Node& n) {
  const MoeAttrs& a = n.attr<MoeAttrs>();
  const Value& x = g.value(n.in[0]);
  const Value& e = g.value(n.in[1]);
  TESSERA_CHECK_SHAPE(x.shape.rank() == 2 && e.shape == (Shape{x.shape[0], a.k}) && e.dtype == DType::kI32,
                      "{}: dispatch of {} by experts {} (top-{})", n.name, x.shape.str(), e.shape.str(), a.k);
  return {{"", Shape{buffer_rows(a, x.shape[0]), x.shape[1]}, x.dtype},
          {".rows", Shape{x.shape[0] * a.k}, DType::kI32},
          {".group_sizes", Shape{a.experts}, DType::kI32}};
}

void dispatch_backward(GradBuilder& gb, const Node& f, ValueId dy) {
  if (!gb.needs(f.in[0])) return;
  const ValueId dx = gb.grad_value(f.in[0]);
  gb.add(gb.node(OpKind::kMoeDispatchBwd, {dy, f.out[1]}, {dx}, ".bwd"));
  gb.contribute(f.in[0], dx);
}

void dispatch_run(const RunContext& c, const Node& n) {
  ops::moe_dispatch(c.in(n, 0), c.in(n, 1), dispatch_of(n), c.out(n, 0), c.out(n, 1), c.out(n, 2));
}

void dispatch_bwd_run(const RunContext& c, const Node& n) {  // in: dxs, rows
  ops::moe_dispatch_backward(c.in(n, 0), c.in(n, 1), dispatch_of(n), c.out(n, 0));
}

// ---- grouped_matmul: rows of group g times the expert weight w[g] -------------------------------------

std::vector<OutputSpec> grouped_infer(const Graph& g, const Node& n) {
  const Value& a = g.value(n.in[0]);
  const Value& w = g.value(n.in[1]);
  const Value& sizes = g.value(n.in[2]);
  TESSERA_CHECK_SHAPE(a.shape.rank() == 2 && w.shape.rank() == 3 && w.shape[1] == a.shape[1] &&
                          sizes.shape == Shape{w.shape[0]} && sizes.dtype == DType::kI32,
                      "{}: grouped matmul of rows {} by expert weights {} with group sizes {}", n.name,
                      a.shape.str(), w.shape.str(), sizes.shape.str());
  return {{"", Shape{a.shape[0], w.shape[2]}, a.dtype}};
}

void grouped_backward(GradBuilder& gb, const Node& f, ValueId dy) {
  const ValueId a = f.in[0], w = f.in[1], sizes = f.in[2];
  const GroupedMatmulAttrs fa = f.attr<GroupedMatmulAttrs>();
  if (gb.needs(a)) {  // da rows of g = dc rows of g · w[g]ᵀ
    const ValueId da = gb.grad_value(a);
    Node n = gb.node(OpKind::kGroupedMatmul, {dy, w, sizes}, {da}, ".dx");
    n.attrs = GroupedMatmulAttrs{
        .trans_b = !fa.trans_b, .useful_rows = fa.useful_rows, .ragged_buffer = fa.ragged_buffer};
    gb.add(std::move(n));
    gb.contribute(a, da);
  }
  TESSERA_ASSERT(gb.is_param(w) && !fa.trans_b);  // expert weights [X, in, out]
  Node n = gb.node(OpKind::kGroupedMatmul, {a, dy, sizes}, {gb.param_grad(w)}, ".dw");
  n.attrs = GroupedMatmulAttrs{.weight_grad = true,
                               .accumulate = true,
                               .useful_rows = fa.useful_rows,
                               .ragged_buffer = fa.ragged_buffer};
  gb.add(std::move(n));
}

void grouped_run(const RunContext& c, const Node& n) {
  const GroupedMatmulAttrs& a = n.attr<GroupedMatmulAttrs>();
  ops::grouped_matmul(c.in(n, 0), c.in(n, 1), c.in(n, 2), c.out(n, 0),
                      {.trans_b = a.trans_b, .weight_grad = a.weight_grad, .accumulate = a.accumulate});
}

// Every operand once, the rows of a receive buffer only as far as they are filled.
double grouped_bytes(const Graph& g, const Node& n) {
  const GroupedMatmulAttrs& a = n.attr<GroupedMatmulAttrs>();
  const int64_t rows = g.value(n.in[0]).shape[0];
  return rows_bytes(g, n, rows, a.ragged_buffer ? std::min(rows, a.useful_rows) : rows);
}

// MaxText's count: the rows the routing chose (N * k), whatever the path computes.
double grouped_flops(const Graph& g, const Node& n) {
  const GroupedMatmulAttrs& a = n.attr<GroupedMatmulAttrs>();
  const Shape& x = g.value(n.in[0]).shape;
  const Shape& out = a.weight_grad ? g.value(n.in[1]).shape : g.value(n.out[0]).shape;
  return 2.0 * static_cast<double>(a.useful_rows) * static_cast<double>(x[1]) * static_cast<double>(out[1]);
}

// ---- moe_combine: y = sum over the token's assignments of weight * expert output ----------------------

std::vector<OutputSpec> combine_infer(const Graph& g, const Node& n) {
  const MoeAttrs& a = n.attr<MoeAttrs>();
  const Value& ys = g.value(n.in[0]);
  const Value& w = g.value(n.in[1]);
  TESSERA_CHECK_SHAPE(ys.shape.rank() == 2 && w.shape.rank() == 2 && w.shape[1] == a.k &&
                          ys.shape[0] == buffer_rows(a, w.shape[0]),
                      "{}: combine of expert rows {} with weights {}", n.name, ys.shape.str(), w.shape.str());
  return {{"", Shape{w.shape[0], ys.shape[1]}, ys.dtype}};
}

void combine_backward(GradBuilder& gb, const Node& f, ValueId dy) {
  const ValueId dys = gb.grad_value(f.in[0]), dw = gb.grad_value(f.in[1]);
  gb.add(gb.node(OpKind::kMoeCombineBwd, {dy, f.in[0], f.in[1], f.in[2]}, {dys, dw}, ".bwd"));
  gb.contribute(f.in[0], dys);
  gb.contribute(f.in[1], dw);
}

void combine_run(const RunContext& c, const Node& n) {
  ops::moe_combine(c.in(n, 0), c.in(n, 1), c.in(n, 2), dispatch_of(n), c.out(n, 0));
}

void combine_bwd_run(const RunContext& c, const Node& n) {  // in: dy, ys, weights, rows
  ops::moe_combine_backward(c.in(n, 0), c.in(n, 1), c.in(n, 2), c.in(n, 3), dispatch_of(n), c.out(n, 0),
                            c.out(n, 1));
}

// ---- grouped_bias_add: y = x + bias[g] on the rows of group g -----------------------------------------

std::vector<OutputSpec> grouped_bias_infer(const Graph& g, const Node& n) {
  const Value& x = g.value(n.in[0]);
  const Value& b = g.value(n.in[1]);
  const Value& sizes = g.value(n.in[2]);
  TESSERA_CHECK_SHAPE(x.shape.rank() == 2 && b.shape == (Shape{sizes.shape[0], x.shape[1]}) &&
                          b.dtype == DType::kF32 && sizes.dtype == DType::kI32,
                      "{}: expert biases {} for rows {} in {} groups", n.name, b.shape.str(), x.shape.str(),
                      sizes.shape.str());
  return {{"", x.shape, x.dtype}};
}

void grouped_bias_backward(GradBuilder& gb, const Node& f, ValueId dy) {
  gb.contribute(f.in[0], dy);
  TESSERA_ASSERT(gb.is_param(f.in[1]));
  gb.add(gb.node(OpKind::kGroupedBiasGrad, {dy, f.in[2]}, {gb.param_grad(f.in[1])}, ".dbias"));
}

void grouped_bias_run(const RunContext& c, const Node& n) {
  ops::grouped_bias_add(c.in(n, 0), c.in(n, 1), c.in(n, 2), c.out(n, 0));
}

void grouped_bias_grad_run(const RunContext& c, const Node& n) {  // in: dy, sizes
  ops::grouped_bias_grad(c.in(n, 0), c.in(n, 1), c.out(n, 0));
}

}  // namespace

std::vector<OpDef> moe_op_defs() {
  return {
      {.kind = OpKind::kMoeRoute,
       .name = "moe_route",
       .infer = route_infer,
       .backward = route_backward,
       .run = route_run},
      {.kind = OpKind::kMoeRouteBwd, .name = "moe_route_bwd", .run = route_bwd_run},
      {.kind = OpKind::kMoeLoadBalance,
       .name = "moe_load_balance",
       .infer = load_balance_infer,
       .backward = load_balance_backward,
       .run = load_balance_run},
      {.kind = OpKind::kMoeLoadBalanceBwd, .name = "moe_load_balance_bwd", .run = load_balance_bwd_run},
      {.kind = OpKind::kMoeDispatch,
       .name = "moe_dispatch",
       .infer = dispatch_infer,
       .backward = dispatch_backward,
       .run = dispatch_run},
      {.kind = OpKind::kMoeDispatchBwd, .name = "moe_dispatch_bwd", .run = dispatch_bwd_run},
      {.kind = OpKind::kGroupedMatmul,
       .name = "grouped_matmul",
       .infer = grouped_infer,
       .backward = grouped_backward,
       .run = grouped_run,
       .flops = grouped_flops,
       .bytes = grouped_bytes},
      {.kind = OpKind::kMoeCombine,
       .name = "moe_combine",
       .infer = combine_infer,
       .backward = combine_backward,
       .run = combine_run},
      {.kind = OpKind::kMoeCombineBwd, .name = "moe_combine_bwd", .run = combine_bwd_run},
      {.kind = OpKind::kGroupedBiasAdd,
       .name = "grouped_bias_add",
       .infer = grouped_bias_infer,
       .backward = grouped_bias_backward,
       .run = grouped_bias_run},
      {.kind = OpKind::kGroupedBiasGrad, .name = "grouped_bias_grad", .run = grouped_bias_grad_run},
  };
}

}  // namespace tessera::graph
