// Memory plan: every activation gets an offset in one arena, from its live interval over the
// node schedule. Two values share bytes only when their intervals do not overlap.
//
// Placement is greedy by size (largest first, lowest offset that fits between the already
// placed values whose intervals overlap), the heuristic TFLite's arena planner uses; it is within a
// few percent of the lower bound (the largest sum of sizes live at one node) on decoder graphs, and
// the plan reports both. Values with alias_of share their target's bytes (in-place ops).
#pragma once

#include <cstddef>
#include <vector>

#include "tessera/graph/graph.h"

namespace tessera::graph {

struct MemoryPlan {
  std::vector<size_t> offset;  // per value; meaningful for kActivation values only
  size_t arena_bytes = 0;      // the activation arena's size
  size_t lower_bound = 0;      // max over nodes of the bytes live at that node
  int peak_node = -1;          // the node where the lower bound is reached
};

MemoryPlan plan_memory(const Graph& g);

}  // namespace tessera::graph
