// PlanSpec's construction: the finished graph, the parameter layouts, every value's placement and
// the reports (plan_spec.h). The collective schedule is built in plan_schedule.cc, the JSON form
// in plan_spec_json.cc. Nothing here allocates tensor memory: placements are offsets.
#include "tessera/graph/plan_spec.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <regex>
#include <set>

#include "tessera/core/arena.h"
#include "tessera/core/error.h"
#include "tessera/graph/fuse.h"
#include "tessera/graph/memory_plan.h"
#include "tessera/graph/op_table.h"
#include "tessera/graph/sharding.h"
#include "tessera/graph/sharding_expert.h"

namespace tessera::graph {

namespace {
bool persistent_kind(ValueKind k) {
  return k != ValueKind::kActivation;
}

std::string gib(size_t b) {
  return fmt::format("{:.3f} GiB", static_cast<double>(b) / (1u << 30));
}

// Places tensors one after another in an arena from `at` (each aligned as Arena::tensor aligns).
struct Cursor {
  ArenaKind arena;
  size_t at = 0;
  Placement take(const Shape& s, DType t) {
    Placement p{arena, at, s, t};
    at = checked_add(at, aligned_bytes(s, t), "the parameter arena");
    return p;
  }
};

// The parameter a value belongs to (itself for a parameter).
ValueId master_of(const Value& v, ValueId id) {
  return v.kind == ValueKind::kParam ? id : v.master;
}

// The part of the global tensor a parameter value holds before FSDP splits it: the whole tensor,
// or under tensor parallelism this rank's slice of the global tensor (whole = the global shape,
// offset along the split dimension). Pieces are in global coordinates so that init
// (models/init.cc: whole_index is the global element) and checkpoints (their "piece:" metadata,
// restored on any mesh) see the same tensor at every tensor-parallel size.
// Expert parallelism's split of an expert weight's dim 0 (Value::ep) is applied the same way.
dist::Piece tensor_slice(const Value& v) {
  dist::Piece p = dist::whole_piece(global_shape(v));
  for (const TensorShard* s : {&v.tp, &v.ep}) {
    if (!s->split()) continue;
    const int64_t parts = s->global / v.shape[s->dim];
    p = dist::split_piece(p, s->dim, parts, s->offset / v.shape[s->dim]);
  }
  return p;
}

// Rows [first, first + rows) of a placed tensor (dimension-0 pieces are contiguous).
Placement rows_of(const Placement& p, int64_t first, int64_t rows) {
  Placement r = p;
  r.shape[0] = rows;
  r.offset += static_cast<size_t>(first * (p.shape.numel() / p.shape[0])) * dtype_size(p.dtype);
  return r;
}

}  // namespace

int64_t PlanSharding::world() const {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

PlanSpec::PlanSpec(Graph forward, const PlanOptions& opts)
    : graph_(std::move(forward)), has_graph_(true), sharding_(opts.sharding) {
  shard_tensor_parallel(graph_);
  shard_expert_parallel(graph_, ExpertParallel{.size = sharding_.size(MeshAxis::kExpert),
                                               .rank = sharding_.coord(MeshAxis::kExpert),
                                               .ragged_buffer_factor = sharding_.ragged_buffer_factor});
  if (graph_.inference()) {
    TESSERA_CHECK(graph_.loss() == kNoValue && graph_.aux_losses().empty() && sharding_.world() == 1,
                  ErrorKind::kInternal, "an inference graph has no loss and runs on one device");
    fuse_residual_products(graph_);
    fuse_shared_input_products(graph_);
    first_opt_ = static_cast<int>(graph_.nodes().size());
  } else {
    dloss_ = append_backward(graph_, &daux_);
    apply_remat(graph_, opts.remat_policy);
    overlap_expert_exchanges(graph_);
    if (opts.fuse_gradient_sums) fuse_gradient_sums(graph_);
    first_opt_ = static_cast<int>(graph_.nodes().size());
    append_optimizer(graph_, opts.optimizer);
  }
  for (const Value& v : graph_.values())
    if (v.kind == ValueKind::kParam) num_params_ += v.shape.numel();
  make_layouts();
  place_values();
  count_flops();
  record_nodes();
  build_schedule();
}

int PlanSpec::layout_index(ValueId param) const {
  TESSERA_ASSERT(param >= 0 && static_cast<size_t>(param) < layout_index_.size() &&
                 layout_index_[param] >= 0);
  return layout_index_[param];
}

const ParamLayout& PlanSpec::layout(ValueId param) const {
  return layouts_[static_cast<size_t>(layout_index(param))];
}

void PlanSpec::make_layouts() {
  const auto& values = graph_.values();
  layout_index_.assign(values.size(), -1);
  // A parameter belongs to decoder layer l when every node reading it (or its compute copy) is in l.
  std::vector<int> layer(values.size(), -2);  // -2: no reader yet
  std::vector<char> read(values.size(), 0);
  for (int i = 0; i < first_opt_; ++i) {
    const Node& n = graph_.nodes()[i];
    for (ValueId v : n.in) {
      const Value& val = values[v];
      if (val.kind != ValueKind::kParam && val.kind != ValueKind::kParamCompute) continue;
      read[v] = 1;
      int& l = layer[master_of(val, v)];
      l = l == -2 || l == n.layer ? n.layer : -1;
    }
  }
  const int64_t f = sharding_.size(MeshAxis::kFsdp), dp = sharding_.size(MeshAxis::kData);
  TESSERA_CHECK(
      !(sharding_.shard_optimizer_over_data && sharding_.size(MeshAxis::kExpert) > 1), ErrorKind::kConfig,
      "shard_optimizer_over_data (ZeRO-1) together with expert parallelism ({} expert ranks) is not "
      "in this build yet: set shard_optimizer_over_data=false, or use FSDP (ici_fsdp_parallelism)",
      sharding_.size(MeshAxis::kExpert));
  for (ValueId p : graph_.params()) {
    const Value& v = values[p];
    ParamLayout L;
    L.param = p;
    L.layer = std::max(layer[p], -1);
    L.dim_axes = dist::mesh_axes_for(v.logical_axes, v.shape, sharding_.rules, sharding_.sizes);
    // The expert axis: an expert weight's experts are already split (sharding_expert.h, Value::ep);
    // every other parameter is whole over it (Tessera's FSDP shards over fsdp alone; outside the
    // MoE layers the expert axis is a data axis, and their gradients are summed over it).
    for (auto& axes : L.dim_axes) std::erase(axes, MeshAxis::kExpert);
    for (int d = 0; d < v.shape.rank(); ++d) {
      const auto& axes = L.dim_axes[static_cast<size_t>(d)];
      const bool fsdp = std::find(axes.begin(), axes.end(), MeshAxis::kFsdp) != axes.end();
      for (MeshAxis a : axes)
        if (a != MeshAxis::kFsdp && a != MeshAxis::kTensor)
          fail(ErrorKind::kConfig,
               "{}: logical_axis_rules split dimension {} ({}) over mesh axis {}, which Tessera "
               "does not shard parameters over (fsdp and tensor only)",
               v.name, d, v.logical_axes[d], kMeshAxes[static_cast<int>(a)].axis);
      if (fsdp && axes.size() > 1)
        fail(ErrorKind::kConfig,
             "{}: logical_axis_rules split dimension {} ({}) over {}; one dimension over both "
             "fsdp and tensor is not supported",
             v.name, d, v.logical_axes[d], dist::axes_name(axes));
      if (fsdp) L.fsdp_dim = d;
    }
    L.stored = tensor_slice(v);
    if (v.tp.split()) L.tensor_parts = v.tp.global / v.shape[v.tp.dim];
    if (v.ep.split()) L.expert_parts = v.ep.global / v.shape[v.ep.dim];
    if (f > 1 && L.fsdp_dim >= 0 && v.shape[L.fsdp_dim] % f == 0) {
      L.fsdp_parts = f;
      L.fsdp_index = sharding_.coord(MeshAxis::kFsdp);
      L.stored = dist::split_piece(L.stored, L.fsdp_dim, f, L.fsdp_index);
      any_sharded_ = true;
    } else {
      L.fsdp_dim = -1;
    }
    L.opt = L.stored;
    if (sharding_.shard_optimizer_over_data && dp > 1 && L.stored.shape[0] % dp == 0) {
      L.opt_parts = dp;
      L.opt_index = sharding_.coord(MeshAxis::kData);
      L.opt = dist::split_piece(L.stored, 0, dp, L.opt_index);
      zero1_ = true;
    }
    if (L.sharded()) {
      if (read[p]) L.gathered.push_back({p, Placement{}});
      if (v.compute_copy != kNoValue && read[v.compute_copy])
        L.gathered.push_back({v.compute_copy, Placement{}});
    }
    layout_index_[p] = static_cast<int>(layouts_.size());
    layouts_.push_back(std::move(L));
  }
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i].kind != ValueKind::kParam && values[i].master != kNoValue)
      layout_index_[i] = layout_index_[values[i].master];
}

