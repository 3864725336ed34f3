// PlanSpec: everything about one rank's training step that needs no memory and no execution. From a
// forward graph and PlanOptions it finishes the step graph (backward, remat, optimizer), lays out
// the parameters over the mesh, places every value in one of three arenas (by offset: nothing is
// allocated), and reports parameters, FLOPs by phase, memory by category and the collective
// schedule. It is plain data: it can be built for a machine that is not here (an ahead-of-time
// compile), written to JSON and compared by fingerprint. Workspace (workspace.h) binds a PlanSpec
// to memory; the executor (executor.h) runs the two together.
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
//     piece of the (stored) parameter along dimension 0 over `data` (opt()); the optimizer
//     updates that piece of the master and compute copy, which an all-gather then completes.
//   - Parameters the rules do not split (norm scales, or dimensions a mesh axis does not divide)
//     are whole on every rank, as are all parameters without FSDP.
// For one device (and for plain data parallelism) view(), state() and opt() place the same bytes.
//
// The collective schedule (collectives()) is the list of data-parallel, FSDP and ZeRO-1
// collectives of one step with the nodes they are tied to; ParamSync (param_sync.h) executes it.
// Tensor parallelism's activation all-reduces are graph nodes (graph.h), not schedule entries.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "tessera/dist/sharding.h"
#include "tessera/graph/autodiff.h"
#include "tessera/graph/graph.h"

namespace tessera::graph {

struct ParamLayout;

// The mesh as the plan needs it: sizes and this rank's coordinates (no communicators).
struct PlanSharding {
  dist::MeshSizes sizes = ones();
  dist::MeshSizes coords{};
  std::vector<AxisRule> rules;
  bool shard_optimizer_over_data = false;
  double ragged_buffer_factor = -1;  // expert parallelism's receive buffers (sharding_expert.h)

