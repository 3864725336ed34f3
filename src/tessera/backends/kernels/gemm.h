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

// A grouped GEMM (MaxText's gmm and tgmm) over G groups of consecutive rows: group g is the
// group_sizes[g] rows after those of the groups before it (their sum may be less than the buffer's
// rows; the rows after them are not touched).
//   forward (weight_grad false): C rows of g [M_g, N] (+)= A rows of g [M_g, K] · op(B[g]), with B
//     [G, K, N], or [G, N, K] when trans_b;
//   weight_grad: C[g] [K, N] (+)= (A rows of g)ᵀ [K, M_g] · (B rows of g) [M_g, N], with A [rows, K],
//     B [rows, N] and C [G, K, N]; a group without rows gets C[g] = 0 (unchanged when accumulating).
struct GroupedGemmShape {
  int64_t groups = 0, n = 0, k = 0;
  bool trans_b = false;
  bool weight_grad = false;
  bool accumulate = false;
  DType ab_dtype = DType::kF32;
  DType c_dtype = DType::kF32;
};

struct GemmKernels {
  // M, N and K >= 1. Throws tessera::Error(kRuntime) naming the shape when the device fails.
  void (*gemm)(const GemmShape& g, const void* a, const void* b, void* c);
  // group_sizes [G] >= 0 (host memory); N, K >= 1.
  void (*grouped_gemm)(const GroupedGemmShape& g, const int32_t* group_sizes, const void* a, const void* b,
                       void* c);
  // Products of fewer rows than this (A and B in `ab_dtype`, B stored [N, K]) run faster on the
  // device's small-M kernel (kernels/gemv.h), which streams B at the memory bandwidth, than on
  // `gemm`; bench/decode_bench.cc's small-M section measures where the two cross.
  int64_t (*gemv_rows_below)(DType ab_dtype);
};

}  // namespace tessera::backends