// Places the gathered arena: slot 0, slot 1 (each as large as the largest layer of its parity
// needs), then the outer parameters' buffers and the ZeRO-1 gradient pieces, then the outer
// parameters' staging. slot_bytes holds the two slots' sizes (a first call with zeros measures
// them) and receives the arena's total in [2].
//
// The outer parameters' gather staging and gradient staging share one region: a gather's staging
// is written and reordered between the start of a step's first pass and the parameter's first
// reader in the forward pass (ParamSync::wait_outer), and a gradient's staging from its last
// writer in the last micro-step's backward pass to finish_gradients, so the two never hold data
// at once. (For the embedding tables of a large vocabulary this is gigabytes.)
void PlanSpec::place_gathered(std::vector<size_t>& slot_bytes) {
  const auto& values = graph_.values();
  const std::vector<size_t> slot_start = {0, slot_bytes[0]};
  Cursor rest{ArenaKind::kGathered, slot_bytes[0] + slot_bytes[1]};
  std::map<int, Cursor> layer_cursor;
  std::vector<Placement*> outer_gather_staging, outer_grad_staging;
  for (ParamLayout& L : layouts_) {
    const Value& v = values[L.param];
    if (L.sharded()) {
      const bool outer = L.layer < 0;
      Cursor* c = &rest;
      if (!outer) {
        auto [it, fresh] =
            layer_cursor.try_emplace(L.layer, Cursor{ArenaKind::kGathered, slot_start[L.layer % 2]});
        c = &it->second;
      }
      for (auto& g : L.gathered) {
        const Value& gv = values[g.value];
        views_[g.value] = c->take(gv.shape, gv.dtype);
        if (L.fsdp_dim <= 0) continue;
        g.staging = Placement{ArenaKind::kGathered, 0, gv.shape, gv.dtype};
        if (outer)
          outer_gather_staging.push_back(&g.staging);
        else
          g.staging = c->take(gv.shape, gv.dtype);
      }
      views_[v.grad] = c->take(v.shape, DType::kF32);
      if (L.fsdp_dim > 0) {
        L.grad_staging = Placement{ArenaKind::kGathered, 0, v.shape, DType::kF32};
        if (outer)
          outer_grad_staging.push_back(&L.grad_staging);
        else
          L.grad_staging = c->take(v.shape, DType::kF32);
      }
    }
    if (L.opt_parts > 1) opt_[v.grad] = rest.take(L.opt.shape, DType::kF32);
  }
  for (auto& [l, c] : layer_cursor) slot_bytes[l % 2] = std::max(slot_bytes[l % 2], c.at - slot_start[l % 2]);
  size_t end = rest.at;
  for (const auto* list : {&outer_gather_staging, &outer_grad_staging}) {
    Cursor shared{ArenaKind::kGathered, rest.at};
    for (Placement* p : *list) *p = shared.take(p->shape, p->dtype);
    end = std::max(end, shared.at);
  }
  slot_bytes[2] = end;
}

