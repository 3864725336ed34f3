// ParamSync: the collectives of data parallelism, FSDP (ZeRO-3) and ZeRO-1 around a PlanSpec's
// nodes, driven by the Executor (executor.h) when the mesh has more than one rank. The PlanSpec
// decides the layouts and lists the collectives with the nodes they are tied to
// (plan_spec.h: collectives(), built in plan_schedule.cc); this class executes that list on the
// Workspace's buffers, saving the gathers of layers still in their slot:
//
//   forward / recompute / backward (each micro-step)
//     - FSDP parameters of decoder layer l are all-gathered over `fsdp` into gather slot l % 2
//       before the first node that reads them; when a layer's first node runs, the next layer's
//       gather starts (non-blocking) into the other slot, so it overlaps this layer's compute.
//       After the forward pass the last two layers are still in their slots, and the backward pass
//       re-gathers only from the third-last layer on.
//     - FSDP parameters outside the layers are gathered once per step, all started (non-blocking)
//       when the first pass of the step begins and each waited before its first reader.
//     - A layer's whole FSDP gradients live in gradient slot l % 2: zeroed before the layer's
//       first gradient node, reduce-scattered over `fsdp` (non-blocking, adding into this rank's
//       gradient pieces) after its last one, and waited for when the slot is next needed (or
//       before the update).
//   last micro-step (forward_backward(true))
//     - Every other gradient starts its reduction as soon as its last writer has run: all-reduce
//       over {data, fsdp} (whole parameters), reduce-scatter over `fsdp` (FSDP parameters outside
//       the layers), or, with ZeRO-1 and fsdp = 1, reduce-scatter over `data` into the optimizer's
//       piece; all non-blocking, overlapping the rest of the backward pass.
//   before the update (finish_gradients)
//     - Everything above is waited for; with both data > 1 and fsdp > 1 the pieces are then
//       all-reduced (or, with ZeRO-1, reduce-scattered) over `data`.
//   after the update (after_optimizer)
//     - ZeRO-1: each rank's updated piece of the master and compute copy is all-gathered over
//       `data`; every gathered copy is marked stale.
//
// Gradients are sums over the ranks (the trainer divides by the global token count), so N ranks
// compute the one-rank step up to the order of float additions.
#pragma once

#include <memory>
#include <vector>

#include "tessera/dist/mesh.h"
#include "tessera/graph/plan_spec.h"
#include "tessera/graph/workspace.h"

namespace tessera::graph {

// The bytes (counted as communicator.h counts them) the layouts call for in one optimizer step of
// `micro_steps` micro-steps: FSDP gathers a decoder layer's parameters twice per micro-step
// (forward and backward; the executor saves the gathers of layers still in their slot, so the
// measured figure is lower) and the outer ones once a step, and reduce-scatters the gradients of
// each micro-step (outer ones: once a step); whole parameters all-reduce their gradients over
// data x fsdp; ZeRO-1 reduce-scatters gradients over data and all-gathers the updated pieces;
// tensor parallelism all-reduces activations (graph::tensor_parallel_traffic); expert parallelism
// all-gathers its counts and moves its rows (graph::expert_parallel_traffic). Scalars (loss,
// norms) are left out. It is the schedule's bytes, each entry counted as often as it runs.
dist::TrafficCounters expected_traffic(const PlanSpec& spec, int64_t micro_steps);

class ParamSync {
 public:
  // The spec and workspace (not owned) must outlive it.
  ParamSync(const PlanSpec& spec, Workspace& workspace, dist::Mesh& mesh);
  ~ParamSync();

  void zero_grads();
  // Around the nodes of one pass over [0, first_optimizer_node()).
  void begin_pass(bool forward_only, bool last_micro_step);
  void before_node(int i);
  void after_node(int i);
  // Completes every gradient reduction (the optimizer's operands are then final).
  void finish_gradients();
  // Sum of squares of the reduced gradients (opt views), over the whole model: each piece counted
  // once across the mesh.
  double grad_sq_norm();
  // The same for the f32 masters.
  double param_sq_norm();
  void after_optimizer();

  // Without overlap every collective is waited for as soon as it starts and nothing is
  // prefetched: the time spent waiting is then all the collectives' time (bench/dist_bench.cc
  // compares it with the waiting left when they overlap compute).
  void set_overlap(bool on) { overlap_ = on; }
  // Seconds this rank spent blocked in collectives (waits and blocking calls), and inside the
  // progress calls between nodes (where MPI copies and reduces on this thread), since the last reset.
  double exposed_seconds() const { return exposed_seconds_; }
  double progress_seconds() const { return progress_seconds_; }
  void reset_exposed() { exposed_seconds_ = progress_seconds_ = 0; }

 private:
  struct Schedule;
  struct Slot {
    int owner = -1;
    std::vector<std::unique_ptr<dist::Communicator::Request>> reqs;
  };
  // A gathered value: its layout and its index in the layout's `gathered`.
  struct GatherRef {
    int layout = -1;
    size_t index = 0;
  };
  Schedule make_schedule(bool forward_only) const;
  GatherRef gather_ref(const Collective& c) const;
  dist::Communicator& group(const std::vector<MeshAxis>& axes) const;
  std::unique_ptr<dist::Communicator::Request> start_gather(GatherRef g);
  void finish_reorder(const std::vector<GatherRef>& gathers);
  void gather_layer(int layer, bool wait);
  void ensure_layer(int layer);
  void finish_slot_gather(Slot& s);
  void start_outer_gathers();
  void wait_outer(int layout);
  void prepare_grad_slot(int layer);
  void start_layer_reduce(int layer);
  void drain_grad_slot(Slot& s);
  void start_ready_reduction(const Collective& c);
  void progress();
  double sq_norm(bool grads);
  void wait_all(std::vector<std::unique_ptr<dist::Communicator::Request>>& reqs);

  const PlanSpec& spec_;
  Workspace& ws_;
  dist::Mesh& mesh_;
  dist::Communicator& fsdp_;
  dist::Communicator& data_;
  dist::Communicator& batch_;         // {data, fsdp}
  dist::Communicator& batch_expert_;  // {data, fsdp, expert}: whole parameters' gradients under EP
  dist::Communicator& data_expert_;   // {data, expert}: step 2 of FSDP pieces under EP
  std::unique_ptr<Schedule> full_, forward_;
  const Schedule* active_ = nullptr;
  bool last_micro_step_ = true;
  // From the schedule: per decoder layer its gathered values and its gradient reductions; per
  // layout outside the layers its gathered values; the entries of step 2 and after the update.
  std::vector<std::vector<GatherRef>> layer_gathers_;
  std::vector<std::vector<const Collective*>> layer_reduces_;
  std::vector<std::vector<GatherRef>> outer_gathers_;  // per layout (empty unless an outer FSDP one)
  std::vector<int> outer_layouts_;
  std::vector<const Collective*> before_update_, after_update_;
  Slot slots_[2], grad_slots_[2];

  bool overlap_ = true;
  double exposed_seconds_ = 0, progress_seconds_ = 0;
  bool outer_fresh_ = false;  // outer gathers started since the last update
  std::vector<std::vector<std::unique_ptr<dist::Communicator::Request>>> outer_reqs_;  // per layout
  std::vector<std::unique_ptr<dist::Communicator::Request>> pending_;                  // step-1 reductions
};

}  // namespace tessera::graph
