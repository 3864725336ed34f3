// The collective schedule of a PlanSpec (plan_spec.h: Collective) and the communicators' scratch
// estimate. The schedule follows param_sync.h's description of when each collective runs:
//   - FSDP parameters of decoder layer l: one all-gather per gathered value per run of nodes that
//     read the layer (forward, and recompute + backward), waited before the run's first node and
//     issued one run earlier when the previous run's layer uses the other slot (prefetch);
//   - FSDP parameters outside the layers: one all-gather per gathered value per step, issued when
//     the first pass starts and waited before the first reader;
//   - a layer's FSDP gradients: reduce-scattered over fsdp after the layer's last gradient node, every
//     micro-step; their slot is zeroed before the first and drained before the slot's next layer;
//   - the other gradients (last micro-step): reduce-scatter over fsdp (outer FSDP), reduce-scatter
//     over data (ZeRO-1 without FSDP), all-reduce over fsdp (ZeRO-1 with FSDP: data follows), or
//     all-reduce over {data, fsdp}, each after the gradient's last writer;
//   - with data > 1 and fsdp > 1, the pieces over data before the update; ZeRO-1's gathers after it.
// Expert parallelism: a parameter whole over the expert axis (all but the expert weights) has
// gradients from every expert rank's rows, so `data` above means data x expert for it
// (PlanSharding::data_axes); the expert weights' gradients are this rank's experts' alone.
// An evaluation pass runs the gathers whose wait node is a forward node.
#include <algorithm>
#include <limits>
#include <map>

#include "tessera/core/arena.h"
#include "tessera/core/error.h"
#include "tessera/graph/plan_spec.h"

namespace tessera::graph {

const char* collective_kind_name(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::kAllGather:
      return "all_gather";
    case CollectiveKind::kReduceScatter:
      return "reduce_scatter";
    case CollectiveKind::kAllReduce:
      return "all_reduce";
  }
  return "?";
}

const char* collective_when_name(CollectiveWhen w) {
  switch (w) {
    case CollectiveWhen::kEveryPass:
      return "every_pass";
    case CollectiveWhen::kOncePerStep:
      return "once_per_step";
    case CollectiveWhen::kLastMicroStep:
      return "last_micro_step";
    case CollectiveWhen::kBeforeUpdate:
      return "before_update";
    case CollectiveWhen::kAfterUpdate:
      return "after_update";
  }
  return "?";
}