void PlanSpec::place_values() {
  const auto& values = graph_.values();
  const size_t nv = values.size();
  const MemoryPlan mem_plan = plan_memory(graph_);
  views_.assign(nv, Placement{});
  state_.assign(nv, Placement{});
  opt_.assign(nv, Placement{});
  Cursor persistent{ArenaKind::kPersistent}, model_state{ArenaKind::kModelState};
  for (size_t i = 0; i < nv; ++i) {
    const Value& v = values[i];
    if (graph_.inference() && v.kind != ValueKind::kInput && v.kind != ValueKind::kActivation) {
      state_[i] = model_state.take(v.shape, v.dtype);  // parameters, compute copies, KV caches
      const size_t b = aligned_bytes(v.shape, v.dtype);
      (v.kind == ValueKind::kParam   ? memory_.params
       : v.kind == ValueKind::kCache ? memory_.kv_cache
                                     : memory_.param_copies) += b;
    } else if (persistent_kind(v.kind)) {
      Shape shape = v.shape;
      if (layout_index_[i] >= 0) {
        const ParamLayout& L = layouts_[static_cast<size_t>(layout_index_[i])];
        shape = v.kind == ValueKind::kOptState ? L.opt.shape : L.stored.shape;
      }
      state_[i] = persistent.take(shape, v.dtype);
      const size_t b = aligned_bytes(shape, v.dtype);
      size_t& category = v.kind == ValueKind::kParam          ? memory_.params
                         : v.kind == ValueKind::kParamCompute ? memory_.param_copies
                         : v.kind == ValueKind::kGrad         ? memory_.grads
                         : v.kind == ValueKind::kOptState     ? memory_.optimizer
                                                              : memory_.inputs;
      category += b;
    } else {
      state_[i] = Placement{ArenaKind::kActivations, mem_plan.offset[i], v.shape, v.dtype};
    }
    views_[i] = opt_[i] = state_[i];
  }
  arena_bytes_[static_cast<int>(ArenaKind::kPersistent)] = persistent.at;
  arena_bytes_[static_cast<int>(ArenaKind::kModelState)] = model_state.at;
  arena_bytes_[static_cast<int>(ArenaKind::kActivations)] = mem_plan.arena_bytes;
  memory_.activations = mem_plan.arena_bytes;
  memory_.activations_lower_bound = mem_plan.lower_bound;
  if (any_sharded_ || zero1_) {
    std::vector<size_t> sizes = {0, 0, 0};
    place_gathered(sizes);  // measures the slots
    place_gathered(sizes);  // places with the measured slots
    arena_bytes_[static_cast<int>(ArenaKind::kGathered)] = memory_.gathered = sizes[2];
  }
  // ZeRO-1: the optimizer updates rows [opt_index * r, (opt_index + 1) * r) of the stored master
  // and compute copy.
  for (const ParamLayout& L : layouts_) {
    if (L.opt_parts == 1) continue;
    const int64_t rows = L.opt.shape[0], first = L.opt_index * rows;
    const Value& v = values[L.param];
    opt_[L.param] = rows_of(state_[L.param], first, rows);
    if (v.compute_copy != kNoValue) opt_[v.compute_copy] = rows_of(state_[v.compute_copy], first, rows);
  }
}

