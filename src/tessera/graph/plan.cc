#include "tessera/graph/plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <regex>
#include <set>

#include "tessera/core/error.h"
#include "tessera/ops/attention.h"

namespace tessera::graph {

namespace {
bool persistent_kind(ValueKind k) {
  return k != ValueKind::kActivation;
}

std::string gib(size_t b) {
  return fmt::format("{:.3f} GiB", static_cast<double>(b) / (1u << 30));
}

// Carves tensors out of a region in order; with a null base it only counts (the sizing pass).
struct Cursor {
  char* base = nullptr;
  size_t at = 0;
  Tensor take(const Shape& s, DType t) {
    Tensor x(base ? base + at : nullptr, s, t);
    at += aligned_bytes(s, t);
    return x;
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
dist::Piece tensor_slice(const Value& v) {
  dist::Piece p = dist::whole_piece(global_shape(v));
  if (!v.tp.split()) return p;
  const int64_t parts = v.tp.global / v.shape[v.tp.dim];
  return dist::split_piece(p, v.tp.dim, parts, v.tp.offset / v.shape[v.tp.dim]);
}

}  // namespace

int64_t PlanSharding::world() const {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

Plan::Plan(Graph forward, const PlanOptions& opts) : graph_(std::move(forward)), sharding_(opts.sharding) {
  dloss_ = append_backward(graph_);
  apply_remat(graph_, opts.remat_policy);
  first_opt_ = static_cast<int>(graph_.nodes().size());
  append_optimizer(graph_, opts.optimizer);
  mem_plan_ = plan_memory(graph_);
  make_layouts();
  place_values();
}

const ParamLayout& Plan::layout(ValueId param) const {
  TESSERA_ASSERT(param >= 0 && static_cast<size_t>(param) < layout_index_.size() &&
                 layout_index_[param] >= 0);
  return layouts_[static_cast<size_t>(layout_index_[param])];
}

void Plan::make_layouts() {
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
  for (ValueId p : graph_.params()) {
    const Value& v = values[p];
    ParamLayout L;
    L.param = p;
    L.layer = std::max(layer[p], -1);
    L.dim_axes = dist::mesh_axes_for(v.logical_axes, v.shape, sharding_.rules, sharding_.sizes);
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
      if (read[p]) L.gathered.push_back({p, Tensor()});
      if (v.compute_copy != kNoValue && read[v.compute_copy])
        L.gathered.push_back({v.compute_copy, Tensor()});
    }
    layout_index_[p] = static_cast<int>(layouts_.size());
    layouts_.push_back(std::move(L));
  }
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i].kind != ValueKind::kParam && values[i].master != kNoValue)
      layout_index_[i] = layout_index_[values[i].master];
}

// Pass 1 (allocate = false) sizes the two gather slots and the rest; pass 2 places the tensors in
// gathered_: slot 0, slot 1, then the outer parameters' buffers and the ZeRO-1 gradient pieces.
void Plan::place_gathered(std::vector<size_t>& slot_bytes, bool allocate) {
  const auto& values = graph_.values();
  char* base = allocate ? gathered_.base() : nullptr;
  std::vector<size_t> slot_start = {0, slot_bytes[0]};
  Cursor rest{base, slot_bytes[0] + slot_bytes[1]};
  std::map<int, Cursor> layer_cursor;
  for (ParamLayout& L : layouts_) {
    const Value& v = values[L.param];
    if (L.sharded()) {
      Cursor* c = &rest;
      if (L.layer >= 0) {
        auto [it, fresh] = layer_cursor.try_emplace(L.layer, Cursor{base, slot_start[L.layer % 2]});
        c = &it->second;
      }
      for (auto& g : L.gathered) {
        const Value& gv = values[g.value];
        views_[g.value] = c->take(gv.shape, gv.dtype);
        if (L.fsdp_dim > 0) g.staging = c->take(gv.shape, gv.dtype);
      }
      views_[v.grad] = c->take(v.shape, DType::kF32);
      if (L.fsdp_dim > 0) L.grad_staging = c->take(v.shape, DType::kF32);
    }
    if (L.opt_parts > 1) opt_views_[v.grad] = rest.take(L.opt.shape, DType::kF32);
  }
  if (allocate) return;
  for (auto& [l, c] : layer_cursor) slot_bytes[l % 2] = std::max(slot_bytes[l % 2], c.at - slot_start[l % 2]);
  slot_bytes[2] = slot_bytes[0] + slot_bytes[1] + rest.at;  // the total (rest started at 0 in this pass)
}

void Plan::place_values() {
  const auto& values = graph_.values();
  const size_t nv = values.size();
  views_.assign(nv, Tensor());
  state_.assign(nv, Tensor());
  opt_views_.assign(nv, Tensor());
  auto state_shape = [&](size_t i) -> Shape {
    const Value& v = values[i];
    if (layout_index_[i] < 0) return v.shape;
    const ParamLayout& L = layouts_[static_cast<size_t>(layout_index_[i])];
    return v.kind == ValueKind::kOptState ? L.opt.shape : L.stored.shape;
  };
  size_t persistent_bytes = 0;
  for (size_t i = 0; i < nv; ++i) {
    const Value& v = values[i];
    if (!persistent_kind(v.kind)) continue;
    const size_t b = aligned_bytes(state_shape(i), v.dtype);
    persistent_bytes += b;
    switch (v.kind) {
      case ValueKind::kParam:
        memory_.params += b;
        break;
      case ValueKind::kParamCompute:
        memory_.param_copies += b;
        break;
      case ValueKind::kGrad:
        memory_.grads += b;
        break;
      case ValueKind::kOptState:
        memory_.optimizer += b;
        break;
      default:
        memory_.inputs += b;
        break;
    }
  }
  memory_.activations = mem_plan_.arena_bytes;
  memory_.activations_lower_bound = mem_plan_.lower_bound;

  persistent_ = Arena(persistent_bytes, "parameters and optimizer state");
  activations_ = Arena(mem_plan_.arena_bytes, "activations");
  for (size_t i = 0; i < nv; ++i) {
    const Value& v = values[i];
    if (persistent_kind(v.kind)) {
      state_[i] = persistent_.tensor(state_shape(i), v.dtype);
      views_[i] = state_[i];
    } else {
      views_[i] = Tensor(activations_.base() + mem_plan_.offset[i], v.shape, v.dtype);
      state_[i] = views_[i];
    }
    opt_views_[i] = state_[i];
  }
  if (any_sharded_ || zero1_) {
    std::vector<size_t> sizes = {0, 0, 0};
    place_gathered(sizes, false);
    gathered_ = Arena(sizes[2], "gathered parameters and gradients");
    memory_.gathered = sizes[2];
    place_gathered(sizes, true);
  }
  // ZeRO-1: the optimizer updates rows [opt_index * r, (opt_index + 1) * r) of the stored master
  // and compute copy (dimension 0 pieces are contiguous).
  for (const ParamLayout& L : layouts_) {
    if (L.opt_parts == 1) continue;
    const int64_t rows = L.opt.shape[0], first = L.opt_index * rows;
    const Value& v = values[L.param];
    opt_views_[L.param] = state_[L.param].slice0(first, first + rows);
    if (v.compute_copy != kNoValue)
      opt_views_[v.compute_copy] = state_[v.compute_copy].slice0(first, first + rows);
  }
}

int64_t Plan::num_params() const {
  int64_t n = 0;
  for (const Value& v : graph_.values())
    if (v.kind == ValueKind::kParam) n += v.shape.numel();
  return n;
}

double node_flops(const Graph& g, const Node& n) {
  switch (n.op) {
    case OpKind::kMatmul: {
      const Shape& c = g.value(n.out[0]).shape;
      const Shape& a = g.value(n.in[0]).shape;
      int64_t k = n.attrs.trans_a ? a[0] : a[1];
      return 2.0 * static_cast<double>(c[0]) * static_cast<double>(c[1]) * static_cast<double>(k);
    }
    case OpKind::kAttention:
      return ops::attention_fwd_flops(n.attrs.batch, n.attrs.seq, n.attrs.heads, n.attrs.head_dim,
                                      n.attrs.sliding_window);
    case OpKind::kAttentionBwd:
      return ops::attention_bwd_flops(n.attrs.batch, n.attrs.seq, n.attrs.heads, n.attrs.head_dim,
                                      n.attrs.sliding_window);
    default:
      return 0;
  }
}

FlopReport Plan::flops() const {
  FlopReport r;
  for (const Node& n : graph_.nodes()) {
    double f = node_flops(graph_, n);
    switch (n.phase) {
      case Phase::kForward:
        r.forward += f;
        break;
      case Phase::kBackward:
        r.backward += f;
        break;
      case Phase::kRecompute:
        r.recompute += f;
        break;
      case Phase::kOptimizer:
        r.optimizer += f;
        break;
    }
  }
  return r;
}

std::string ParamLayout::describe(const Value& v) const {
  std::vector<std::string> dims;
  for (size_t d = 0; d < dim_axes.size(); ++d)
    dims.push_back(fmt::format("{}:{}", v.logical_axes[d], dist::axes_name(dim_axes[d])));
  std::string s = fmt::format("{} {} ({})", v.name, v.shape.str(), fmt::join(dims, ", "));
  if (v.tp.split()) s += ": " + describe_tensor_shard(v);
  if (sharded())
    s += fmt::format("{} dim {} split over fsdp ({} pieces) -> {} here", v.tp.split() ? ";" : ":", fsdp_dim,
                     fsdp_parts, stored.shape.str());
  else
    s += v.tp.split() ? "; whole over the other axes" : ": whole on every rank";
  if (opt_parts > 1) s += fmt::format("; optimizer state {} (ZeRO-1 over data)", opt.shape.str());
  return s;
}

std::string Plan::sharding_summary() const {
  if (sharding_.world() == 1) return "";
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

std::string Plan::summary() const {
  FlopReport f = flops();
  const MemoryReport& m = memory_;
  std::string s;
  s += fmt::format("plan: {} parameters ({:.2f} M), {} nodes ({} optimizer)\n", num_params(),
                   static_cast<double>(num_params()) / 1e6, graph_.nodes().size(),
                   graph_.nodes().size() - static_cast<size_t>(first_opt_));
  s += fmt::format("plan: GFLOP per micro-step: forward {:.2f}, backward {:.2f}, recompute {:.2f}\n",
                   f.forward / 1e9, f.backward / 1e9, f.recompute / 1e9);
  s += sharding_summary();
  s += fmt::format(
      "plan: memory{}: parameters {}, compute copies {}, gradients {}, optimizer state {}, "
      "inputs {}, {}activations {} (lower bound {}), total {}",
      sharding_.world() > 1 ? " per rank" : "", gib(m.params), gib(m.param_copies), gib(m.grads),
      gib(m.optimizer), gib(m.inputs),
      m.gathered > 0 ? fmt::format("collective buffers {}, ", gib(m.gathered)) : std::string(),
      gib(m.activations), gib(m.activations_lower_bound), gib(m.total()));
  return s;
}

}  // namespace tessera::graph
