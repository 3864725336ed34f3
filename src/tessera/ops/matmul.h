// Matrix multiply: C[M,N] = op(A)[M,K] · op(B)[K,N], or C += ... with accumulate, where op(X) is X
// or its transpose. Runs on the device's GEMM (backends/kernels/gemm.h; on the CPU, oneDNN).
//
// Tensors are 2-D, row-major and contiguous. Storage shapes:
//   A: [M, K], or [K, M] with trans_a;   B: [K, N], or [N, K] with trans_b;   C: [M, N].
// dtypes: A and B both f32 or both bf16; C f32, or bf16 when A and B are bf16 (oneDNN has no
// f32 × f32 → bf16 GEMM; convert afterwards where that is wanted). Products and sums are f32 inside oneDNN
// (bf16 × bf16 products are exact in f32); a bf16 C is rounded to nearest even once, at the end,
// after the accumulate add. C must not overlap A or B.
//
// Forward and backward of a linear layer (W stored [in, out], x [N, in], y [N, out]):
//   forward            y  = x · W          matmul(x, w, y)
//   input gradient     dx = dy · Wᵀ        matmul(dy, w, dx, {.trans_b = true})
//   weight gradient    dW += xᵀ · dy       matmul(x, dy, dw, {.trans_a = true, .accumulate = true})
// (activation gradients are overwritten, parameter gradients accumulated). In general, for
// C = op(A)·op(B): dop(A) = dC·op(B)ᵀ and dop(B) = op(A)ᵀ·dC, which are matmuls with the
// transposes flipped; no separate backward entry is needed.
//
// Left out: batched and strided (non-contiguous) operands, bias and fused epilogues.
#pragma once

#include <cstdint>

#include "tessera/core/dtype.h"
#include "tessera/core/tensor.h"

namespace tessera::ops {

struct MatmulOptions {
  bool trans_a = false;     // A is stored [K, M]
  bool trans_b = false;     // B is stored [N, K]
  bool accumulate = false;  // C += op(A)·op(B) (C is read); otherwise C is overwritten (never read)
};

// C = op(A)·op(B) (+ C). Throws kShape naming the argument for bad ranks, shapes, dtypes or
// overlap; kRuntime when oneDNN fails.
void matmul(const Tensor& a, const Tensor& b, const Tensor& c, MatmulOptions opts = {});

// Multiply-adds count twice; the accumulate add (M·N) is left out, as is customary.
constexpr int64_t matmul_flops(int64_t m, int64_t n, int64_t k) {
  return 2 * m * n * k;
}

// Bytes a GEMM must move at least once: A and B read, C written (and read with accumulate).
int64_t matmul_bytes(int64_t m, int64_t n, int64_t k, DType ab_dtype, DType c_dtype, bool accumulate);

// Reference in double, same storage layouts as matmul: a is [M,K] or [K,M], b is [K,N] or [N,K],
// c is [M,N] (read when opts.accumulate). Plain triple loop, summation in order of k.
void matmul_ref(const double* a, const double* b, double* c, int64_t m, int64_t n, int64_t k,
                MatmulOptions opts = {});

}  // namespace tessera::ops