namespace {

// What the walk over the pass's nodes finds (the facts the schedule is made of).
struct PassFacts {
  std::vector<std::pair<int, int>> runs;  // (first node, layer) of each run reading a layer's gathers
  std::vector<int> outer_first_use;       // per layout: the first node reading its gathers, or -1
  std::vector<int> last_writer;           // per layout: the last node writing its gradient, or -1
  std::map<int, std::pair<int, int>> layer_grads;  // layer -> (first, last) node writing its FSDP grads
};

PassFacts walk_pass(const Graph& g, const std::vector<ParamLayout>& layouts,
                    const std::vector<int>& layout_of, int end) {
  PassFacts f;
  f.outer_first_use.assign(layouts.size(), -1);
  f.last_writer.assign(layouts.size(), -1);
  std::vector<int> gathered_of(g.values().size(), -1);
  for (size_t k = 0; k < layouts.size(); ++k)
    for (const auto& gv : layouts[k].gathered)
      gathered_of[static_cast<size_t>(gv.value)] = static_cast<int>(k);
  for (int i = 0; i < end; ++i) {
    const Node& n = g.nodes()[i];
    int need = -1;
    for (ValueId v : n.in) {
      const int k = gathered_of[static_cast<size_t>(v)];
      if (k < 0) continue;
      const ParamLayout& L = layouts[static_cast<size_t>(k)];
      if (L.layer >= 0) {
        TESSERA_ASSERT(need < 0 || need == L.layer);
        need = L.layer;
      } else if (f.outer_first_use[k] < 0) {
        f.outer_first_use[k] = i;
      }
    }
    if (need >= 0 && (f.runs.empty() || f.runs.back().second != need)) f.runs.emplace_back(i, need);
    for (ValueId v : n.out) {
      const Value& val = g.value(v);
      if (val.kind != ValueKind::kGrad) continue;
      const int k = layout_of[static_cast<size_t>(val.master)];
      f.last_writer[static_cast<size_t>(k)] = i;
      const ParamLayout& L = layouts[static_cast<size_t>(k)];
      if (!L.sharded() || L.layer < 0) continue;
      auto [it, fresh] = f.layer_grads.try_emplace(L.layer, i, i);
      it->second.second = i;
    }
  }
  return f;
}

size_t numel(const Shape& s) {
  return static_cast<size_t>(s.numel());
}

using Schedule = std::vector<Collective>;
const std::vector<MeshAxis> kF = {MeshAxis::kFsdp}, kD = {MeshAxis::kData};

// FSDP gathers: per decoder layer one per gathered value per run, outside the layers one per step.
void add_gathers(const Graph& g, const std::vector<ParamLayout>& layouts, const PassFacts& f, Schedule& out) {
  auto gather_bytes = [&](ValueId v) { return numel(g.value(v).shape) * dtype_size(g.value(v).dtype); };
  // Decoder-layer gathers, one per gathered value per run.
  for (size_t r = 0; r < f.runs.size(); ++r) {
    const auto [first, layer] = f.runs[r];
    int issue = first;
    if (r == 0)
      issue = -1;
    else if (f.runs[r - 1].second % 2 != layer % 2)
      issue = f.runs[r - 1].first;
    for (const ParamLayout& L : layouts)
      if (L.sharded() && L.layer == layer)
        for (const auto& gv : L.gathered)
          out.push_back({CollectiveWhen::kEveryPass, CollectiveKind::kAllGather, kF, L.param, gv.value, layer,
                         gather_bytes(gv.value), issue, first});
  }
  // Outer gathers, once per step.
  for (size_t k = 0; k < layouts.size(); ++k) {
    const ParamLayout& L = layouts[k];
    if (!L.sharded() || L.layer >= 0 || f.outer_first_use[k] < 0) continue;
    for (const auto& gv : L.gathered)
      out.push_back({CollectiveWhen::kOncePerStep, CollectiveKind::kAllGather, kF, L.param, gv.value, -1,
                     gather_bytes(gv.value), -1, f.outer_first_use[k]});
  }
}

void add_layer_reductions(const Graph& g, const std::vector<ParamLayout>& layouts, const PassFacts& f,
                          Schedule& out) {
  // Decoder-layer gradients: reduce-scattered from slot layer % 2, drained before its next layer.
  for (const auto& [layer, span] : f.layer_grads) {
    int drain = -1;
    for (const auto& [other, o] : f.layer_grads)
      if (other % 2 == layer % 2 && other != layer && o.first > span.second && (drain < 0 || o.first < drain))
        drain = o.first;
    for (const ParamLayout& L : layouts) {
      if (!L.sharded() || L.layer != layer) continue;
      const Value& v = g.value(L.param);
      out.push_back({CollectiveWhen::kEveryPass, CollectiveKind::kReduceScatter, kF, L.param, v.grad, layer,
                     4 * numel(v.shape), span.second, drain, span.first});
    }
  }
}

// Step 1 of the other gradients, step 2 over data, and ZeRO-1's gathers after the update.
void add_other_reductions(const Graph& g, const std::vector<ParamLayout>& layouts, const PassFacts& f,
                          const PlanSharding& sh, Schedule& out) {
  const int64_t fsdp = sh.size(MeshAxis::kFsdp);
  auto ranks = [&](const std::vector<MeshAxis>& axes) {
    int64_t n = 1;
    for (MeshAxis a : axes) n *= sh.size(a);
    return n;
  };
  // The other gradients, in the order their last writers run (then by layout).
  std::vector<size_t> ready;
  for (size_t k = 0; k < layouts.size(); ++k)
    if (f.last_writer[k] >= 0 && !(layouts[k].sharded() && layouts[k].layer >= 0)) ready.push_back(k);
  std::stable_sort(ready.begin(), ready.end(),
                   [&](size_t a, size_t b) { return f.last_writer[a] < f.last_writer[b]; });
  for (size_t k : ready) {
    const ParamLayout& L = layouts[k];
    const Value& v = g.value(L.param);
    Collective c{CollectiveWhen::kLastMicroStep,
                 CollectiveKind::kAllReduce,
                 kF,
                 L.param,
                 v.grad,
                 -1,
                 4 * numel(L.sharded() ? v.shape : L.stored.shape),
                 f.last_writer[k]};
    const std::vector<MeshAxis> data_axes = sh.data_axes(L);
    if (L.sharded()) {
      c.kind = CollectiveKind::kReduceScatter;
    } else if (L.opt_parts > 1 && fsdp == 1) {
      c.kind = CollectiveKind::kReduceScatter;
      c.group = kD;
    } else if (L.opt_parts == 1) {
      c.group = data_axes;
      c.group.insert(c.group.begin() + 1, MeshAxis::kFsdp);  // {data, fsdp[, expert]}
      if (ranks(c.group) == 1) continue;                     // nothing to reduce (tensor parallelism alone)
    }
    out.push_back(c);
  }
  // Step 2 over data, then ZeRO-1's gathers.
  for (const ParamLayout& L : layouts) {
    const std::vector<MeshAxis> data_axes = sh.data_axes(L);
    if (ranks(data_axes) == 1 || fsdp == 1 || (!L.sharded() && L.opt_parts == 1)) continue;
    out.push_back({CollectiveWhen::kBeforeUpdate,
                   L.opt_parts > 1 ? CollectiveKind::kReduceScatter : CollectiveKind::kAllReduce, data_axes,
                   L.param, g.value(L.param).grad, -1, 4 * numel(L.stored.shape)});
  }
  for (const ParamLayout& L : layouts) {
    if (L.opt_parts == 1) continue;
    for (ValueId id : {L.param, g.value(L.param).compute_copy})
      if (id != kNoValue)
        out.push_back({CollectiveWhen::kAfterUpdate, CollectiveKind::kAllGather, kD, L.param, id, -1,
                       numel(L.stored.shape) * dtype_size(g.value(id).dtype)});
  }
}

// The communicators' scratch, by replaying their pools (dist/mpi_communicator.cc: ScratchPool) over
// two steps of the schedule. A pool per group of mesh axes: a reduction acquires one receive block
// of its largest part (and a send block with more than two ranks) and releases them when it
// completes; a free block is reused whole by the smallest request it fits (best fit, never split),
// else the last chunk gives the bytes, else a new chunk of max(request, 16 MiB) is mapped (in
// whole 2 MiB pages). The pool keeps every chunk it ever mapped, so the figure is its size after
// the replay. When the reductions complete is what cannot be known here: the replay takes the ones
// issued in a run of nodes of one layer to complete by the end of the next such run (a layer's
// backward outlasts the last layer's reductions, as the FSDP gradient slots already assume), every
// step-1 reduction to complete at finish_gradients, and step 2's to be all in flight together.
// Real reductions often finish sooner, so the figure leans high: on llama-125m (2 x 256 tokens,
// data parallelism over 2 ranks) it is 128 MiB where the run maps 112 (taking every step-1
// reduction in flight at once gave 256), on llama-test with a 65536 x 256 vocabulary 80 MiB where
// the run maps 48, and with FSDP over 2 ranks 96 MiB, as mapped.
class ScratchReplay {
 public:
  void acquire(const std::vector<MeshAxis>& group, size_t bytes, int owner) {
    Pool& p = pools_[group];
    bytes = (std::max<size_t>(bytes, 1) + Arena::kAlignment - 1) / Arena::kAlignment * Arena::kAlignment;
    if (auto it = p.free.lower_bound(bytes); it != p.free.end()) {
      p.held.push_back({owner, it->first});
      p.free.erase(it);
      return;
    }
    if (p.chunks.empty() || p.chunks.back().capacity - p.chunks.back().used < bytes) {
      const size_t huge = size_t{2} << 20;
      p.chunks.push_back({(std::max(bytes, kChunk) + huge - 1) / huge * huge, 0});
    }
    p.chunks.back().used += bytes;
    p.held.push_back({owner, bytes});
  }
  // Releases the blocks of every owner up to `last` (all with INT_MAX).
  void release_through(int last) {
    for (auto& [group, p] : pools_) {
      std::vector<Held> kept;
      for (const Held& h : p.held) {
        if (h.owner <= last)
          p.free.emplace(h.bytes, 0);
        else
          kept.push_back(h);
      }
      p.held = std::move(kept);
    }
  }
  size_t bytes() const {
    size_t n = 0;
    for (const auto& [group, p] : pools_)
      for (const Chunk& c : p.chunks) n += c.capacity;
    return n;
  }

