#include "tessera/graph/param_sync.h"

#include <chrono>
#include <cstring>

#include "tessera/core/error.h"
#include "tessera/ops/optimizer.h"

namespace tessera::graph {

using Request = dist::Communicator::Request;

// Per node of [0, first_optimizer_node()) (entries of skipped nodes stay empty).
struct ParamSync::Schedule {
  std::vector<int> need_layer;  // the layer whose gathered parameters the node reads, or -1
  std::vector<int> prefetch;    // the layer to start gathering when the node starts a run, or -1
  std::vector<int> grad_first;  // the layer whose gradient slot the node is first to write, or -1
  std::vector<int> grad_last;   // the layer whose gradient slot the node is last to write, or -1
  std::vector<std::vector<int>> outer_first_use;  // outer layouts first read by the node
  std::vector<std::vector<int>> grad_ready;       // layouts whose gradient the node writes last
  int first_layer = -1;                           // the first run's layer
};

ParamSync::ParamSync(Plan& plan, dist::Mesh& mesh)
    : plan_(plan),
      mesh_(mesh),
      fsdp_(mesh.axis(MeshAxis::kFsdp)),
      data_(mesh.axis(MeshAxis::kData)),
      batch_(mesh.axes({MeshAxis::kData, MeshAxis::kFsdp})) {
  const auto& layouts = plan_.layouts();
  outer_reqs_.resize(layouts.size());
  for (size_t k = 0; k < layouts.size(); ++k) {
    const ParamLayout& L = layouts[k];
    if (!L.sharded()) continue;
    if (L.layer < 0) {
      outer_layouts_.push_back(static_cast<int>(k));
      continue;
    }
    if (layer_layouts_.size() <= static_cast<size_t>(L.layer))
      layer_layouts_.resize(static_cast<size_t>(L.layer) + 1);
    layer_layouts_[static_cast<size_t>(L.layer)].push_back(static_cast<int>(k));
  }
  full_ = std::make_unique<Schedule>(build_schedule(false));
  forward_ = std::make_unique<Schedule>(build_schedule(true));
}

ParamSync::~ParamSync() {
  // Requests complete before the buffers they write go away (their destructors wait).
  for (Slot* s : {&slots_[0], &slots_[1], &grad_slots_[0], &grad_slots_[1]}) s->reqs.clear();
  outer_reqs_.clear();
  pending_.clear();
}

ParamSync::Schedule ParamSync::build_schedule(bool forward_only) const {
  const Graph& g = plan_.graph();
  const auto& nodes = g.nodes();
  const auto& layouts = plan_.layouts();
  const int end = plan_.first_optimizer_node();
  Schedule s;
  s.need_layer.assign(static_cast<size_t>(end), -1);
  s.prefetch = s.grad_first = s.grad_last = s.need_layer;
  s.outer_first_use.resize(static_cast<size_t>(end));
  s.grad_ready.resize(static_cast<size_t>(end));
  std::vector<int> gathered_of(g.values().size(), -1);
  for (size_t k = 0; k < layouts.size(); ++k)
    for (const auto& gv : layouts[k].gathered)
      gathered_of[static_cast<size_t>(gv.value)] = static_cast<int>(k);
  std::vector<int> last_writer(layouts.size(), -1);
  std::vector<char> outer_seen(layouts.size(), 0);
  std::vector<int> first_grad(layer_layouts_.size(), -1), last_grad(layer_layouts_.size(), -1);
  std::vector<std::pair<int, int>> runs;  // (first node, layer)
  for (int i = 0; i < end; ++i) {
    const Node& n = nodes[i];
    if (forward_only && n.phase != Phase::kForward) continue;
    for (ValueId v : n.in) {
      const int k = gathered_of[static_cast<size_t>(v)];
      if (k < 0) continue;
      const ParamLayout& L = layouts[static_cast<size_t>(k)];
      if (L.layer >= 0) {
        TESSERA_ASSERT(s.need_layer[i] < 0 || s.need_layer[i] == L.layer);
        s.need_layer[i] = L.layer;
      } else if (!outer_seen[k]) {
        outer_seen[k] = 1;
        s.outer_first_use[i].push_back(k);
      }
    }
    if (s.need_layer[i] >= 0 && (runs.empty() || runs.back().second != s.need_layer[i]))
      runs.emplace_back(i, s.need_layer[i]);
    for (ValueId v : n.out) {
      const Value& val = g.value(v);
      if (val.kind != ValueKind::kGrad) continue;
      const ParamLayout& L = plan_.layout(val.master);
      const int k = static_cast<int>(&L - layouts.data());
      last_writer[static_cast<size_t>(k)] = i;
      if (L.sharded() && L.layer >= 0) {
        const auto l = static_cast<size_t>(L.layer);
        if (first_grad[l] < 0) first_grad[l] = i;
        last_grad[l] = i;
      }
    }
  }
  for (size_t r = 0; r + 1 < runs.size(); ++r) {
    const int l = runs[r].second, next = runs[r + 1].second;
    if (next != l && next % 2 != l % 2) s.prefetch[runs[r].first] = next;
  }
  if (!runs.empty()) s.first_layer = runs[0].second;
  for (size_t k = 0; k < layouts.size(); ++k) {
    const ParamLayout& L = layouts[k];
    if (last_writer[k] >= 0 && !(L.sharded() && L.layer >= 0))
      s.grad_ready[static_cast<size_t>(last_writer[k])].push_back(static_cast<int>(k));
  }
  for (size_t l = 0; l < first_grad.size(); ++l) {
    if (first_grad[l] >= 0) s.grad_first[first_grad[l]] = static_cast<int>(l);
    if (last_grad[l] >= 0) s.grad_last[last_grad[l]] = static_cast<int>(l);
  }
  return s;
}

void ParamSync::wait_all(std::vector<std::unique_ptr<Request>>& reqs) {
  if (reqs.empty()) return;
  const auto t0 = std::chrono::steady_clock::now();
  for (auto& r : reqs) r->wait();
  reqs.clear();
  exposed_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// ---- parameter gathers

namespace {

// Starts the all-gather of one gathered value into its view (or staging, reordered on completion).
std::unique_ptr<Request> start_gather(const Plan& plan, const ParamLayout& L, const ParamLayout::Gathered& g,
                                      dist::Communicator& fsdp) {
  const Tensor& src = plan.state(g.value);
  const Tensor& dst = L.fsdp_dim > 0 ? g.staging : plan.view(g.value);
  return fsdp.all_gather_async(src.data(), dst.data(), static_cast<size_t>(src.numel()), src.dtype());
}

void finish_reorder(const Plan& plan, const ParamLayout& L) {
  if (L.fsdp_dim <= 0) return;
  for (const auto& g : L.gathered) {
    const Tensor& v = plan.view(g.value);
    dist::blocks_to_tensor(g.staging.data(), v.data(), v.shape(), L.fsdp_dim, L.fsdp_parts,
                           dtype_size(v.dtype()));
  }
}

}  // namespace

void ParamSync::finish_slot_gather(Slot& s) {
  if (s.reqs.empty()) return;
  wait_all(s.reqs);
  for (int k : layer_layouts_[static_cast<size_t>(s.owner)])
    finish_reorder(plan_, plan_.layouts()[static_cast<size_t>(k)]);
}

void ParamSync::gather_layer(int layer, bool wait) {
  if (layer < 0 || static_cast<size_t>(layer) >= layer_layouts_.size()) return;
  Slot& s = slots_[layer % 2];
  if (s.owner != layer) {
    finish_slot_gather(s);  // a prefetch nobody used still writes the slot: let it land first
    s.owner = layer;
    for (int k : layer_layouts_[static_cast<size_t>(layer)]) {
      const ParamLayout& L = plan_.layouts()[static_cast<size_t>(k)];
      for (const auto& g : L.gathered) s.reqs.push_back(start_gather(plan_, L, g, fsdp_));
    }
  }
  if (wait || !overlap_) finish_slot_gather(s);
}

void ParamSync::ensure_layer(int layer) {
  gather_layer(layer, true);
}

void ParamSync::start_outer_gathers() {
  for (int k : outer_layouts_) {
    const ParamLayout& L = plan_.layouts()[static_cast<size_t>(k)];
    auto& reqs = outer_reqs_[static_cast<size_t>(k)];
    wait_all(reqs);  // from a step whose pass never read it
    for (const auto& g : L.gathered) reqs.push_back(start_gather(plan_, L, g, fsdp_));
    if (!overlap_) wait_outer(k);
  }
  outer_fresh_ = true;
}

void ParamSync::wait_outer(int k) {
  auto& reqs = outer_reqs_[static_cast<size_t>(k)];
  if (reqs.empty()) return;
  wait_all(reqs);
  finish_reorder(plan_, plan_.layouts()[static_cast<size_t>(k)]);
}

// ---- gradient reductions

namespace {

// The whole gradient as the reduce-scatter wants it: blocks of the pieces, one after another.
const Tensor& grad_blocks(const Plan& plan, const ParamLayout& L) {
  const Tensor& whole = plan.view(plan.graph().value(L.param).grad);
  if (L.fsdp_dim <= 0) return whole;
  dist::tensor_to_blocks(whole.data(), L.grad_staging.data(), whole.shape(), L.fsdp_dim, L.fsdp_parts,
                         sizeof(float));
  return L.grad_staging;
}

}  // namespace

void ParamSync::drain_grad_slot(Slot& s) {
  if (s.owner < 0) return;
  wait_all(s.reqs);
  s.owner = -1;
}

void ParamSync::prepare_grad_slot(int layer) {
  drain_grad_slot(grad_slots_[layer % 2]);
  for (int k : layer_layouts_[static_cast<size_t>(layer)]) {
    const Tensor& whole = plan_.view(plan_.graph().value(plan_.layouts()[static_cast<size_t>(k)].param).grad);
    std::memset(whole.data(), 0, whole.nbytes());
  }
}

void ParamSync::start_layer_reduce(int layer) {
  Slot& s = grad_slots_[layer % 2];
  TESSERA_ASSERT(s.owner < 0);
  s.owner = layer;
  for (int k : layer_layouts_[static_cast<size_t>(layer)]) {
    const ParamLayout& L = plan_.layouts()[static_cast<size_t>(k)];
    const Tensor& src = grad_blocks(plan_, L);
    const Tensor& piece = plan_.state(plan_.graph().value(L.param).grad);  // micro-steps add up
    s.reqs.push_back(fsdp_.reduce_scatter_async(src.data(), piece.data(), static_cast<size_t>(piece.numel()),
                                                DType::kF32, /*accumulate=*/true));
  }
  if (!overlap_) drain_grad_slot(s);
}

// Step 1 of a gradient that is not a decoder layer's FSDP gradient (see param_sync.h).
void ParamSync::start_ready_reduction(int k) {
  const ParamLayout& L = plan_.layouts()[static_cast<size_t>(k)];
  const ValueId grad = plan_.graph().value(L.param).grad;
  const Tensor& state = plan_.state(grad);
  const auto n = static_cast<size_t>(state.numel());
  if (L.sharded()) {
    const Tensor& src = grad_blocks(plan_, L);
    pending_.push_back(fsdp_.reduce_scatter_async(src.data(), state.data(), n, DType::kF32));
  } else if (L.opt_parts > 1 && fsdp_.size() == 1) {
    const Tensor& piece = plan_.opt_view(grad);
    pending_.push_back(data_.reduce_scatter_async(state.data(), piece.data(),
                                                  static_cast<size_t>(piece.numel()), DType::kF32));
  } else if (L.opt_parts > 1) {
    pending_.push_back(fsdp_.all_reduce_async(state.data(), n, DType::kF32));  // data follows in step 2
  } else {
    pending_.push_back(batch_.all_reduce_async(state.data(), n, DType::kF32));
  }
  if (!overlap_) wait_all(pending_);
}

void ParamSync::finish_gradients() {
  drain_grad_slot(grad_slots_[0]);
  drain_grad_slot(grad_slots_[1]);
  wait_all(pending_);
  if (data_.size() > 1 && fsdp_.size() > 1) {
    for (const ParamLayout& L : plan_.layouts()) {
      if (!L.sharded() && L.opt_parts == 1) continue;  // reduced over {data, fsdp} in step 1
      const ValueId grad = plan_.graph().value(L.param).grad;
      const Tensor& state = plan_.state(grad);
      if (L.opt_parts > 1) {
        const Tensor& piece = plan_.opt_view(grad);
        pending_.push_back(data_.reduce_scatter_async(state.data(), piece.data(),
                                                      static_cast<size_t>(piece.numel()), DType::kF32));
      } else {
        pending_.push_back(
            data_.all_reduce_async(state.data(), static_cast<size_t>(state.numel()), DType::kF32));
      }
    }
    wait_all(pending_);
  }
}

// ---- the pass

void ParamSync::zero_grads() {
  for (const ParamLayout& L : plan_.layouts()) {
    const ValueId grad = plan_.graph().value(L.param).grad;
    const Tensor& state = plan_.state(grad);
    std::memset(state.data(), 0, state.nbytes());
    if (L.sharded() && L.layer < 0) {
      const Tensor& whole = plan_.view(grad);
      std::memset(whole.data(), 0, whole.nbytes());
    }
  }
}

void ParamSync::begin_pass(bool forward_only, bool last_micro_step) {
  active_ = forward_only ? forward_.get() : full_.get();
  last_micro_step_ = last_micro_step && !forward_only;
  if (!outer_fresh_) start_outer_gathers();
  if (overlap_) gather_layer(active_->first_layer, /*wait=*/false);
}

void ParamSync::before_node(int i) {
  const Schedule& s = *active_;
  const auto at = static_cast<size_t>(i);
  if (s.grad_first[at] >= 0) prepare_grad_slot(s.grad_first[at]);
  for (int k : s.outer_first_use[at]) wait_outer(k);
  if (s.need_layer[at] >= 0) {
    ensure_layer(s.need_layer[at]);
    if (s.prefetch[at] >= 0 && overlap_) gather_layer(s.prefetch[at], /*wait=*/false);
  }
}

void ParamSync::after_node(int i) {
  const Schedule& s = *active_;
  const auto at = static_cast<size_t>(i);
  if (s.grad_last[at] >= 0) start_layer_reduce(s.grad_last[at]);
  if (last_micro_step_)
    for (int k : s.grad_ready[at]) start_ready_reduction(k);
  progress();
}

// MPI moves non-blocking collectives inside these calls, on this thread: their time is the
// collectives' work that overlap could not take off the compute thread.
void ParamSync::progress() {
  const auto t0 = std::chrono::steady_clock::now();
  fsdp_.progress();
  data_.progress();
  batch_.progress();
  progress_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// ---- norms and the update

double ParamSync::sq_norm(bool grads) {
  const int64_t world = mesh_.num_devices();
  double sum = 0;
  for (const ParamLayout& L : plan_.layouts()) {
    const Tensor t = grads ? plan_.opt_view(plan_.graph().value(L.param).grad) : plan_.state(L.param);
    const double norm = ops::global_norm(std::span<const Tensor>(&t, 1));
    // Each distinct piece is held by world / pieces ranks: count it once over the mesh.
    const int64_t pieces = L.fsdp_parts * L.tensor_parts * (grads ? L.opt_parts : 1);
    sum += norm * norm * static_cast<double>(pieces) / static_cast<double>(world);
  }
  mesh_.world().all_reduce_f64(&sum, 1);
  return sum;
}

double ParamSync::grad_sq_norm() {
  return sq_norm(true);
}
double ParamSync::param_sq_norm() {
  return sq_norm(false);
}

void ParamSync::after_optimizer() {
  if (plan_.zero1()) {
    // Each rank's updated rows sit in place in the stored master and compute copy: gather the rest.
    for (const ParamLayout& L : plan_.layouts()) {
      if (L.opt_parts == 1) continue;
      const Value& v = plan_.graph().value(L.param);
      for (ValueId id : {L.param, v.compute_copy}) {
        if (id == kNoValue) continue;
        const Tensor& piece = plan_.opt_view(id);
        pending_.push_back(data_.all_gather_async(piece.data(), plan_.state(id).data(),
                                                  static_cast<size_t>(piece.numel()), piece.dtype()));
      }
    }
    wait_all(pending_);
  }
  for (Slot& s : slots_) {
    finish_slot_gather(s);
    s.owner = -1;
  }
  outer_fresh_ = false;
}

dist::TrafficCounters expected_traffic(const Plan& plan, int64_t micro_steps) {
  double gather = 0, scatter = 0, reduce = 0;
  const auto micro = static_cast<double>(micro_steps);
  const int64_t data = plan.sharding().size(MeshAxis::kData), fsdp = plan.sharding().size(MeshAxis::kFsdp);
  for (const ParamLayout& L : plan.layouts()) {
    const Value& v = plan.graph().value(L.param);
    const auto whole = static_cast<double>(v.shape.numel());
    const auto piece = whole / static_cast<double>(L.fsdp_parts);
    if (L.sharded()) {
      const double times = L.layer >= 0 ? 2 * micro : 1;
      for (const auto& g : L.gathered)
        gather += times * whole * static_cast<double>(dtype_size(plan.graph().value(g.value).dtype));
      scatter += 4 * whole * (L.layer >= 0 ? micro : 1);
      if (data > 1) (L.opt_parts > 1 ? scatter : reduce) += 4 * piece;
    } else if (L.opt_parts > 1) {
      scatter += 4 * whole;
      if (fsdp > 1) reduce += 4 * whole;
    } else if (data * fsdp > 1) {
      reduce += 4 * whole;
    }
    if (L.opt_parts > 1) {
      gather += 4 * piece;
      if (v.compute_copy != kNoValue) gather += 2 * piece;
    }
  }
  // Tensor parallelism: the activations' all-reduces of every micro-step (graph.h).
  reduce += static_cast<double>(micro_steps) * tensor_parallel_traffic(plan.graph()).total();
  return {.all_reduce = static_cast<uint64_t>(reduce),
          .all_gather = static_cast<uint64_t>(gather),
          .reduce_scatter = static_cast<uint64_t>(scatter)};
}

}  // namespace tessera::graph
