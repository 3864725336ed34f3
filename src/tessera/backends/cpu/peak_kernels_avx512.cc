// AVX-512 calibration: 12 independent 16-lane chains hide the 4-cycle FMA latency on two pipes.
#include <immintrin.h>

#include "tessera/backends/cpu/peak_kernels.h"

namespace tessera::cpu::avx512 {
namespace {

constexpr int kChains = 12;

// The sum of v's lanes, which keeps every chain live. (GCC 12's _mm512_reduce_add_ps reads an
// undefined register and draws -Wuninitialized here.)
float lane_sum(__m512 v) {
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, v);
  float t = 0;
  for (float x : lanes) t += x;
  return t;
}

double fma_f32(int64_t iters, float* sink) {
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(static_cast<float>(c) * 1e-3f);
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i)
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], a, b);  // acc = acc * a + b
  __m512 s = acc[0];
  for (int c = 1; c < kChains; ++c) s = _mm512_add_ps(s, acc[c]);
  *sink = lane_sum(s);
  return static_cast<double>(iters) * kChains * 16 * 2;
}

double dot_bf16(int64_t iters, float* sink) {
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_setzero_ps();
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80);  // bf16 1.0
  const __m512bh b = (__m512bh)_mm512_set1_epi16(0x3380);  // bf16 ~6e-8
  for (int64_t i = 0; i < iters; ++i)
    for (int c = 0; c < kChains; ++c)
      acc[c] = _mm512_dpbf16_ps(acc[c], a, b);  // acc += a0*b0 + a1*b1 per lane
  __m512 s = acc[0];
  for (int c = 1; c < kChains; ++c) s = _mm512_add_ps(s, acc[c]);
  *sink = lane_sum(s);
  return static_cast<double>(iters) * kChains * 16 * 2 * 2;
}

}  // namespace

extern const PeakKernels kPeakKernels;
const PeakKernels kPeakKernels = {fma_f32, dot_bf16};

}  // namespace tessera::cpu::avx512
