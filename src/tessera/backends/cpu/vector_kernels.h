// Streaming kernels over flat arrays: dtype conversion and reductions used by several ops.
#pragma once

#include <cstdint>

#include "tessera/backends/cpu/isa_dispatch.h"

namespace tessera::cpu {

struct VectorKernels {
  // dst[i] = bf16(src[i]), round to nearest even.
  void (*f32_to_bf16)(const float* src, uint16_t* dst, int64_t n);
  // dst[i] = float(src[i]), exact.
  void (*bf16_to_f32)(const uint16_t* src, float* dst, int64_t n);
  // sum_i x[i]^2, accumulated in double per thread-chunk so that long arrays keep precision.
  double (*sum_squares_f32)(const float* x, int64_t n);
  // x[i] *= a
  void (*scale_f32)(float* x, float a, int64_t n);
  // out[i] = a[i] + b[i] (out may alias a or b)
  void (*add_f32)(const float* a, const float* b, float* out, int64_t n);
  // out[i] = bf16(float(a[i]) + float(b[i])), rounded to nearest even
  void (*add_bf16)(const uint16_t* a, const uint16_t* b, uint16_t* out, int64_t n);
};

TESSERA_DECLARE_KERNEL_TABLE(VectorKernels, vector_kernels)

}  // namespace tessera::cpu
