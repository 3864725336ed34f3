// Plan: a finished step graph (forward, recompute, backward, optimizer) with every value placed
// in an arena allocated once, and the reports that need no execution: parameter count, FLOPs per
// step by phase, and memory by category. The executor (executor.h) runs it; nothing is
// allocated per step.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tessera/core/arena.h"
#include "tessera/graph/autodiff.h"
#include "tessera/graph/graph.h"
#include "tessera/graph/memory_plan.h"

namespace tessera::graph {

struct PlanOptions {
  std::string remat_policy = "full";
  OptimizerKind optimizer = OptimizerKind::kAdamW;
};

struct MemoryReport {
  size_t params = 0;          // f32 master weights
  size_t param_copies = 0;    // lower-precision compute copies
  size_t grads = 0;
  size_t optimizer = 0;
  size_t inputs = 0;          // batch inputs
  size_t activations = 0;     // the planned activation arena
  size_t activations_lower_bound = 0;
  size_t total() const { return params + param_copies + grads + optimizer + inputs + activations; }
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
  const Tensor& view(ValueId v) const { return views_[v]; }
  ValueId dloss() const { return dloss_; }
  int first_optimizer_node() const { return first_opt_; }

  int64_t num_params() const;
  const MemoryReport& memory() const { return memory_; }
  FlopReport flops() const;
  std::string summary() const;  // human-readable multi-line report

 private:
  Graph graph_;
  ValueId dloss_ = kNoValue;
  int first_opt_ = 0;
  MemoryPlan mem_plan_;
  MemoryReport memory_;
  Arena persistent_;   // params, copies, grads, optimizer state, inputs
  Arena activations_;
  std::vector<Tensor> views_;
};

// FLOPs of one node (matmuls and attention; elementwise work counts 0).
double node_flops(const Graph& g, const Node& n);

}  // namespace tessera::graph
