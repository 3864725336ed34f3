// The device's peak FLOP/s for MFU. On the CPU it is measured at start-up by calibration loops
// (backends/cpu/peak_kernels.h) on every thread at once, about 0.1 s in all.
#pragma once

#include "tessera/core/cpu_features.h"
#include "tessera/core/dtype.h"

namespace tessera::cpu {

struct DevicePeak {
  double f32_flops = 0;   // FLOP/s, all threads
  double bf16_flops = 0;  // FLOP/s with the bf16 dot product (= f32 peak where there is none)
  double for_dtype(DType compute) const { return compute == DType::kBF16 ? bf16_flops : f32_flops; }
};

// With the calibration loops of the active ISA's kernels, or of `isa` (which the CPU must support).
DevicePeak calibrate_cpu_peak(double seconds_per_kind = 0.05);
DevicePeak calibrate_cpu_peak(double seconds_per_kind, Isa isa);

}  // namespace tessera::cpu
