// What the golden tests (tests/models/*_golden_test.cc) share: a plan fed the golden file's batch.
#pragma once

#include <cstring>

#include "tessera/core/safetensors.h"
#include "tessera/graph/plan.h"
#include "tessera/models/blocks.h"

namespace tessera::testing {

// The file's inputs and targets, positions 0..T-1 in one segment per row, and dloss = 1 / N.
inline void feed_golden_batch(graph::Plan& plan, const models::DecoderInputs& in,
                              const models::ModelSpec& spec, const SafetensorsFile& file) {
  const Tensor inputs = file.get("inputs"), targets = file.get("targets");
  std::memcpy(plan.view(in.tokens).data(), inputs.data(), inputs.nbytes());
  std::memcpy(plan.view(in.targets).data(), targets.data(), targets.nbytes());
  auto* pos = plan.view(in.positions).ptr<int32_t>();
  auto* seg = plan.view(in.segment_ids).ptr<int32_t>();
  for (int64_t b = 0; b < spec.batch; ++b)
    for (int64_t t = 0; t < spec.seq; ++t) {
      pos[b * spec.seq + t] = static_cast<int32_t>(t);
      seg[b * spec.seq + t] = 1;
    }
  const Tensor& dloss = plan.view(plan.dloss());
  for (int64_t i = 0; i < dloss.numel(); ++i)
    dloss.ptr<float>()[i] = 1.0f / static_cast<float>(dloss.numel());
}

}  // namespace tessera::testing
