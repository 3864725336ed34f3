// The CPU's peak FLOP/s for MFU (the CPU backend's calibrate_peak), measured at start-up by
// calibration loops (backends/cpu/peak_kernels.h) on every thread at once, about 0.1 s in all.
#pragma once

#include "tessera/backends/backend.h"
#include "tessera/core/cpu_features.h"
#include "tessera/core/dtype.h"

namespace tessera::cpu {

using backends::DevicePeak;  // bf16_flops: with the bf16 dot product (= f32 peak where there is none)

// With the calibration loops of the active ISA's kernels, or of `isa` (which the CPU must support).
DevicePeak calibrate_cpu_peak(double seconds_per_kind = 0.05);
DevicePeak calibrate_cpu_peak(double seconds_per_kind, Isa isa);

// The AVX-512 kernels' vdpbf16ps FLOP/s over their f32 FMA FLOP/s on one thread (about 2 on AMD
// Zen 4/5, 0.5 on an AMX Xeon), measured on the first call (a few ms) and remembered; 0 where
// the CPU cannot run the AVX-512 kernels.
double bf16_dot_speedup();

}  // namespace tessera::cpu
