// Executor: runs a PlanSpec's nodes (plan_spec.h) over the tensors of its Workspace
// (workspace.h), on the backend of the workspace's device (backends/backend.h), which also does
// the memory operations between nodes. The views of every value are fixed when the workspace is
// made, so a step is a loop over nodes, each run by its op table entry (op_table.h; no
// allocation, no lookups).
//
// A training step with gradient accumulation is:
//   zero_grads();  for each micro-batch { write inputs; forward_backward(); }  apply_optimizer(...)
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tessera/backends/backend.h"
#include "tessera/dist/mesh.h"
#include "tessera/graph/op_table.h"
#include "tessera/graph/param_sync.h"
#include "tessera/graph/plan.h"
#include "tessera/graph/sharding_expert.h"
#include "tessera/ops/optimizer.h"
#include "tessera/ops/rope.h"

namespace tessera::graph {

struct OptimizerStep {
  ops::AdamWHyperparams adamw;  // lr, betas, eps, weight_decay, step; grad_scale set by the executor
  double sgd_lr = 0;
  double clip_threshold = 0;  // global-norm clip (0: off)
  // The accumulated gradients are divided by this before the clip and the update: the number of
  // counted tokens when the loss gradient was seeded with 1 per token (MaxText sums the
  // unnormalised cross-entropy over micro-steps and divides once). 1 when dloss already holds
  // 1 / count.
  double grad_divisor = 1;
};

struct OptimizerResult {
  double grad_norm = 0;  // of the divided gradients, before clipping
  double clip_scale = 1;
};

// Called around every node the executor runs (train/diagnostics.h: stack-dump context, traces,
// the hang watchdog). Stages in order: kSyncBegin (before ParamSync's work for the node: waits
// for gathers), kKernelBegin, kKernelEnd, kSyncEnd (after ParamSync's work: starting reductions).
enum class NodeStage { kSyncBegin, kKernelBegin, kKernelEnd, kSyncEnd };
class NodeObserver {
 public:
  virtual ~NodeObserver() = default;
  virtual void at(int node, NodeStage stage) = 0;
};

class Executor {
 public:
  // `mesh` (not owned; nullptr: one device) gives the communicators the collectives run on. The
  // spec and workspace (not owned) must outlive the executor; the workspace must be the spec's.
  // The RoPE table may be shared by several executors (decoding's plans of one model).
  Executor(const PlanSpec& spec, Workspace& workspace, std::shared_ptr<const ops::RopeTable> rope,
           dist::Mesh* mesh = nullptr);
  Executor(Plan& plan, std::shared_ptr<const ops::RopeTable> rope, dist::Mesh* mesh = nullptr)
      : Executor(plan.spec(), plan.workspace(), std::move(rope), mesh) {}
  ~Executor();

  void zero_grads();
  // Runs forward, recompute and backward nodes; returns the sum of the per-token losses of the
  // counted tokens (targets >= 0) of this micro-batch (this rank's rows). On more than one rank,
  // `last_micro_step` says that apply_optimizer follows: the gradients' reductions across ranks
  // start during this pass (pass false for the earlier micro-steps of gradient accumulation).
  double forward_backward(bool last_micro_step = true);
  // The sum of the graph's aux losses (graph.h: the MoE load-balance losses of every layer) as the
  // last pass computed them; 0 without any.
  double aux_loss() const;
  // Runs only the forward nodes (evaluation); returns the summed loss and counts tokens.
  double forward_only(int64_t* counted = nullptr);
  // Runs an inference graph (Graph::inference(): decoding); its outputs are then in the workspace.
  void infer();
  // Completes the gradients' reductions (on more than one rank), clips by the global norm over
  // the whole model and updates every parameter (its piece, when sharded).
  OptimizerResult apply_optimizer(const OptimizerStep& step);
  // The global L2 norm of the f32 master parameters (over all ranks' pieces; collective).
  double param_norm();

  const PlanSpec& spec() const { return spec_; }
  dist::Mesh* mesh() { return mesh_; }
  ParamSync* param_sync() { return sync_.get(); }  // nullptr on one device
  // The training step the next passes belong to (named by run-time errors, e.g. an expert
  // buffer's overflow); -1 until set.
  void set_step(int64_t step) { ctx_.step = step; }

  // Per-op timing: when on, every node's wall time is added to its (op, phase) row, and the
  // optimizer step's other work to rows of its own (zero_grads, grad_norm, after_update). Costs
  // two clock reads per node; off by default.
  void set_profiling(bool on) { profiling_ = on; }
  void clear_profile() { profile_.clear(); }
  bool profiled() const { return !profile_.empty(); }  // whether any row was timed
  std::string profile_report() const;                  // a table, slowest rows first
  // An observer (not owned; nullptr: none) called around every node; costs one branch per node
  // when unset.
  void set_observer(NodeObserver* o) { observer_ = o; }

 private:
  void run(const Node& n);
  void add_profile(int op, Phase phase, double seconds, double sync_seconds, double flops);
  void run_range(int begin, int end, bool forward_only, bool last_micro_step);
  double summed_loss(int64_t* counted) const;

  const PlanSpec& spec_;
  Workspace& ws_;
  backends::Backend& backend_;  // the workspace's device's: memory operations between nodes
  std::shared_ptr<const ops::RopeTable> rope_;
  dist::Mesh* mesh_ = nullptr;
  std::unique_ptr<ParamSync> sync_;  // the collectives when the mesh has more than one rank
  RunContext ctx_;                   // what the op table's kernel calls read (op_table.h)
  PendingExchanges pending_;         // expert exchanges between their start and wait nodes
  std::vector<Tensor> grads_;        // every parameter's gradient, for the global-norm clip
  bool profiling_ = false;
  NodeObserver* observer_ = nullptr;
  struct ProfileRow {
    double seconds = 0, sync_seconds = 0, flops = 0;  // sync: ParamSync's work around the node
    int64_t calls = 0;
  };
  std::map<std::pair<int, int>, ProfileRow> profile_;  // (OpKind, Phase) -> totals
};

}  // namespace tessera::graph
