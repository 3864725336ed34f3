#include "tessera/graph/memory_plan.h"

#include <algorithm>
#include <numeric>

#include "tessera/core/arena.h"
#include "tessera/core/checked.h"
#include "tessera/core/error.h"

namespace tessera::graph {

namespace {
struct Interval {
  int first = -1, last = -1;
  size_t bytes = 0;
};
}  // namespace

MemoryPlan plan_memory(const Graph& g) {
  const size_t nv = g.values().size();
  const int nn = static_cast<int>(g.nodes().size());
  auto root = [&](ValueId v) {
    while (g.value(v).alias_of != kNoValue) v = g.value(v).alias_of;
    return v;
  };
  std::vector<Interval> life(nv);
  auto touch = [&](ValueId v, int i) {
    if (g.value(v).kind != ValueKind::kActivation) return;
    Interval& it = life[root(v)];
    it.first = it.first < 0 ? i : std::min(it.first, i);
    it.last = std::max(it.last, i);
  };
  for (int i = 0; i < nn; ++i) {
    for (ValueId v : g.nodes()[i].in) touch(v, i);
    for (ValueId v : g.nodes()[i].out) touch(v, i);
  }
  // The per-token loss is read by the host after the whole step: keep it alive to the end.
  if (g.loss() != kNoValue && nn > 0) touch(g.loss(), nn - 1);
  for (ValueId a : g.aux_losses())  // so are the aux losses
    if (nn > 0) touch(a, nn - 1);
  for (ValueId o : g.outputs())  // and an inference graph's outputs
    if (nn > 0) touch(o, nn - 1);
  std::vector<ValueId> placed_order;
  for (size_t v = 0; v < nv; ++v) {
    const Value& val = g.value(static_cast<ValueId>(v));
    if (val.kind != ValueKind::kActivation || val.alias_of != kNoValue || life[v].first < 0) continue;
    life[v].bytes = aligned_bytes(val.shape, val.dtype);
    placed_order.push_back(static_cast<ValueId>(v));
  }
  for (size_t v = 0; v < nv; ++v)  // an alias needs its root to be at least as large
    if (g.value(static_cast<ValueId>(v)).alias_of != kNoValue)
      TESSERA_ASSERT(aligned_bytes(g.value(v).shape, g.value(v).dtype) <= life[root(v)].bytes);

  MemoryPlan plan;
  plan.offset.assign(nv, 0);
  // Lower bound: bytes live at each node.
  std::vector<size_t> live(std::max(nn, 1), 0);
  for (ValueId v : placed_order)
    for (int i = life[v].first; i <= life[v].last; ++i)
      live[i] = checked_add(live[i], life[v].bytes, "live activations");
  auto peak = std::max_element(live.begin(), live.end());
  plan.lower_bound = *peak;
  plan.peak_node = static_cast<int>(peak - live.begin());

  std::stable_sort(placed_order.begin(), placed_order.end(),
                   [&](ValueId a, ValueId b) { return life[a].bytes > life[b].bytes; });
  std::vector<ValueId> done;
  std::vector<std::pair<size_t, size_t>> busy;  // [offset, end) of overlapping placed values
  for (ValueId v : placed_order) {
    busy.clear();
    for (ValueId u : done)
      if (life[u].first <= life[v].last && life[v].first <= life[u].last)
        busy.emplace_back(plan.offset[u], plan.offset[u] + life[u].bytes);
    std::sort(busy.begin(), busy.end());
    size_t at = 0;
    for (auto [b, e] : busy) {
      if (b >= at + life[v].bytes) break;  // fits in the gap before this one
      at = std::max(at, e);
    }
    plan.offset[v] = at;
    plan.arena_bytes = std::max(plan.arena_bytes, checked_add(at, life[v].bytes, "the activation arena"));
    done.push_back(v);
  }
  for (size_t v = 0; v < nv; ++v)
    if (g.value(static_cast<ValueId>(v)).alias_of != kNoValue) plan.offset[v] = plan.offset[root(v)];
  return plan;
}

}  // namespace tessera::graph
