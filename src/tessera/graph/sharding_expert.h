// Expert parallelism (MaxText's sparse MoE path over the `expert` mesh axis) as a graph pass. The
// model builds the one-device MoE block (ops/moe.h):
//     route -> dispatch (xs [R, E] sorted by expert, sizes [X]) -> grouped matmuls over X experts
//           -> combine
// and shard_expert_parallel() rewrites it, on each of the EP expert ranks, into
//     route -> dispatch -> moe_to_experts -> grouped matmuls over this rank's Xl = X / EP experts
//           -> moe_from_experts -> combine
//   1. every expert weight (a parameter whose dim 0 is the logical axis `exp`: wi_0, wi_1, wo and
//      their biases, [X, ...]) keeps the experts [rank * Xl, (rank + 1) * Xl) (Value::ep), and so
//      do its gradient and compute copy; checkpoints and init see the global tensor through it;
//   2. moe_to_experts all-gathers the per-expert counts over the expert axis ([EP, X]: row s is
//      rank s's sizes), sends each rank the contiguous rows of its experts (a ragged all-to-all:
//      Communicator::all_to_all_async over MPI_Ialltoallv), and regroups what arrives (ordered by
//      source rank, then local expert) by local expert, with the local group sizes the grouped
//      matmuls read;
//   3. moe_from_experts undoes the regrouping and sends every row back (the transposed counts), so
//      the combine sees the dispatch's rows in the dispatch's order.
// The backward of each is the other's data movement on the gradients (no count exchange: the
// forward's counts are an input). Outside the MoE block the expert axis is one more data axis:
// the trainer gives each expert rank its own rows (dist::batch_group), and the gradients of every
// parameter but the expert weights are summed over it (plan_schedule.cc).
//
// The receive buffer has Rb rows, fixed when the plan is made (nothing is allocated in the step
// loop): with ragged_buffer_factor <= 0 the worst case N * min(EP * k, X) (MaxText's
// T_loc * k * min(EP, X / k): a rank receives at most min(k, Xl) rows of each of the EP x N
// tokens); with a factor f > 0, ceil(f * R), f times the balanced load (at most the worst case). A step that
// routes more rows to a rank than its buffer holds fails on every rank with an error naming the step, the
// layer and the key: rows are never dropped. Only the dropless path (sparse_matmul=true) is built: the dense
// and capacity paths are refused by name.
#pragma once

#include <cstdint>
#include <map>
#include <memory>

#include "tessera/dist/communicator.h"
#include "tessera/graph/graph.h"

namespace tessera::graph {

struct ExpertParallel {
  int64_t size = 1;  // expert ranks (the mesh's expert axis)
  int64_t rank = 0;  // this rank's coordinate on it
  double ragged_buffer_factor = -1;
};

// Rewrites `g` for the expert axis (a no-op at size 1). Throws kConfig naming the parameter or
// node for what it does not build (experts not divisible by EP, the dense or capacity path).
void shard_expert_parallel(Graph& g, const ExpertParallel& ep);

// Overlaps the backward dispatch exchanges with compute: each moe_to_experts_bwd (the expert
// rows' input gradients sent back to the ranks that dispatched them) becomes deferred, starting
// its all-to-all, and is followed by its layer's expert weight gradients (the grouped matmuls'
// .dw and the grouped bias gradients, which nothing after them in the pass reads and which read
// nothing the exchange writes) and then a kMoeExchangeWait on its outputs, before their first
// reader. The executor advances the exchange between those nodes. A no-op without exchanges.
void overlap_expert_exchanges(Graph& g);

// The all-to-alls in flight between a deferred exchange node and its wait, by the exchange's
// first output; the executor owns one per plan.
struct PendingExchanges {
  std::map<ValueId, std::unique_ptr<dist::Communicator::Request>> requests;
};

// Rb, the receive buffer's rows for R = N * k dispatched rows of X experts over `ranks` ranks.
int64_t ragged_buffer_rows(int64_t tokens, int64_t k, int64_t experts, int64_t ranks, double factor);

// What the expert axis moves per micro-step on this rank, as communicator.h counts it: each
// exchange's rows of this rank's own tokens (R x E x dtype size: the dispatch's send buffer, the
// combine's receive buffer; every exchange moves them once, in the forward, recompute and
// backward passes), and the count all-gathers (EP x X int32 per dispatch run).
struct ExpertParallelTraffic {
  double forward = 0, recompute = 0, backward = 0;  // bytes of the all-to-alls
  double count_bytes = 0;                           // the counts' all-gathers
  int64_t all_to_alls = 0;                          // calls
  int64_t count_gathers = 0;                        // calls of the counts' all-gathers
  double total() const { return forward + recompute + backward; }
};
ExpertParallelTraffic expert_parallel_traffic(const Graph& g);

}  // namespace tessera::graph
