// Small-M matrix products against a weight stored one output per row: y[M, N] (+)= x[M, K] · wᵀ
// with w [N, K] (Hugging Face's nn.Linear layout, [out, in]). This is the product of decoding,
// where M is the number of sequences stepping together (1 to a few dozen) and w is a layer's
// weight: the work is reading w once, which the kernels (backends/kernels/gemv.h) do at the
// memory bandwidth. Any M >= 1 is correct; for large M (a prefill) oneDNN's GEMM (ops/matmul.h,
// trans_b) is faster, and bench/decode_bench.cc shows where they cross.
//
// dtypes: x and w both f32, or both bf16; y f32, or bf16 when x and w are bf16. Products and sums
// are f32 (bf16 widened exactly); a bf16 y is rounded to nearest even once, after the accumulate
// add. Tensors are 2-D, row-major and contiguous; y must not overlap x or w.
// Left out: a backward (decoding needs none), bias, strided views.
#pragma once

#include <cstdint>
#include <span>

#include "tessera/core/tensor.h"

namespace tessera::ops {

struct GemvOptions {
  bool accumulate = false;  // y += x·wᵀ (y is read); otherwise y is overwritten
};

// y = x·wᵀ (+ y). Throws kShape naming the argument for bad ranks, shapes, dtypes or overlap.
void gemv(const Tensor& x, const Tensor& w, const Tensor& y, GemvOptions opts = {});

// Whether a product of x's rows against a weight stored [out, in] runs faster here than on the
// device's GEMM (ops/matmul.h with trans_b): fewer rows than the GEMM table's gemv_rows_below for
// x's dtype (backends/kernels/gemm.h).
bool gemv_is_faster(const Tensor& x);

// Up to this many products that read one x run as one call.
constexpr size_t kMaxGemvProducts = 8;

// y[p] = x·w[p]ᵀ (+ y[p]) for every p, as one call: the threads split the products' rows together,
// so a decoding step's q, k and v projections take one hand-off between threads instead of three.
// Each (w[p], y[p]) is checked as the single product's, every w in x's dtype and every y in one
// dtype; no y may overlap x, a w or another y. Results are those of the single products.
void gemv(const Tensor& x, std::span<const Tensor> w, std::span<const Tensor> y, GemvOptions opts = {});

// Multiply-adds count twice, as for matmul.
constexpr int64_t gemv_flops(int64_t m, int64_t n, int64_t k) {
  return 2 * m * n * k;
}
// Bytes moved at least once: x and w read, y written (and read with accumulate).
int64_t gemv_bytes(int64_t m, int64_t n, int64_t k, DType xw_dtype, DType y_dtype, bool accumulate);

// Reference in double: x [M, K], w [N, K], y [M, N] (read when accumulate), summed in order of k.
void gemv_ref(const double* x, const double* w, double* y, int64_t m, int64_t n, int64_t k,
              GemvOptions opts = {});

}  // namespace tessera::ops
