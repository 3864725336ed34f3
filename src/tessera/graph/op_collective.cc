// The tensor-parallel collectives of the op table (op_table.h): Megatron's f (tp_copy) and g
// (tp_all_reduce), which sharding.h's pass inserts around the ops it splits.
#include "tessera/backends/backend.h"
#include "tessera/core/error.h"
#include "tessera/dist/communicator.h"
#include "tessera/graph/autodiff.h"
#include "tessera/graph/op_families.h"
#include "tessera/ops/convert.h"

namespace tessera::graph {

namespace {

// ---- tp_copy (f): y = x forward (y aliases x); dx = the sum over the tensor axis of dy ------------
// f's readers are column-parallel matmuls: each rank's dx is the part of the input gradient from
// its own columns, and their sum over the tensor axis is the whole gradient (into a new value: dy
// may be shared with another reader, e.g. an add's).
void tp_copy_backward(GradBuilder& gb, const Node& f, ValueId dy) {
  Graph& g = gb.graph();
  const ValueId x = f.in[0];
  if (!gb.needs(x)) return;
  ValueId dx = gb.grad_value(x);
  std::vector<ValueId> out = {dx};
  if (g.value(x).dtype != DType::kF32) {  // reductions run in f32 (see tp_all_reduce below)
    ValueId scratch = g.activation("d." + g.value(x).name + ".f32", g.value(x).shape, DType::kF32);
    g.value(scratch).layer = f.layer;
    out.push_back(scratch);
  }
  gb.add(gb.node(OpKind::kTpAllReduce, {dy}, out, ".bwd"));
  gb.contribute(x, dx);
}

// The identity: nothing to do unless a recomputed copy has its own buffer.
void tp_copy_run(const RunContext& c, const Node& n) {
  c.backend->copy(c.out(n, 0), c.in(n, 0));
}

// ---- tp_all_reduce (g): y = the sum over the tensor axis of x (y may alias x); dx = dy ------------
// in: x [N, C]; out: y [, scratch f32 [N, C] for bf16]. Reductions run in f32, so a bf16 value is
// summed through the scratch: each rank's bf16 partial is widened exactly, the sum rounded to bf16
// once.
void tp_all_reduce_backward(GradBuilder& gb, const Node& f, ValueId dy) {
  gb.contribute(f.in[0], dy);  // y = sum of the ranks' x, so each rank's dx is dy itself
}

void tp_all_reduce_run(const RunContext& c, const Node& n) {
  const Tensor &x = c.in(n, 0), &y = c.out(n, 0);
  if (x.dtype() == DType::kF32) {
    c.backend->copy(y, x);
    c.tensor->all_reduce(y.data(), static_cast<size_t>(y.numel()), DType::kF32);
    return;
  }
  TESSERA_ASSERT(n.out.size() > 1);
  const Tensor& scratch = c.out(n, 1);
  ops::convert(x, scratch);
  c.tensor->all_reduce(scratch.data(), static_cast<size_t>(scratch.numel()), DType::kF32);
  ops::convert(scratch, y);
}

NodeTraffic tp_all_reduce_traffic(const Graph& g, const Node& n) {
  return {.bytes = 4.0 * static_cast<double>(g.value(n.in[0]).shape.numel()), .calls = 1};
}

}  // namespace

std::vector<OpDef> collective_op_defs() {
  return {
      {.kind = OpKind::kTpCopy, .name = "tp_copy", .backward = tp_copy_backward, .run = tp_copy_run},
      {.kind = OpKind::kTpAllReduce,
       .name = "tp_all_reduce",
       .backward = tp_all_reduce_backward,
       .run = tp_all_reduce_run,
       .traffic = tp_all_reduce_traffic},
  };
}

}  // namespace tessera::graph