  int64_t size(MeshAxis a) const { return sizes[static_cast<int>(a)]; }
  // The group a gradient is summed over besides fsdp: data, and expert too for a parameter that is
  // whole over the expert axis (every parameter but the expert weights).
  std::vector<MeshAxis> data_axes(const ParamLayout& L) const;
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
  // fuse_gradient_sums (fuse.h) on a training graph; false keeps every gradient sum an
  // add node (tests compare the two).
  bool fuse_gradient_sums = true;
};

// Where a tensor lives: an arena and a byte offset in it, with its shape and dtype.
enum class ArenaKind : uint8_t {
  kNone,         // not placed (an activation no node touches)
  kPersistent,   // params, compute copies, grads, optimizer state, inputs
  kGathered,     // FSDP gather slots and buffers, staging; ZeRO-1 gradient pieces
  kActivations,  // the memory plan's activation arena
  // An inference graph's parameters, compute copies and KV caches, placed in creation order: the
  // plans of one model built for other row counts place them alike, so they can share one arena
  // (Workspace's external arenas).
  kModelState,
};
inline constexpr int kNumArenas = 5;

struct Placement {
  ArenaKind arena = ArenaKind::kNone;
  size_t offset = 0;
  Shape shape;
  DType dtype = DType::kF32;
  size_t bytes() const { return static_cast<size_t>(shape.numel()) * dtype_size(dtype); }
  bool operator==(const Placement&) const = default;
};

// How one parameter is laid out on this rank.
struct ParamLayout {
  struct Gathered {
    ValueId value = kNoValue;  // the parameter or its compute copy, read whole by some node
    Placement staging;         // the concatenated pieces before the block reorder (fsdp_dim > 0)
  };
  ValueId param = kNoValue;
  int layer = -1;  // the decoder layer whose nodes alone read it; -1: outside the layers
  std::vector<std::vector<MeshAxis>> dim_axes;  // per dimension, the mesh axes the rules give
  int fsdp_dim = -1;                            // the dimension split over fsdp; -1: whole
  int64_t fsdp_parts = 1, fsdp_index = 0;
  int64_t opt_parts = 1, opt_index = 0;  // ZeRO-1: the optimizer's piece of `stored` along dim 0
  int64_t tensor_parts = 1;              // tensor parallelism: the value is one of this many slices
  int64_t expert_parts = 1;              // expert parallelism: this rank's experts are one of this many parts
  dist::Piece stored;                    // this rank's piece of the master, compute copy, gradient
  dist::Piece opt;                       // this rank's piece of the optimizer state
  // FSDP only: the values gathered for the nodes and the whole gradient's staging for the block
  // reorder (fsdp_dim > 0).
  std::vector<Gathered> gathered;
  Placement grad_staging;
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
  size_t kv_cache = 0;  // an inference graph's KV caches
  // The MPI communicators' scratch for the non-blocking reductions (dist/mpi_communicator.cc), as
  // estimated from the schedule (collective_scratch_estimate below). Not in total(): it is an
  // estimate, and the communicators map it outside the plan's arenas.
  size_t collective_scratch_estimate = 0;
  size_t total() const {
    return params + param_copies + grads + optimizer + inputs + gathered + activations + kv_cache;
  }
  bool operator==(const MemoryReport&) const = default;
};

struct FlopReport {
  double forward = 0, backward = 0, recompute = 0, optimizer = 0;  // matmul + attention FLOPs
  // MaxText's model FLOPs of one training micro-step on this rank: 3 x the forward pass (the
  // backward counted as twice the forward), remat recomputation not counted (MFU, not HFU).
  double model_training() const { return 3 * forward; }
  // Every FLOP a training micro-step executes on this rank: forward, backward and the remat
  // recomputation (the hardware FLOPs of HFU, which show what a remat policy costs).
  double executed_training() const { return forward + backward + recompute + optimizer; }
  bool operator==(const FlopReport&) const = default;
};

// One entry of the collective schedule. Node indices are into graph().nodes(); a pass runs nodes
// [0, first_optimizer_node()), and an evaluation pass only the forward ones.
enum class CollectiveKind { kAllGather, kReduceScatter, kAllReduce };
enum class CollectiveWhen {
  kEveryPass,      // FSDP decoder-layer gathers (every pass) and gradient reduce-scatters (every micro-step)
  kOncePerStep,    // FSDP gathers outside the layers: started when the step's first pass begins
  kLastMicroStep,  // the other gradients' reductions (step 1), during the last micro-step's backward
  kBeforeUpdate,   // step 2, over data (data > 1 and fsdp > 1), once step 1 has completed
  kAfterUpdate,    // ZeRO-1: the updated pieces of master and compute copy gathered over data
};
struct Collective {
  CollectiveWhen when = CollectiveWhen::kEveryPass;
  CollectiveKind kind = CollectiveKind::kAllGather;
  std::vector<MeshAxis> group;  // the mesh axes whose ranks take part
  ValueId param = kNoValue;     // the parameter whose layout it serves
  ValueId value = kNoValue;     // the value moved: a gathered parameter or copy, or a gradient
  int layer = -1;               // decoder layer (FSDP slots), -1 outside the layers
  size_t bytes = 0;             // the whole buffer, as communicator.h's traffic counters count it
  // Gathers: the node before which it starts (-1: when the pass starts). Reductions: the node
  // after which it starts (-1: not tied to a node: kBeforeUpdate, kAfterUpdate).
  int issue = -1;
  // Gathers: the node before which it must have landed. Layer gradient reductions: the node before
  // which their slot is next written (-1: before the update). Others: -1.
  int wait = -1;
  // Decoder-layer gradient reductions: the first node writing the layer's whole gradients (they
  // are zeroed before it). -1 otherwise.
  int first_write = -1;
  bool operator==(const Collective&) const = default;
};
const char* collective_kind_name(CollectiveKind k);
const char* collective_when_name(CollectiveWhen w);

// What the JSON form keeps of the graph: per node in order, its op, phase and operand shapes.
struct NodeRecord {
  std::string op;
  Phase phase = Phase::kForward;
  std::vector<Placement> in, out;  // arena kNone: only shape and dtype are recorded
  bool operator==(const NodeRecord&) const = default;
};

class PlanSpec {
 public:
  // Takes a forward graph with its loss set; appends backward, remat and optimizer; lays out and
  // places every value. Allocates no tensor memory. An inference graph (Graph::inference(): no
  // loss) gets no backward, remat or optimizer, and its model state goes to ArenaKind::kModelState.
  PlanSpec(Graph forward, const PlanOptions& opts);

