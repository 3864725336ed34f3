// Scalar-build calibration: kChains independent chains of acc = acc * a + b in plain C++, compiled
// with the baseline flags like the scalar kernels. There is no FMA instruction there, so each step
// is a multiply and an add (2 FLOPs, as an FMA counts). What it measures is the rate the scalar
// kernels can reach: on x86-64 GCC packs the chains into SSE2's 4-lane registers (the width
// simd_vec.h gives the scalar build), elsewhere whatever the baseline target has. The matmuls
// still run on oneDNN, which picks its own (wider) ISA, so an MFU computed against this peak can
// read above what the scalar kernels alone would allow. No bf16 dot product: bf16 is widened to
// f32, so the bf16 peak is the f32 one.
#include "tessera/backends/cpu/peak_kernels.h"

namespace tessera::cpu::scalar {
namespace {

// 48 chains: 12 registers of 4 lanes, as many as x86-64's 16 xmm hold next to a, b and a
// temporary. A multiply-then-add step is about 8 cycles of latency, so on cores with two pipes
// this keeps most, not all, of them busy: the measured peak is a little below the hardware's.
constexpr int kChains = 48;

double fma_f32(int64_t iters, float* sink) {
  float acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = static_cast<float>(c) * 1e-3f;
  const float a = 0.999999f, b = 1e-7f;
  for (int64_t i = 0; i < iters; ++i)
    for (int c = 0; c < kChains; ++c) acc[c] = acc[c] * a + b;
  float s = 0.0f;
  for (int c = 0; c < kChains; ++c) s += acc[c];
  *sink = s;
  return static_cast<double>(iters) * kChains * 2;
}

}  // namespace

extern const PeakKernels kPeakKernels;
const PeakKernels kPeakKernels = {fma_f32, nullptr};

}  // namespace tessera::cpu::scalar
