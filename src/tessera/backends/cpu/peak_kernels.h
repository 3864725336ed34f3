// Peak-throughput calibration loops: many independent FMA (fp32) or vdpbf16ps (bf16) chains in
// registers, no memory traffic. The training loop's MFU divides by what these measure, because
// /proc/cpuinfo's MHz is wrong on virtual machines.
#pragma once

#include <cstdint>

#include "tessera/backends/cpu/isa_dispatch.h"

namespace tessera::cpu {

struct PeakKernels {
  // Runs `iters` rounds on the calling thread; returns the FLOPs done (an FMA counts 2; a bf16
  // dot-product pair accumulate counts 2 per pair) and writes a value to *sink so that the work
  // cannot be optimised away.
  double (*fma_f32)(int64_t iters, float* sink);
  double (*dot_bf16)(int64_t iters, float* sink);  // nullptr when the ISA has no bf16 dot product
};

TESSERA_DECLARE_KERNEL_TABLE(PeakKernels, peak_kernels)

// AMX (peak_kernels_amx.cc, built with -mamx-tile -mamx-bf16): four independent 16 x 16 f32 tile
// accumulators of TDPBF16PS on tiles in registers, 16 x 16 x 32 x 2 FLOPs each. Only to be called
// where amx_bf16_usable() (core/cpu_features.h) holds.
namespace amx {
double dot_bf16(int64_t iters, float* sink);
}

}  // namespace tessera::cpu
