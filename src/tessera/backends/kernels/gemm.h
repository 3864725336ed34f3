// The GEMM of a device's kernel tables (backends/kernels.h): C[M,N] (+)= op(A)[M,K] · op(B)[K,N] on
// row-major, contiguous buffers. The CPU's is oneDNN's matmul (backends/cpu/onednn_matmul.h).
#pragma once

#include <cstdint>

#include "tessera/core/dtype.h"

namespace tessera::backends {

// One GEMM problem. Storage: A is [M, K] row-major, or [K, M] when trans_a; B is [K, N], or [N, K]
// when trans_b; C is [M, N]. All contiguous.
struct GemmShape {
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false;
  bool trans_b = false;
  DType ab_dtype = DType::kF32;  // A and B: f32 or bf16
  DType c_dtype = DType::kF32;   // C: f32 or bf16
  bool accumulate = false;       // C += op(A)·op(B) instead of C = op(A)·op(B)

  bool operator==(const GemmShape&) const = default;
};

struct GemmKernels {
  // M, N and K >= 1. Throws tessera::Error(kRuntime) naming the shape when the device fails.
  void (*gemm)(const GemmShape& g, const void* a, const void* b, void* c);
};

}  // namespace tessera::backends
