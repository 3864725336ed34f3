// The tensor-parallel propagation pass (sharding.h): parameter shards, then each node's rule.
#include "tessera/graph/sharding.h"

#include "tessera/core/error.h"
#include "tessera/graph/op_table.h"

namespace tessera::graph {

namespace {

// Step 1: this rank's shard of every parameter, along the dimension whose logical axis the tensor
// axis splits; its gradient and compute copy follow.
void shard_params(Graph& g) {
  const TensorParallel& tp = g.tensor_parallel();
  for (ValueId p : g.params()) {
    Value& v = g.value(p);
    TensorShard s;
    for (int d = 0; d < v.shape.rank(); ++d) {
      if (tp.ways(v.logical_axes[d]) == 1) continue;
      TESSERA_CHECK(
          !s.split(), ErrorKind::kConfig,
          "parameter {}: logical_axis_rules map both of its axes {} and {} onto the tensor mesh axis; "
          "Tessera's tensor parallelism splits one dimension per parameter",
          v.name, v.logical_axes[s.dim], v.logical_axes[d]);
      TESSERA_CHECK(v.shape[d] % tp.size == 0, ErrorKind::kConfig,
                    "parameter {} {}: its {} dimension ({}) is not divisible by the tensor parallelism {}",
                    v.name, v.shape.str(), v.logical_axes[d], v.shape[d], tp.size);
      const int64_t local = v.shape[d] / tp.size;
      s = TensorShard{.dim = d, .offset = tp.rank * local, .global = v.shape[d]};
    }
    if (!s.split()) continue;
    for (ValueId id : {p, v.grad, v.compute_copy}) {
      if (id == kNoValue) continue;
      Value& w = g.value(id);
      w.tp = s;
      w.shape[s.dim] = s.global / tp.size;
    }
  }
}

}  // namespace

Node ShardBuilder::collective(OpKind op, std::vector<ValueId> in, std::vector<ValueId> out,
                              const std::string& name, const std::string& ckpt) const {
  Node n{.op = op, .in = std::move(in), .out = std::move(out)};
  n.name = name;
  n.ckpt_name = ckpt;
  n.phase = g_.phase();
  n.layer = g_.layer();
  return n;
}

void ShardBuilder::emit(Node n) {
  if (const OpDef& def = op_def(n.op); def.infer) {
    const std::vector<OutputSpec> outs = def.infer(g_, n);
    TESSERA_ASSERT(outs.size() == n.out.size());
    for (size_t i = 0; i < outs.size(); ++i) g_.value(n.out[i]).shape = outs[i].shape;
  }
  g_.add_node(std::move(n));
}

ValueId ShardBuilder::resolve(ValueId v) const {
  for (auto it = remap_.find(v); it != remap_.end(); it = remap_.find(v)) v = it->second;
  return v;
}

ValueId ShardBuilder::tp_copy(ValueId x) {
  if (auto it = copies_.find(x); it != copies_.end()) return it->second;
  const Value xv = g_.value(x);
  const std::string name = xv.name + ".tp_copy";
  ValueId y = g_.activation(name, xv.shape, xv.dtype);
  g_.value(y).alias_of = x;  // the identity: no copy, the readers see x's buffer
  emit(collective(OpKind::kTpCopy, {x}, {y}, name, ""));
  copies_.emplace(x, y);
  return y;
}

ValueId ShardBuilder::all_reduce(ValueId x, const std::string& name, const std::string& ckpt) {
  const Value xv = g_.value(x);
  ValueId y = g_.activation(name, xv.shape, xv.dtype);
  g_.value(y).alias_of = x;
  std::vector<ValueId> out = {y};
  // Reductions run in f32 (communicator.h): a bf16 value is summed through an f32 copy.
  if (xv.dtype != DType::kF32) out.push_back(g_.activation(name + ".f32", xv.shape, DType::kF32));
  emit(collective(OpKind::kTpAllReduce, {x}, std::move(out), name, ckpt));
  return y;
}

void shard_whole(ShardBuilder& b, Node n) {
  for (ValueId v : n.in)
    TESSERA_CHECK(!b.shard(v).split(), ErrorKind::kConfig,
                  "{}: {} needs its whole input, but {} is split over the tensor axis ({})", n.name,
                  op_name(n.op), b.graph().value(v).name, describe_tensor_shard(b.graph().value(v)));
  b.emit(std::move(n));
}

void shard_like_inputs(ShardBuilder& b, Node n) {
  const TensorShard s = b.shard(n.in[0]);
  for (ValueId v : n.in)
    TESSERA_CHECK(b.shard(v) == s, ErrorKind::kConfig,
                  "{}: the inputs of {} are split differently over the tensor axis ({} and {})", n.name,
                  op_name(n.op), b.graph().value(n.in[0]).name, b.graph().value(v).name);
  for (ValueId o : n.out) b.set_shard(o, s);
  b.emit(std::move(n));
}

void shard_tensor_parallel(Graph& g) {
  if (g.tensor_parallel().size <= 1 || g.sharded()) return;
  shard_params(g);
  std::vector<Node> nodes = std::move(g.nodes());
  g.nodes().clear();
  for (ValueId v = 0; v < static_cast<ValueId>(g.values().size()); ++v) g.value(v).producer = -1;
  const int layer = g.layer();
  const Phase phase = g.phase();
  ShardBuilder b(g);
  for (Node& n : nodes) {
    for (ValueId& v : n.in) v = b.resolve(v);
    g.set_layer(n.layer);
    g.set_phase(n.phase);
    const OpDef& def = op_def(n.op);
    (def.shard ? def.shard : shard_whole)(b, std::move(n));
  }
  if (g.loss() != kNoValue) g.set_loss(b.resolve(g.loss()));
  for (ValueId& a : g.aux_losses()) a = b.resolve(a);
  g.set_layer(layer);
  g.set_phase(phase);
  g.mark_sharded();
}

TensorParallelTraffic tensor_parallel_traffic(const Graph& g) {
  TensorParallelTraffic t;
  for (const Node& n : g.nodes()) {
    const NodeTraffic c = node_traffic(g, n);
    t.all_reduces += c.calls;
    (n.phase == Phase::kForward     ? t.forward
     : n.phase == Phase::kRecompute ? t.recompute
                                    : t.backward) += c.bytes;
  }
  return t;
}

}  // namespace tessera::graph
