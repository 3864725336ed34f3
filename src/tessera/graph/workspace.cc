#include "tessera/graph/workspace.h"

#include <unistd.h>

#include "tessera/core/checked.h"
#include "tessera/core/error.h"

namespace tessera::graph {

namespace {

// The arenas are mapped and pre-faulted whole: a plan larger than this machine's memory would be
// killed by the kernel part-way through (or swap for hours), so it is refused before anything is
// mapped, with the keys that size it.
void check_fits_in_memory(const PlanSpec& spec, const SharedArenas& shared) {
  const size_t persistent = spec.arena_bytes(ArenaKind::kPersistent) +
                            (shared.model_state ? 0 : spec.arena_bytes(ArenaKind::kModelState));
  const size_t activations = shared.activations ? 0 : spec.arena_bytes(ArenaKind::kActivations);
  const size_t gathered = spec.arena_bytes(ArenaKind::kGathered);
  const size_t total = checked_add(checked_add(persistent, activations, "the plan"), gathered, "the plan");
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return;  // unknown: nothing to compare with
  const size_t memory = static_cast<size_t>(pages) * static_cast<size_t>(page);
  constexpr double kGiB = double(1 << 30);
  TESSERA_CHECK(
      total <= memory, ErrorKind::kConfig,
      "the plan needs {:.2f} GiB (parameters, gradients and optimizer state {:.2f} GiB: base_emb_dim, "
      "base_mlp_dim, base_num_decoder_layers, vocab_size, weight_dtype; activations {:.2f} GiB: "
      "per_device_batch_size, max_target_length, remat_policy; gathered {:.2f} GiB) but this "
      "machine has {:.2f} GiB of memory; make the model or the batch smaller",
      static_cast<double>(total) / kGiB, static_cast<double>(persistent) / kGiB,
      static_cast<double>(activations) / kGiB, static_cast<double>(gathered) / kGiB,
      static_cast<double>(memory) / kGiB);
}

}  // namespace

Workspace::Workspace(const PlanSpec& spec, const SharedArenas& shared)
    : shared_model_state_(shared.model_state), shared_activations_(shared.activations) {
  TESSERA_CHECK(spec.has_graph(), ErrorKind::kInternal, "a PlanSpec loaded from JSON has no graph to bind");
  TESSERA_ASSERT(!shared.model_state ||
                 shared.model_state->capacity() >= spec.arena_bytes(ArenaKind::kModelState));
  TESSERA_ASSERT(!shared.activations ||
                 shared.activations->capacity() >= spec.arena_bytes(ArenaKind::kActivations));
  check_fits_in_memory(spec, shared);
  persistent_ = Arena(spec.arena_bytes(ArenaKind::kPersistent), "parameters and optimizer state");
  if (!shared.activations) activations_ = Arena(spec.arena_bytes(ArenaKind::kActivations), "activations");
  if (!shared.model_state && spec.arena_bytes(ArenaKind::kModelState) > 0)
    model_state_ = Arena(spec.arena_bytes(ArenaKind::kModelState), "model state");
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
      a = shared_activations_ ? shared_activations_ : &activations_;
      break;
    case ArenaKind::kModelState:
      a = shared_model_state_ ? shared_model_state_ : &model_state_;
      break;
  }
  TESSERA_ASSERT(p.offset + p.bytes() <= a->capacity() || p.bytes() == 0);
  return Tensor(a->base() + p.offset, p.shape, p.dtype);
}

size_t Workspace::mapped_bytes() const {
  return persistent_.capacity() + gathered_.capacity() + activations_.capacity() + model_state_.capacity();
}

}  // namespace tessera::graph