 private:
  static constexpr size_t kChunk = size_t{16} << 20;
  struct Chunk {
    size_t capacity = 0, used = 0;
  };
  struct Held {
    int owner;
    size_t bytes;
  };
  struct Pool {
    std::vector<Chunk> chunks;
    std::multimap<size_t, int> free;  // block sizes (where a block lies does not matter here)
    std::vector<Held> held;
  };
  std::map<std::vector<MeshAxis>, Pool> pools_;
};

size_t scratch_estimate(const Graph& g, const Schedule& schedule, const PlanSharding& sh) {
  auto ranks_of = [&](const Collective& c) {
    int64_t n = 1;
    for (MeshAxis a : c.group) n *= sh.size(a);
    return n;
  };
  // One block per part-sized buffer the communicator acquires for `c`.
  auto blocks = [&](const Collective& c) -> std::pair<size_t, int> {
    const int64_t n = ranks_of(c);
    const size_t all = collective_scratch_bytes(c, n);
    if (all == 0) return {0, 0};
    return n > 2 ? std::pair{all / 2, 2} : std::pair{all, 1};
  };
  // Step 1: the every-pass reductions and the last micro-step's, in the order they start, grouped
  // into runs of issue nodes of one layer.
  std::vector<const Collective*> step1, step2;
  for (const Collective& c : schedule) {
    if (blocks(c).second == 0) continue;
    if (c.when == CollectiveWhen::kBeforeUpdate) step2.push_back(&c);
    if ((c.when == CollectiveWhen::kEveryPass && c.kind != CollectiveKind::kAllGather) ||
        c.when == CollectiveWhen::kLastMicroStep)
      step1.push_back(&c);
  }
  std::stable_sort(step1.begin(), step1.end(),
                   [](const Collective* a, const Collective* b) { return a->issue < b->issue; });
  ScratchReplay replay;
  for (int step = 0; step < 2; ++step) {
    int run = -1, run_layer = 0, last_issue = -2;
    for (const Collective* c : step1) {
      const int layer = c->issue >= 0 ? g.nodes()[static_cast<size_t>(c->issue)].layer : -1;
      if (run < 0 || (layer != run_layer && c->issue != last_issue)) {
        ++run;
        run_layer = layer;
        replay.release_through(run - 2);
      }
      last_issue = c->issue;
      const auto [bytes, count] = blocks(*c);
      for (int k = 0; k < count; ++k) replay.acquire(c->group, bytes, run);
    }
    replay.release_through(std::numeric_limits<int>::max());
    for (const Collective* c : step2) {
      const auto [bytes, count] = blocks(*c);
      for (int k = 0; k < count; ++k) replay.acquire(c->group, bytes, 0);
    }
    replay.release_through(std::numeric_limits<int>::max());
  }
  return replay.bytes();
}

}  // namespace

