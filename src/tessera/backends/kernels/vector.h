// Streaming kernels over flat arrays: dtype conversion and reductions used by several ops.
// The table type is device-neutral: each backend fills one (backends/kernels.h); the CPU's are
// built per ISA in backends/cpu/.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tessera::backends {

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
  // Bias rows: y[r, c] = x[r, c] + bias[c] over [rows, cols] (y may alias x); bias is f32.
  void (*add_bias_f32)(const float* x, const float* bias, float* y, int64_t rows, int64_t cols);
  void (*add_bias_bf16)(const uint16_t* x, const float* bias, uint16_t* y, int64_t rows, int64_t cols);
  // Column sums: dbias[c] += sum_r dy[r, c], accumulated in double per column (threads split the
  // columns, so the result does not depend on the thread count) and added to dbias in f32.
  void (*bias_grad_f32)(const float* dy, float* dbias, int64_t rows, int64_t cols);
  void (*bias_grad_bf16)(const uint16_t* dy, float* dbias, int64_t rows, int64_t cols);
  // Every byte of [p, p + bytes) set to 0, the threads splitting a range of 1 MiB or more (a
  // smaller one is one memset). past_cache: a large range with stores that go to memory without
  // taking cache lines (nor reading them first), for memory whose next reader comes long after (a
  // step's gradients); the stores are fenced before returning.
  void (*zero_bytes)(void* p, size_t bytes, bool past_cache);
};
}  // namespace tessera::backends