  // The JSON form (nodes, placements, arenas, reports, schedule; see plan_spec_json.cc), and back.
  // A loaded PlanSpec answers every report and the schedule but holds no graph (has_graph() false):
  // it cannot be bound to a Workspace or run.
  nlohmann::json to_json() const;
  static PlanSpec from_json(const nlohmann::json& j);
  // A stable 64-bit FNV-1a hash of to_json() as 16 hex digits: equal plans, equal fingerprints.
  std::string fingerprint() const;
  // Equal in everything the JSON form holds.
  bool operator==(const PlanSpec& o) const;

  bool has_graph() const { return has_graph_; }
  const Graph& graph() const { return graph_; }
  ValueId dloss() const { return dloss_; }
  // The seed [1] of the aux losses (graph.h; the trainer fills it), kNoValue without any.
  ValueId daux() const { return daux_; }
  int first_optimizer_node() const { return first_opt_; }
  const PlanSharding& sharding() const { return sharding_; }

  // Per value: what the nodes read and write (for a sharded parameter: the gathered whole copy);
  // persistent storage on this rank (a parameter's, copy's or gradient's piece, the optimizer
  // state's piece; view for every other value); the optimizer's operands (ZeRO-1 pieces; state
  // without ZeRO-1).
  const Placement& view(ValueId v) const { return views_[v]; }
  const Placement& state(ValueId v) const { return state_[v]; }
  const Placement& opt(ValueId v) const { return opt_[v]; }
  size_t arena_bytes(ArenaKind a) const { return arena_bytes_[static_cast<int>(a)]; }

  // One layout per parameter, in graph().params() order; layout(p) by the parameter's id.
  const std::vector<ParamLayout>& layouts() const { return layouts_; }
  const ParamLayout& layout(ValueId param) const;
  int layout_index(ValueId param) const;
  bool any_sharded() const { return any_sharded_; }
  bool zero1() const { return zero1_; }

  const std::vector<Collective>& collectives() const { return collectives_; }
  const std::vector<NodeRecord>& nodes() const { return nodes_; }
  int64_t num_params() const { return num_params_; }
  const MemoryReport& memory() const { return memory_; }
  const FlopReport& flops() const { return flops_; }
  std::string summary() const;           // human-readable multi-line report
  std::string sharding_summary() const;  // one line per parameter kind (layers folded); empty: one device
  // One line: what a step contains (kernels by kind, collectives by kind) and the bytes each mesh
  // axis group moves, like XLA's compile summary.
  std::string step_summary() const;

 private:
  PlanSpec() = default;  // from_json
  void make_layouts();
  void place_values();
  void place_gathered(std::vector<size_t>& slot_bytes);
  void count_flops();
  void record_nodes();
  void build_schedule();  // plan_schedule.cc

  Graph graph_;
  bool has_graph_ = false;
  PlanSharding sharding_;
  ValueId dloss_ = kNoValue;
  ValueId daux_ = kNoValue;
  int first_opt_ = 0;
  std::vector<Placement> views_, state_, opt_;
  std::array<size_t, kNumArenas> arena_bytes_{};
  std::vector<ParamLayout> layouts_;
  std::vector<int> layout_index_;  // per value: its layout (params and what serves them), else -1
  bool any_sharded_ = false, zero1_ = false;
  std::vector<Collective> collectives_;
  std::vector<NodeRecord> nodes_;
  int64_t num_params_ = 0;
  MemoryReport memory_;
  FlopReport flops_;
};

// The scratch (bytes) dist/mpi_communicator.cc's non-blocking schedules take for one collective
// over `ranks` ranks: reduce-scatter and all-reduce hold a receive block of the largest part (and
// a send block beyond 2 ranks); all-gathers and groups of one rank hold none.
size_t collective_scratch_bytes(const Collective& c, int64_t ranks);

}  // namespace tessera::graph
