#include "tessera/graph/param_sync.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "tessera/backends/backend.h"
#include "tessera/core/error.h"
#include "tessera/graph/sharding.h"
#include "tessera/graph/sharding_expert.h"
#include "tessera/ops/optimizer.h"

namespace tessera::graph {

using Request = dist::Communicator::Request;

// Per node of [0, first_optimizer_node()) (entries of skipped nodes stay empty).
struct ParamSync::Schedule {
  std::vector<int> need_layer;  // the layer whose gathered parameters the node's run reads, or -1
  std::vector<int> prefetch;    // the layer to start gathering when the node starts a run, or -1
  std::vector<int> grad_first;  // the layer whose gradient slot the node is first to write, or -1
  std::vector<int> grad_last;   // the layer whose gradient slot the node is last to write, or -1
  std::vector<std::vector<int>> outer_first_use;           // outer layouts first read by the node
  std::vector<std::vector<const Collective*>> grad_ready;  // reductions to start after the node
  int first_layer = -1;                                    // the first run's layer
};

ParamSync::ParamSync(const PlanSpec& spec, Workspace& workspace, dist::Mesh& mesh)
    : spec_(spec),
      ws_(workspace),
      mesh_(mesh),
      fsdp_(mesh.axis(MeshAxis::kFsdp)),
      data_(mesh.axis(MeshAxis::kData)),
      batch_(mesh.axes({MeshAxis::kData, MeshAxis::kFsdp})),
      batch_expert_(mesh.axes({MeshAxis::kData, MeshAxis::kFsdp, MeshAxis::kExpert})),
      data_expert_(mesh.axes({MeshAxis::kData, MeshAxis::kExpert})) {
  outer_gathers_.resize(spec_.layouts().size());
  outer_reqs_.resize(spec_.layouts().size());
  auto grow = [](auto& per_layer, int layer) {
    if (per_layer.size() <= static_cast<size_t>(layer)) per_layer.resize(static_cast<size_t>(layer) + 1);
    return &per_layer[static_cast<size_t>(layer)];
  };
  for (const Collective& c : spec_.collectives()) {
    switch (c.when) {
      case CollectiveWhen::kEveryPass:
        if (c.kind == CollectiveKind::kAllGather) {
          auto* refs = grow(layer_gathers_, c.layer);
          const GatherRef g = gather_ref(c);
          if (std::none_of(refs->begin(), refs->end(),
                           [&](GatherRef r) { return r.layout == g.layout && r.index == g.index; }))
            refs->push_back(g);
        } else {
          grow(layer_reduces_, c.layer)->push_back(&c);
        }
        break;
      case CollectiveWhen::kOncePerStep: {
        const GatherRef g = gather_ref(c);
        auto& refs = outer_gathers_[static_cast<size_t>(g.layout)];
        if (refs.empty()) outer_layouts_.push_back(g.layout);
        refs.push_back(g);
        break;
      }
      case CollectiveWhen::kLastMicroStep:
        break;
      case CollectiveWhen::kBeforeUpdate:
        before_update_.push_back(&c);
        break;
      case CollectiveWhen::kAfterUpdate:
        after_update_.push_back(&c);
        break;
    }
  }
  layer_reduces_.resize(std::max(layer_reduces_.size(), layer_gathers_.size()));
  layer_gathers_.resize(layer_reduces_.size());
  full_ = std::make_unique<Schedule>(make_schedule(false));
  forward_ = std::make_unique<Schedule>(make_schedule(true));
}

ParamSync::~ParamSync() {
  // Requests complete before the buffers they write go away (their destructors wait).
  for (Slot* s : {&slots_[0], &slots_[1], &grad_slots_[0], &grad_slots_[1]}) s->reqs.clear();
  outer_reqs_.clear();
  pending_.clear();
}

ParamSync::GatherRef ParamSync::gather_ref(const Collective& c) const {
  const int k = spec_.layout_index(c.param);
  const auto& gathered = spec_.layouts()[static_cast<size_t>(k)].gathered;
  for (size_t i = 0; i < gathered.size(); ++i)
    if (gathered[i].value == c.value) return {k, i};
  TESSERA_ASSERT(false && "a scheduled gather of a value its layout does not gather");
  return {};
}

dist::Communicator& ParamSync::group(const std::vector<MeshAxis>& axes) const {
  using A = MeshAxis;
  if (axes == std::vector<A>{A::kData, A::kFsdp}) return batch_;
  if (axes == std::vector<A>{A::kData, A::kFsdp, A::kExpert}) return batch_expert_;
  if (axes == std::vector<A>{A::kData, A::kExpert}) return data_expert_;
  TESSERA_ASSERT(axes.size() == 1 && (axes[0] == A::kFsdp || axes[0] == A::kData));
  return axes[0] == A::kFsdp ? fsdp_ : data_;
}

// The per-node form of the schedule for one kind of pass: an evaluation pass (forward_only) runs
// the gathers waited before forward nodes and no reductions.
ParamSync::Schedule ParamSync::make_schedule(bool forward_only) const {
  const auto& nodes = spec_.graph().nodes();
  const auto end = static_cast<size_t>(spec_.first_optimizer_node());
  Schedule s;
  s.need_layer.assign(end, -1);
  s.prefetch = s.grad_first = s.grad_last = s.need_layer;
  s.outer_first_use.resize(end);
  s.grad_ready.resize(end);
  for (const Collective& c : spec_.collectives()) {
    const bool gather = c.kind == CollectiveKind::kAllGather;
    if (forward_only &&
        !(gather && c.wait >= 0 && nodes[static_cast<size_t>(c.wait)].phase == Phase::kForward))
      continue;
    if (c.when == CollectiveWhen::kEveryPass && gather) {
      s.need_layer[static_cast<size_t>(c.wait)] = c.layer;
      if (c.issue < 0)
        s.first_layer = c.layer;
      else if (c.issue != c.wait)
        s.prefetch[static_cast<size_t>(c.issue)] = c.layer;
    } else if (c.when == CollectiveWhen::kEveryPass) {
      s.grad_first[static_cast<size_t>(c.first_write)] = c.layer;
      s.grad_last[static_cast<size_t>(c.issue)] = c.layer;
    } else if (c.when == CollectiveWhen::kOncePerStep) {
      auto& first = s.outer_first_use[static_cast<size_t>(c.wait)];
      const int k = spec_.layout_index(c.param);
      if (std::find(first.begin(), first.end(), k) == first.end()) first.push_back(k);
    } else if (c.when == CollectiveWhen::kLastMicroStep) {
      s.grad_ready[static_cast<size_t>(c.issue)].push_back(&c);
    }
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

// Starts the all-gather of one gathered value into its view (or staging, reordered on completion).
std::unique_ptr<Request> ParamSync::start_gather(GatherRef g) {
  const ParamLayout& L = spec_.layouts()[static_cast<size_t>(g.layout)];
  const ValueId v = L.gathered[g.index].value;
  const Tensor& src = ws_.state(v);
  const Tensor& dst = L.fsdp_dim > 0 ? ws_.gather_staging(g.layout, g.index) : ws_.view(v);
  return fsdp_.all_gather_async(src.data(), dst.data(), static_cast<size_t>(src.numel()), src.dtype());
}

void ParamSync::finish_reorder(const std::vector<GatherRef>& gathers) {
  for (GatherRef g : gathers) {
    const ParamLayout& L = spec_.layouts()[static_cast<size_t>(g.layout)];
    if (L.fsdp_dim <= 0) continue;
    const Tensor& v = ws_.view(L.gathered[g.index].value);
    dist::blocks_to_tensor(ws_.gather_staging(g.layout, g.index).data(), v.data(), v.shape(), L.fsdp_dim,
                           L.fsdp_parts, dtype_size(v.dtype()));
  }
}

void ParamSync::finish_slot_gather(Slot& s) {
  if (s.reqs.empty()) return;
  wait_all(s.reqs);
  finish_reorder(layer_gathers_[static_cast<size_t>(s.owner)]);
}

void ParamSync::gather_layer(int layer, bool wait) {
  if (layer < 0 || static_cast<size_t>(layer) >= layer_gathers_.size()) return;
  Slot& s = slots_[layer % 2];
  if (s.owner != layer) {
    finish_slot_gather(s);  // a prefetch nobody used still writes the slot: let it land first
    s.owner = layer;
    for (GatherRef g : layer_gathers_[static_cast<size_t>(layer)]) s.reqs.push_back(start_gather(g));
  }
  if (wait || !overlap_) finish_slot_gather(s);
}

void ParamSync::ensure_layer(int layer) {
  gather_layer(layer, true);
}

void ParamSync::start_outer_gathers() {
  for (int k : outer_layouts_) {
    auto& reqs = outer_reqs_[static_cast<size_t>(k)];
    wait_all(reqs);  // from a step whose pass never read it
    for (GatherRef g : outer_gathers_[static_cast<size_t>(k)]) reqs.push_back(start_gather(g));
    if (!overlap_) wait_outer(k);
  }
  outer_fresh_ = true;
}

void ParamSync::wait_outer(int k) {
  auto& reqs = outer_reqs_[static_cast<size_t>(k)];
  if (reqs.empty()) return;
  wait_all(reqs);
  finish_reorder(outer_gathers_[static_cast<size_t>(k)]);
}

// ---- gradient reductions

namespace {

// The whole gradient as the reduce-scatter wants it: blocks of the pieces, one after another.
const Tensor& grad_blocks(const PlanSpec& spec, const Workspace& ws, int layout) {
  const ParamLayout& L = spec.layouts()[static_cast<size_t>(layout)];
  const Tensor& whole = ws.view(spec.graph().value(L.param).grad);
  if (L.fsdp_dim <= 0) return whole;
  const Tensor& staging = ws.grad_staging(layout);
  dist::tensor_to_blocks(whole.data(), staging.data(), whole.shape(), L.fsdp_dim, L.fsdp_parts,
                         sizeof(float));
  return staging;
}

}  // namespace

void ParamSync::drain_grad_slot(Slot& s) {
  if (s.owner < 0) return;
  wait_all(s.reqs);
  s.owner = -1;
}

void ParamSync::prepare_grad_slot(int layer) {
  drain_grad_slot(grad_slots_[layer % 2]);
  for (const Collective* c : layer_reduces_[static_cast<size_t>(layer)]) {
    const Tensor& whole = ws_.view(c->value);
    backends::backend_for(whole.device()).fill_zero(whole);
  }
}

void ParamSync::start_layer_reduce(int layer) {
  Slot& s = grad_slots_[layer % 2];
  TESSERA_ASSERT(s.owner < 0);
  s.owner = layer;
  for (const Collective* c : layer_reduces_[static_cast<size_t>(layer)]) {
    const Tensor& src = grad_blocks(spec_, ws_, spec_.layout_index(c->param));
    const Tensor& piece = ws_.state(c->value);  // micro-steps add up
    s.reqs.push_back(fsdp_.reduce_scatter_async(src.data(), piece.data(), static_cast<size_t>(piece.numel()),
                                                DType::kF32, /*accumulate=*/true));
  }
  if (!overlap_) drain_grad_slot(s);
}

// Step 1 of a gradient that is not a decoder layer's FSDP gradient (see param_sync.h): a
// reduce-scatter over fsdp (from the whole gradient into the stored piece) or over data (from the
// stored gradient into the optimizer's piece), or an all-reduce of the stored gradient.
void ParamSync::start_ready_reduction(const Collective& c) {
  const Tensor& state = ws_.state(c.value);
  dist::Communicator& comm = group(c.group);
  if (c.kind == CollectiveKind::kAllReduce) {
    pending_.push_back(comm.all_reduce_async(state.data(), static_cast<size_t>(state.numel()), DType::kF32));
  } else if (c.group[0] == MeshAxis::kFsdp) {
    const Tensor& src = grad_blocks(spec_, ws_, spec_.layout_index(c.param));
    pending_.push_back(
        comm.reduce_scatter_async(src.data(), state.data(), static_cast<size_t>(state.numel()), DType::kF32));
  } else {
    const Tensor& piece = ws_.opt_view(c.value);
    pending_.push_back(comm.reduce_scatter_async(state.data(), piece.data(),
                                                 static_cast<size_t>(piece.numel()), DType::kF32));
  }
  if (!overlap_) wait_all(pending_);
}

void ParamSync::finish_gradients() {
  drain_grad_slot(grad_slots_[0]);
  drain_grad_slot(grad_slots_[1]);
  wait_all(pending_);
  if (before_update_.empty()) return;
  for (const Collective* c : before_update_) {  // step 2: the pieces over data (x expert)
    const Tensor& state = ws_.state(c->value);
    dist::Communicator& comm = group(c->group);
    if (c->kind == CollectiveKind::kReduceScatter) {
      const Tensor& piece = ws_.opt_view(c->value);
      pending_.push_back(comm.reduce_scatter_async(state.data(), piece.data(),
                                                   static_cast<size_t>(piece.numel()), DType::kF32));
    } else {
      pending_.push_back(
          comm.all_reduce_async(state.data(), static_cast<size_t>(state.numel()), DType::kF32));
    }
  }
  wait_all(pending_);
}

// ---- the pass

void ParamSync::zero_grads() {
  for (const ParamLayout& L : spec_.layouts()) {
    const ValueId grad = spec_.graph().value(L.param).grad;
    const Tensor& state = ws_.state(grad);
    backends::backend_for(state.device()).fill_zero_for_later(state);
    if (L.sharded() && L.layer < 0) {
      const Tensor& whole = ws_.view(grad);
      backends::backend_for(whole.device()).fill_zero_for_later(whole);
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
    for (const Collective* c : s.grad_ready[at]) start_ready_reduction(*c);
  progress();
}

// MPI moves non-blocking collectives inside these calls, on this thread: their time is the
// collectives' work that overlap could not take off the compute thread.
void ParamSync::progress() {
  const auto t0 = std::chrono::steady_clock::now();
  fsdp_.progress();
  data_.progress();
  batch_.progress();
  batch_expert_.progress();
  data_expert_.progress();
  progress_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// ---- norms and the update

double ParamSync::sq_norm(bool grads) {
  const int64_t world = mesh_.num_devices();
  double sum = 0;
  for (const ParamLayout& L : spec_.layouts()) {
    const Tensor t = grads ? ws_.opt_view(spec_.graph().value(L.param).grad) : ws_.state(L.param);
    const double norm = ops::global_norm(std::span<const Tensor>(&t, 1));
    // Each distinct piece is held by world / pieces ranks: count it once over the mesh.
    const int64_t pieces = L.fsdp_parts * L.tensor_parts * L.expert_parts * (grads ? L.opt_parts : 1);
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
  // ZeRO-1: each rank's updated rows sit in place in the stored master and compute copy: gather the rest.
  for (const Collective* c : after_update_) {
    const Tensor& piece = ws_.opt_view(c->value);
    pending_.push_back(data_.all_gather_async(piece.data(), ws_.state(c->value).data(),
                                              static_cast<size_t>(piece.numel()), piece.dtype()));
  }
  wait_all(pending_);
  for (Slot& s : slots_) {
    finish_slot_gather(s);
    s.owner = -1;
  }
  outer_fresh_ = false;
}

dist::TrafficCounters expected_traffic(const PlanSpec& spec, int64_t micro_steps) {
  double gather = 0, scatter = 0, reduce = 0;
  const auto micro = static_cast<double>(micro_steps);
  for (const Collective& c : spec.collectives()) {
    const double times = c.when == CollectiveWhen::kEveryPass ? micro : 1;
    const double bytes = times * static_cast<double>(c.bytes);
    switch (c.kind) {
      case CollectiveKind::kAllGather:
        gather += bytes;
        break;
      case CollectiveKind::kReduceScatter:
        scatter += bytes;
        break;
      case CollectiveKind::kAllReduce:
        reduce += bytes;
        break;
    }
  }
  // Tensor parallelism: the activations' all-reduces of every micro-step (graph.h); expert
  // parallelism: the ragged all-to-alls' send buffers (sharding_expert.h).
  reduce += micro * tensor_parallel_traffic(spec.graph()).total();
  const ExpertParallelTraffic ep = expert_parallel_traffic(spec.graph());
  return {.all_reduce = static_cast<uint64_t>(reduce),
          .all_gather = static_cast<uint64_t>(gather + micro * ep.count_bytes),
          .reduce_scatter = static_cast<uint64_t>(scatter),
          .all_to_all = static_cast<uint64_t>(micro * ep.total())};
}

}  // namespace tessera::graph
