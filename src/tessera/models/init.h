// Deterministic parameter initialisation from init_weights_seed, as MaxText initialises a decoder:
//   norm scales                      1
//   biases (projections, LayerNorm)  0
//   token embedding                  normal(0, 1)                      (nn.initializers.normal(1.0))
//   every kernel [fan_in, ...]       truncated normal (|z| < 2) with std 1 / sqrt(fan_in)
//                                    (variance_scaling(1.0, "fan_in", "truncated_normal"))
// Each element's value depends only on (seed, parameter name, element index) through a
// counter-based generator, so it is the same for any thread count and any sharding: a sharded
// plan's ranks each fill their piece (Plan::state) with the whole tensor's values at its offsets.
#pragma once

#include <cstdint>

#include "tessera/graph/plan.h"

namespace tessera::models {

void init_params(graph::Plan& plan, uint64_t seed);

// Refreshes every lower-precision compute copy from its f32 master (after init or a load).
void sync_compute_copies(graph::Plan& plan);

}  // namespace tessera::models
