// Plan: a finished step graph (forward, recompute, backward, optimizer) with every value placed
// in an arena allocated once, and the reports that need no execution: parameter count, FLOPs per
// step by phase, and memory by category. The executor (executor.h) runs it; nothing is
// allocated per step.
//
// Sharding over a mesh (PlanOptions::sharding; all sizes 1 for one device). Each parameter gets a
// ParamLayout from its logical axes and logical_axis_rules (dist/sharding.h):
//   - FSDP (fsdp > 1): the dimension the rules split over `fsdp` is split into fsdp pieces. This
//     rank's f32 master, compute copy and gradient hold only its piece (state()); the nodes read
//     gathered whole copies (view()) in buffers that the executor fills by all-gather before use,
//     and they accumulate into a whole gradient that the executor reduce-scatters into the piece.
//     Parameters of decoder layer l share gather slot l % 2 (the layers alternate between two
//     buffers); parameters outside the layers (embedding, final norm, unembedding) have their own
//     gathered buffers, kept for the step.
//   - ZeRO-1 (shard_optimizer_over_data, data > 1): the optimizer state holds only this rank's
//     piece of the (stored) parameter along dimension 0 over `data` (opt_view()); the optimizer
//     updates that piece of the master and compute copy, which an all-gather then completes.
//   - Parameters the rules do not split (norm scales, or dimensions a mesh axis does not divide)
//     are whole on every rank, as are all parameters without FSDP.
// For one device (and for plain data parallelism) view(), state() and opt_view() are the same
// tensors, so code that reads plan.view(param) as the master keeps working there.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tessera/core/arena.h"
#include "tessera/dist/sharding.h"
#include "tessera/graph/autodiff.h"
#include "tessera/graph/graph.h"
#include "tessera/graph/memory_plan.h"

namespace tessera::graph {

// The mesh as the plan needs it: sizes and this rank's coordinates (no communicators).
struct PlanSharding {
  dist::MeshSizes sizes = ones();
  dist::MeshSizes coords{};
  std::vector<AxisRule> rules;
  bool shard_optimizer_over_data = false;

  int64_t size(MeshAxis a) const { return sizes[static_cast<int>(a)]; }
  int64_t coord(MeshAxis a) const { return coords[static_cast<int>(a)]; }
  int64_t world() const;
  static dist::MeshSizes ones() {
    dist::MeshSizes s;
    s.fill(1);
    return s;
  }
};

struct PlanOptions {
  std::string remat_policy = "full";
  OptimizerKind optimizer = OptimizerKind::kAdamW;
  PlanSharding sharding;
};

// How one parameter is laid out on this rank.
struct ParamLayout {
  struct Gathered {
    ValueId value = kNoValue;  // the parameter or its compute copy, read whole by some node
    Tensor staging;            // the concatenated pieces before the block reorder (fsdp_dim > 0)
  };
  ValueId param = kNoValue;
  int layer = -1;  // the decoder layer whose nodes alone read it; -1: outside the layers
  std::vector<std::vector<MeshAxis>> dim_axes;  // per dimension, the mesh axes the rules give
  int fsdp_dim = -1;                            // the dimension split over fsdp; -1: whole
  int64_t fsdp_parts = 1, fsdp_index = 0;
  int64_t opt_parts = 1, opt_index = 0;  // ZeRO-1: the optimizer's piece of `stored` along dim 0
  int64_t tensor_parts = 1;              // tensor parallelism: the value is one of this many slices
  dist::Piece stored;                    // this rank's piece of the master, compute copy, gradient
  dist::Piece opt;                       // this rank's piece of the optimizer state
  // FSDP only: the values gathered for the nodes and the whole gradient's staging for the block
  // reorder (fsdp_dim > 0).
  std::vector<Gathered> gathered;
  Tensor grad_staging;
  bool sharded() const { return fsdp_parts > 1; }
  std::string describe(const Value& v) const;  // for the start-up log
};

struct MemoryReport {
  size_t params = 0;        // f32 master weights (this rank's pieces)
  size_t param_copies = 0;  // lower-precision compute copies
  size_t grads = 0;
  size_t optimizer = 0;
  size_t inputs = 0;       // batch inputs
  size_t gathered = 0;     // FSDP gather buffers, whole gradients and staging; ZeRO-1 gradient pieces
  size_t activations = 0;  // the planned activation arena
  size_t activations_lower_bound = 0;
  size_t total() const { return params + param_copies + grads + optimizer + inputs + gathered + activations; }
};

struct FlopReport {
  double forward = 0, backward = 0, recompute = 0, optimizer = 0;  // matmul + attention FLOPs
};

class Plan {
 public:
  // Takes a forward graph with its loss set; appends backward, remat and optimizer; places values.
  Plan(Graph forward, const PlanOptions& opts);

  Graph& graph() { return graph_; }
  const Graph& graph() const { return graph_; }
  // What the nodes read and write (for a sharded parameter: the gathered whole copy).
  const Tensor& view(ValueId v) const { return views_[v]; }
  // Persistent storage on this rank: a parameter's, compute copy's or gradient's stored piece, the
  // optimizer state's piece; view(v) for every other value.
  const Tensor& state(ValueId v) const { return state_[v]; }
  // The optimizer's operands: the ZeRO-1 pieces of parameter, compute copy and reduced gradient
  // (the gradient's own buffer), and the optimizer state; state(v) without ZeRO-1.
  const Tensor& opt_view(ValueId v) const { return opt_views_[v]; }
  ValueId dloss() const { return dloss_; }
  int first_optimizer_node() const { return first_opt_; }

  const PlanSharding& sharding() const { return sharding_; }
  // One layout per parameter, in graph().params() order; layout(p) by the parameter's id.
  const std::vector<ParamLayout>& layouts() const { return layouts_; }
  const ParamLayout& layout(ValueId param) const;
  bool any_sharded() const { return any_sharded_; }
  bool zero1() const { return zero1_; }

  int64_t num_params() const;
  const MemoryReport& memory() const { return memory_; }
  FlopReport flops() const;
  std::string summary() const;           // human-readable multi-line report
  std::string sharding_summary() const;  // one line per parameter kind (layers folded); empty: one device

 private:
  void make_layouts();
  void place_values();
  void place_gathered(std::vector<size_t>& slot_bytes, bool allocate);

  Graph graph_;
  PlanSharding sharding_;
  ValueId dloss_ = kNoValue;
  int first_opt_ = 0;
  MemoryPlan mem_plan_;
  MemoryReport memory_;
  Arena persistent_;  // params, copies, grads, optimizer state, inputs
  Arena gathered_;    // FSDP gather slots and buffers, staging; ZeRO-1 gradient pieces
  Arena activations_;
  std::vector<Tensor> views_, state_, opt_views_;
  std::vector<ParamLayout> layouts_;
  std::vector<int> layout_index_;  // per value: its layout (params only), else -1
  bool any_sharded_ = false, zero1_ = false;
};

// FLOPs of one node (matmuls and attention; elementwise work counts 0).
double node_flops(const Graph& g, const Node& n);

}  // namespace tessera::graph