void PlanSpec::count_flops() {
  for (const Node& n : graph_.nodes()) {
    const double f = node_flops(graph_, n);
    switch (n.phase) {
      case Phase::kForward:
        flops_.forward += f;
        break;
      case Phase::kBackward:
        flops_.backward += f;
        break;
      case Phase::kRecompute:
        flops_.recompute += f;
        break;
      case Phase::kOptimizer:
        flops_.optimizer += f;
        break;
    }
  }
}

void PlanSpec::record_nodes() {
  auto shapes = [&](const std::vector<ValueId>& ids) {
    std::vector<Placement> r;
    for (ValueId v : ids)
      r.push_back(Placement{ArenaKind::kNone, 0, graph_.value(v).shape, graph_.value(v).dtype});
    return r;
  };
  nodes_.clear();
  for (const Node& n : graph_.nodes())
    nodes_.push_back({op_name(n.op), n.phase, shapes(n.in), shapes(n.out)});
}

std::string ParamLayout::describe(const Value& v) const {
  std::vector<std::string> dims;
  for (size_t d = 0; d < dim_axes.size(); ++d)
    dims.push_back(fmt::format(
        "{}:{}", v.logical_axes[d],
        v.ep.split() && v.ep.dim == static_cast<int>(d) ? "expert" : dist::axes_name(dim_axes[d])));
  std::string s = fmt::format("{} {} ({})", v.name, v.shape.str(), fmt::join(dims, ", "));
  std::string split;
  if (v.tp.split()) split = describe_tensor_shard(v);
  if (v.ep.split())
    split += fmt::format("{}experts [{}:{}] of {} on this expert rank", split.empty() ? "" : "; ",
                         v.ep.offset, v.ep.offset + v.shape[v.ep.dim], v.ep.global);
  if (!split.empty()) s += ": " + split;
  if (sharded())
    s += fmt::format("{} dim {} split over fsdp ({} pieces) -> {} here", split.empty() ? ":" : ";", fsdp_dim,
                     fsdp_parts, stored.shape.str());
  else
    s += split.empty() ? ": whole on every rank" : "; whole over the other axes";
  if (opt_parts > 1) s += fmt::format("; optimizer state {} (ZeRO-1 over data)", opt.shape.str());
  return s;
}

std::string PlanSpec::sharding_summary() const {
  if (sharding_.world() == 1 || !has_graph_) return "";
  // Decoder layers share their parameters' names up to the index: one line per kind.
  static const std::regex layer_index(R"(layers_\d+\.)");
  std::set<std::string> seen;
  std::string s;
  for (const ParamLayout& L : layouts_) {
    const std::string line = std::regex_replace(L.describe(graph_.value(L.param)), layer_index, "layers_*.");
    if (seen.insert(line).second) s += "sharding: " + line + "\n";
  }
  return s;
}

