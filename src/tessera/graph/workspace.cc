#include "tessera/graph/workspace.h"

#include "tessera/core/error.h"

namespace tessera::graph {

Workspace::Workspace(const PlanSpec& spec) {
  TESSERA_CHECK(spec.has_graph(), ErrorKind::kInternal, "a PlanSpec loaded from JSON has no graph to bind");
  persistent_ = Arena(spec.arena_bytes(ArenaKind::kPersistent), "parameters and optimizer state");
  activations_ = Arena(spec.arena_bytes(ArenaKind::kActivations), "activations");
  if (spec.arena_bytes(ArenaKind::kGathered) > 0)
    gathered_ = Arena(spec.arena_bytes(ArenaKind::kGathered), "gathered parameters and gradients");
  const size_t nv = spec.graph().values().size();
  views_.resize(nv);
  state_.resize(nv);
  opt_views_.resize(nv);
  for (size_t i = 0; i < nv; ++i) {
    const auto v = static_cast<ValueId>(i);
    views_[i] = bind(spec.view(v));
    state_[i] = bind(spec.state(v));
    opt_views_[i] = bind(spec.opt(v));
  }
  for (const ParamLayout& L : spec.layouts()) {
    std::vector<Tensor> staging;
    for (const auto& g : L.gathered) staging.push_back(bind(g.staging));
    gather_staging_.push_back(std::move(staging));
    grad_staging_.push_back(bind(L.grad_staging));
  }
}

Tensor Workspace::bind(const Placement& p) const {
  const Arena* a = nullptr;
  switch (p.arena) {
    case ArenaKind::kNone:
      return Tensor();
    case ArenaKind::kPersistent:
      a = &persistent_;
      break;
    case ArenaKind::kGathered:
      a = &gathered_;
      break;
    case ArenaKind::kActivations:
      a = &activations_;
      break;
  }
  TESSERA_ASSERT(p.offset + p.bytes() <= a->capacity() || p.bytes() == 0);
  return Tensor(a->base() + p.offset, p.shape, p.dtype);
}

size_t Workspace::mapped_bytes() const {
  return persistent_.capacity() + gathered_.capacity() + activations_.capacity();
}

}  // namespace tessera::graph
