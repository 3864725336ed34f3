// Workspace: a PlanSpec (plan_spec.h) bound to memory on a device. It maps the plan's three arenas
// once (core/arena.h: huge pages, pre-faulted) and makes every value's tensor views from the
// placements, so the executor's per-node work is an index into a vector of ready Tensors.
// The CPU (host memory) is the only device today.
#pragma once

#include <vector>

#include "tessera/core/arena.h"
#include "tessera/graph/plan_spec.h"

namespace tessera::graph {

// Arenas a workspace binds instead of mapping its own (not owned; each at least as large as the
// spec asks): the plans of one model for several row counts (decoding) share the model state
// (parameters and KV caches, ArenaKind::kModelState) and, as only one runs at a time, the
// activations.
struct SharedArenas {
  const Arena* model_state = nullptr;
  const Arena* activations = nullptr;
};

class Workspace {
 public:
  // Allocates the arenas spec.arena_bytes() asks for, except those `shared` gives; the spec must
  // have its graph (has_graph()). The Workspace keeps no reference to the spec.
  explicit Workspace(const PlanSpec& spec, const SharedArenas& shared = {});

  // The tensors of PlanSpec::view / state / opt.
  const Tensor& view(ValueId v) const { return views_[v]; }
  const Tensor& state(ValueId v) const { return state_[v]; }
  const Tensor& opt_view(ValueId v) const { return opt_views_[v]; }
  // FSDP staging (ParamLayout::Gathered::staging, ParamLayout::grad_staging) by layout index.
  const Tensor& gather_staging(int layout, size_t gathered) const {
    return gather_staging_[static_cast<size_t>(layout)][gathered];
  }
  const Tensor& grad_staging(int layout) const { return grad_staging_[static_cast<size_t>(layout)]; }
  // The device the arenas are on (host memory today); the executor runs on its backend.
  Device device() const { return persistent_.device(); }
  // The bytes mapped, for checks against the plan's sizes.
  size_t mapped_bytes() const;

 private:
  Tensor bind(const Placement& p) const;

  Arena persistent_;  // params, copies, grads, optimizer state, inputs
  Arena gathered_;    // FSDP gather slots and buffers, staging; ZeRO-1 gradient pieces
  Arena activations_;
  Arena model_state_;
  const Arena* shared_model_state_ = nullptr;
  const Arena* shared_activations_ = nullptr;
  std::vector<Tensor> views_, state_, opt_views_;
  std::vector<std::vector<Tensor>> gather_staging_;
  std::vector<Tensor> grad_staging_;
};

}  // namespace tessera::graph