// From the node records, so that a loaded plan (no graph) says the same: kernels by kind, the
// collectives of the schedule and the graph's own (tensor all-reduces, expert all-to-alls), and the
// bytes per mesh axis group as communicator.h counts them. Everything is per step of one
// micro-step (gradient accumulation repeats the every-pass entries and the graph's collectives).
std::string PlanSpec::step_summary() const {
  int64_t gathers = 0, scatters = 0, reduces = 0, to_alls = 0, attention = 0, grouped = 0;
  std::map<std::string, double> bytes;  // mesh axis group -> bytes
  for (const Collective& c : collectives_) {
    (c.kind == CollectiveKind::kAllGather       ? gathers
     : c.kind == CollectiveKind::kReduceScatter ? scatters
                                                : reduces) += 1;
    bytes[dist::axes_name(c.group)] += static_cast<double>(c.bytes);
  }
  auto size_of = [](const Placement& p) {
    return static_cast<double>(p.shape.numel() * dtype_size(p.dtype));
  };
  for (const NodeRecord& n : nodes_) {
    if (n.op == "attention" || n.op == "attention_bwd") ++attention;
    if (n.op == "grouped_matmul") ++grouped;
    if (n.op == "tp_all_reduce") {
      ++reduces;
      bytes["tensor"] += 4.0 * static_cast<double>(n.in[0].shape.numel());
    }
    // The exchanges' [R, E] side: the dispatch's input, the combine's output (sharding_expert.h).
    if (n.op == "moe_to_experts" || n.op == "moe_from_experts_bwd") {
      ++to_alls;
      bytes["expert"] += size_of(n.in[0]);
    }
    if (n.op == "moe_from_experts" || n.op == "moe_to_experts_bwd") {
      ++to_alls;
      bytes["expert"] += size_of(n.out[0]);
    }
    if (n.op == "moe_to_experts") {
      ++gathers;
      bytes["expert"] += size_of(n.out[2]);
    }
  }
  std::string per_axis;
  for (const auto& [axes, b] : bytes)
    per_axis += fmt::format("{}{} {:.3f} MiB", per_axis.empty() ? "" : ", ", axes, b / (1 << 20));
  return fmt::format(
      "plan: per step: {} plan nodes, {} all-gathers, {} reduce-scatters, {} all-reduces, {} all-to-alls, {} "
      "attention kernels, {} grouped matmuls; bytes per mesh axis: {}\n",
      nodes_.size(), gathers, scatters, reduces, to_alls, attention, grouped,
      per_axis.empty() ? "none" : per_axis);
}

std::string PlanSpec::summary() const {
  const FlopReport& f = flops_;
  const MemoryReport& m = memory_;
  std::string s;
  s += fmt::format("plan: {} parameters ({:.2f} M), {} nodes ({} optimizer), fingerprint {}\n", num_params_,
                   static_cast<double>(num_params_) / 1e6, nodes_.size(),
                   nodes_.size() - static_cast<size_t>(first_opt_), fingerprint());
  s += fmt::format("plan: GFLOP per micro-step: forward {:.2f}, backward {:.2f}, recompute {:.2f}\n",
                   f.forward / 1e9, f.backward / 1e9, f.recompute / 1e9);
  s += sharding_summary();
  s += step_summary();
  s += fmt::format(
      "plan: memory{}: parameters {}, compute copies {}, gradients {}, optimizer state {}, "
      "inputs {}, {}activations {} (lower bound {}), total {}",
      sharding_.world() > 1 ? " per rank" : "", gib(m.params), gib(m.param_copies), gib(m.grads),
      gib(m.optimizer), gib(m.inputs),
      (m.gathered > 0 ? fmt::format("collective buffers {}, ", gib(m.gathered)) : std::string()) +
          (m.kv_cache > 0 ? fmt::format("KV cache {}, ", gib(m.kv_cache)) : std::string()),
      gib(m.activations), gib(m.activations_lower_bound), gib(m.total()));
  if (m.collective_scratch_estimate > 0)
    s += fmt::format(
        "\nplan: outside the total: MPI collectives' scratch about {} (estimated from the schedule; the "
        "first step logs the mapped figure)",
        gib(m.collective_scratch_estimate));
  return s;
}

}  // namespace tessera::graph
