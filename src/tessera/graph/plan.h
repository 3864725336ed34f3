// Plan: a PlanSpec (plan_spec.h: the finished step graph, layouts, placements and reports, pure
// data) together with the Workspace (workspace.h) that binds it to memory on this machine. It is
// what the trainer, tests and model loaders hold: spec() for anything that needs no memory,
// view() / state() / opt_view() for the tensors. The executor (executor.h) runs it; nothing is
// allocated per step.
#pragma once

#include <string>
#include <vector>

#include "tessera/graph/plan_spec.h"
#include "tessera/graph/workspace.h"

namespace tessera::graph {

class Plan {
 public:
  // Takes a forward graph with its loss set; builds its PlanSpec and allocates its Workspace.
  Plan(Graph forward, const PlanOptions& opts) : spec_(std::move(forward), opts), workspace_(spec_) {}
  // A finished spec bound with `shared`'s arenas in place of its own (workspace.h: decoding's plans
  // of one model share their parameters, KV caches and activations).
  Plan(PlanSpec spec, const SharedArenas& shared) : spec_(std::move(spec)), workspace_(spec_, shared) {}
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;

  const PlanSpec& spec() const { return spec_; }
  Workspace& workspace() { return workspace_; }
  const Workspace& workspace() const { return workspace_; }

  const Graph& graph() const { return spec_.graph(); }
  // The tensors of PlanSpec::view / state / opt (see plan_spec.h).
  const Tensor& view(ValueId v) const { return workspace_.view(v); }
  const Tensor& state(ValueId v) const { return workspace_.state(v); }
  const Tensor& opt_view(ValueId v) const { return workspace_.opt_view(v); }
  ValueId dloss() const { return spec_.dloss(); }
  ValueId daux() const { return spec_.daux(); }
  int first_optimizer_node() const { return spec_.first_optimizer_node(); }

  const PlanSharding& sharding() const { return spec_.sharding(); }
  const std::vector<ParamLayout>& layouts() const { return spec_.layouts(); }
  const ParamLayout& layout(ValueId param) const { return spec_.layout(param); }
  bool any_sharded() const { return spec_.any_sharded(); }
  bool zero1() const { return spec_.zero1(); }

  int64_t num_params() const { return spec_.num_params(); }
  const MemoryReport& memory() const { return spec_.memory(); }
  const FlopReport& flops() const { return spec_.flops(); }
  std::string summary() const { return spec_.summary(); }
  std::string sharding_summary() const { return spec_.sharding_summary(); }

 private:
  PlanSpec spec_;  // before workspace_: the workspace is made from it
  Workspace workspace_;
};

}  // namespace tessera::graph