std::vector<MeshAxis> PlanSharding::data_axes(const ParamLayout& L) const {
  if (L.expert_parts > 1 || size(MeshAxis::kExpert) == 1) return {MeshAxis::kData};
  return {MeshAxis::kData, MeshAxis::kExpert};
}

void PlanSpec::build_schedule() {
  collectives_.clear();
  memory_.collective_scratch_estimate = 0;
  if (sharding_.world() == 1) return;
  const PassFacts f = walk_pass(graph_, layouts_, layout_index_, first_opt_);
  add_gathers(graph_, layouts_, f, collectives_);
  add_layer_reductions(graph_, layouts_, f, collectives_);
  add_other_reductions(graph_, layouts_, f, sharding_, collectives_);
  memory_.collective_scratch_estimate = scratch_estimate(graph_, collectives_, sharding_);
}

size_t collective_scratch_bytes(const Collective& c, int64_t ranks) {
  if (c.kind == CollectiveKind::kAllGather || ranks <= 1) return 0;
  const size_t elements = c.bytes / 4;  // reductions run in f32
  const auto n = static_cast<size_t>(ranks);
  // Reduce-scatter: parts of count = elements / ranks; all-reduce: near-equal parts, the largest
  // rounded up.
  const size_t part = (elements + n - 1) / n;
  const size_t block =
      std::max<size_t>(aligned_bytes(Shape{static_cast<int64_t>(part)}, DType::kF32), Arena::kAlignment);
  return ranks > 2 ? 2 * block : block;
}

}  // namespace tessera::graph
