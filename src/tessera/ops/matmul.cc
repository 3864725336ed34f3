// matmul op entry: shape and dtype checks, then oneDNN; and the double reference.
#include "tessera/ops/matmul.h"

#include <cstring>

#include "tessera/backends/kernels.h"
#include "tessera/core/error.h"

namespace tessera::ops {

namespace {

bool is_gemm_dtype(DType t) {
  return t == DType::kF32 || t == DType::kBF16;
}

// The byte ranges of x and y share a byte.
bool overlaps(const Tensor& x, const Tensor& y) {
  auto p = static_cast<const char*>(x.data()), q = static_cast<const char*>(y.data());
  return p < q + y.nbytes() && q < p + x.nbytes();
}

void check(const Tensor& a, const Tensor& b, const Tensor& c, const MatmulOptions& o) {
  TESSERA_CHECK_SHAPE(a.rank() == 2 && b.rank() == 2 && c.rank() == 2,
                      "matmul: a, b and c must be 2-D, got a {}, b {}, c {}", a.str(), b.str(), c.str());
  TESSERA_CHECK_SHAPE(is_gemm_dtype(a.dtype()) && a.dtype() == b.dtype(),
                      "matmul: a and b must be both float32 or both bfloat16, got a {}, b {}", a.str(),
                      b.str());
  TESSERA_CHECK_SHAPE(is_gemm_dtype(c.dtype()), "matmul: c must be float32 or bfloat16, got c {}", c.str());
  // oneDNN 2.6 has no f32 x f32 -> bf16 GEMM; rather than a hidden f32 temporary and a conversion
  // pass, the caller converts (ops::convert) where it really needs that.
  TESSERA_CHECK_SHAPE(a.dtype() == DType::kBF16 || c.dtype() == DType::kF32,
                      "matmul: float32 inputs need a float32 c, got c {} (bfloat16 c needs bfloat16 a and b)",
                      c.str());
  TESSERA_CHECK_SHAPE(a.is_contiguous() && b.is_contiguous() && c.is_contiguous(),
                      "matmul: a, b and c must be contiguous");
  const int64_t m = o.trans_a ? a.dim(1) : a.dim(0), k = o.trans_a ? a.dim(0) : a.dim(1);
  const int64_t kb = o.trans_b ? b.dim(1) : b.dim(0), n = o.trans_b ? b.dim(0) : b.dim(1);
  TESSERA_CHECK_SHAPE(k == kb,
                      "matmul: inner dimensions differ: op(a) is [{}, {}] (a {}{}) but op(b) is [{}, {}] "
                      "(b {}{}); expected op(b) to have {} rows",
                      m, k, a.str(), o.trans_a ? ", trans_a" : "", kb, n, b.str(),
                      o.trans_b ? ", trans_b" : "", k);
  TESSERA_CHECK_SHAPE(c.dim(0) == m && c.dim(1) == n,
                      "matmul: c is {}, expected [{}, {}] (M from op(a), N from op(b))", c.str(), m, n);
  TESSERA_CHECK_SHAPE(c.numel() == 0 || (!overlaps(c, a) && !overlaps(c, b)),
                      "matmul: c {} overlaps an input (a {}, b {})", c.str(), a.str(), b.str());
}

}  // namespace

void matmul(const Tensor& a, const Tensor& b, const Tensor& c, MatmulOptions opts) {
  check(a, b, c, opts);
  backends::GemmShape g;
  g.m = c.dim(0);
  g.n = c.dim(1);
  g.k = opts.trans_a ? a.dim(0) : a.dim(1);
  g.trans_a = opts.trans_a;
  g.trans_b = opts.trans_b;
  g.ab_dtype = a.dtype();
  g.c_dtype = c.dtype();
  g.accumulate = opts.accumulate;
  if (g.m == 0 || g.n == 0) return;
  if (g.k == 0) {
    // An empty sum is zero: C = 0, or C unchanged with accumulate. All-zero bits are +0 in f32 and
    // bf16 alike.
    if (!opts.accumulate) std::memset(c.data(), 0, c.nbytes());
    return;
  }
  backends::kernels_for(c).gemm->gemm(g, a.data(), b.data(), c.data());
}

int64_t matmul_bytes(int64_t m, int64_t n, int64_t k, DType ab_dtype, DType c_dtype, bool accumulate) {
  const auto ab = static_cast<int64_t>(dtype_size(ab_dtype)), cb = static_cast<int64_t>(dtype_size(c_dtype));
  return (m * k + k * n) * ab + m * n * cb * (accumulate ? 2 : 1);
}

void matmul_ref(const double* a, const double* b, double* c, int64_t m, int64_t n, int64_t k,
                MatmulOptions opts) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = opts.accumulate ? c[i * n + j] : 0.0;
      for (int64_t p = 0; p < k; ++p) {
        double x = opts.trans_a ? a[p * m + i] : a[i * k + p];
        double y = opts.trans_b ? b[j * k + p] : b[p * n + j];
        s += x * y;
      }
      c[i * n + j] = s;
    }
  }
}

}  // namespace tessera::ops
