// Tensor parallelism (Megatron-LM) as a propagation pass. The model builds the whole graph with
// global shapes; shard_tensor_parallel() rewrites it into this tensor rank's part:
//   1. each parameter keeps its shard along the (at most one) dimension whose logical axis the
//      tensor mesh axis splits (graph.h's TensorParallel, from logical_axis_rules), and so do its
//      gradient and compute copy;
//   2. the nodes are visited in order and each op's sharding rule (op_table.h) sees its inputs'
//      shards, sets its outputs' shards and local shapes, and emits the node with the collectives
//      it needs around it. The rules of today's ops:
//   matmul, x whole, W split on its output dim   column-parallel: x goes through f (tp_copy: the
//                                                 identity forward, all-reduce of dx backward), the
//                                                 output is split on C
//   matmul, x split on C, W split on its input   row-parallel: partial sums, then g (tp_all_reduce:
//                                                 all-reduce forward, identity backward)
//   embedding of a table split by rows           vocab-parallel lookup (zeros outside the shard), g
//   cross_entropy of logits split on V           vocab-parallel loss (two small all-reduces of [N])
//   add, glu, rope, attention                    keep the split of their inputs (which must agree)
//   anything else (norms)                        needs whole inputs
// Per decoder layer that is Megatron's 2 all-reduces of [N, E] forward and 2 backward. Autodiff
// runs on the sharded graph, so backward rules see local shapes and the collectives' own rules.
// New kinds of parallelism over activations (expert, sequence) arrive as new rules here.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "tessera/graph/graph.h"

namespace tessera::graph {

// Rewrites `g` for its tensor_parallel() axis (a no-op at size 1 or when already sharded). Throws
// kConfig, naming the parameter or node, for a split the rules do not build.
void shard_tensor_parallel(Graph& g);

// What a sharding rule builds with.
class ShardBuilder {
 public:
  explicit ShardBuilder(Graph& g) : g_(g) {}
  Graph& graph() { return g_; }
  const TensorShard& shard(ValueId v) const { return g_.value(v).tp; }
  // Gives v the shard s (emit() then infers its local shape).
  void set_shard(ValueId v, const TensorShard& s) { g_.value(v).tp = s; }
  // Megatron's f for the readers of x: y = x forward (y aliases x), dx = all-reduce(dy) backward.
  // One per x, shared by its readers.
  ValueId tp_copy(ValueId x);
  // Megatron's g: y = the sum over the tensor axis of x (in place over x, which must have no other
  // reader); `ckpt` names y for the remat policies.
  ValueId all_reduce(ValueId x, const std::string& name, const std::string& ckpt);
  // Emits a node, its outputs' shapes inferred again from its (local) inputs and attributes;
  // nodes the rule does not emit are dropped.
  void emit(Node n);
  // Later readers of `from` (and the loss) read `to` instead.
  void replace(ValueId from, ValueId to) { remap_[from] = to; }
  ValueId resolve(ValueId v) const;

 private:
  Node collective(OpKind op, std::vector<ValueId> in, std::vector<ValueId> out, const std::string& name,
                  const std::string& ckpt) const;
  Graph& g_;
  std::map<ValueId, ValueId> copies_;  // x -> tp_copy(x)
  std::map<ValueId, ValueId> remap_;
};

// The rule for ops without one: every input whole, outputs whole.
void shard_whole(ShardBuilder& b, Node n);
// The rule of elementwise ops: the inputs' shards agree; every output takes them (with a local
// shape along the split dimension).
void shard_like_inputs(ShardBuilder& b, Node n);

// What the tensor axis's all-reduces move per micro-step on this rank, counted as communicator.h
// counts (the f32 buffer passed in): each node's op_table traffic (Megatron's g forward and f
// backward, [N, E] each; bf16 values travel as f32; the vocab-parallel loss's [N] max and [2, N]
// sums), by phase. Recomputed forward nodes count again.
struct TensorParallelTraffic {
  double forward = 0, recompute = 0, backward = 0;  // bytes
  int64_t all_reduces = 0;                          // calls
  double total() const { return forward + recompute + backward; }
};
TensorParallelTraffic tensor_parallel_traffic(const Graph& g);

}  // namespace tessera::graph
