// AVX2 calibration: 10 independent 8-lane FMA chains. AVX2 has no bf16 dot product: bf16 matmuls
// on such CPUs convert to f32, so their peak is the f32 one.
#include <immintrin.h>

#include "tessera/backends/cpu/peak_kernels.h"

namespace tessera::cpu::avx2 {
namespace {

constexpr int kChains = 10;

double fma_f32(int64_t iters, float* sink) {
  __m256 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_ps(static_cast<float>(c) * 1e-3f);
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i)
    for (int c = 0; c < kChains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], a, b);  // acc = acc * a + b
  __m256 s = acc[0];
  for (int c = 1; c < kChains; ++c) s = _mm256_add_ps(s, acc[c]);
  float lanes[8];
  _mm256_storeu_ps(lanes, s);
  *sink = lanes[0] + lanes[7];
  return static_cast<double>(iters) * kChains * 8 * 2;
}

}  // namespace

extern const PeakKernels kPeakKernels;
const PeakKernels kPeakKernels = {fma_f32, nullptr};

}  // namespace tessera::cpu::avx2
