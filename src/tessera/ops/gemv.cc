// gemv op entry: shape and dtype checks, then the kernels; and the double reference.
#include "tessera/ops/gemv.h"

#include <array>

#include "tessera/backends/kernels.h"
#include "tessera/core/error.h"

namespace tessera::ops {

namespace {

bool overlaps(const Tensor& a, const Tensor& b) {
  auto p = static_cast<const char*>(a.data()), q = static_cast<const char*>(b.data());
  return p < q + b.nbytes() && q < p + a.nbytes();
}

}  // namespace

void gemv(const Tensor& x, const Tensor& w, const Tensor& y, GemvOptions opts) {
  gemv(x, std::span(&w, 1), std::span(&y, 1), opts);
}

void gemv(const Tensor& x, std::span<const Tensor> ws, std::span<const Tensor> ys, GemvOptions opts) {
  TESSERA_CHECK_SHAPE(!ws.empty() && ws.size() == ys.size() && ws.size() <= kMaxGemvProducts,
                      "gemv: {} weights and {} outputs; expected as many of each, 1 to {}", ws.size(),
                      ys.size(), kMaxGemvProducts);
  TESSERA_CHECK_SHAPE(
      x.rank() == 2 && x.is_contiguous() && (x.dtype() == DType::kF32 || x.dtype() == DType::kBF16),
      "gemv: x must be 2-D, contiguous, float32 or bfloat16; got x {}", x.str());
  const int64_t m = x.dim(0), k = x.dim(1);
  std::array<backends::GemvArgs, kMaxGemvProducts> args;
  for (size_t p = 0; p < ws.size(); ++p) {
    const Tensor &w = ws[p], &y = ys[p];
    TESSERA_CHECK_SHAPE(w.rank() == 2 && y.rank() == 2, "gemv: w and y must be 2-D, got w {}, y {}", w.str(),
                        y.str());
    TESSERA_CHECK_SHAPE(w.dtype() == x.dtype(),
                        "gemv: x and w must be both float32 or both bfloat16, got x {}, w {}", x.str(),
                        w.str());
    TESSERA_CHECK_SHAPE(
        y.dtype() == ys[0].dtype() &&
            (y.dtype() == DType::kF32 || (y.dtype() == DType::kBF16 && x.dtype() == DType::kBF16)),
        "gemv: y must be float32, or bfloat16 with bfloat16 x and w, one dtype for every "
        "product; got y {} for x {}",
        y.str(), x.str());
    TESSERA_CHECK_SHAPE(w.is_contiguous() && y.is_contiguous(), "gemv: x, w and y must be contiguous");
    const int64_t n = w.dim(0);
    TESSERA_CHECK_SHAPE(
        w.dim(1) == k, "gemv: w must be [N, {}] (one output per row, K = x's columns), got w {}", k, w.str());
    TESSERA_CHECK_SHAPE(y.dim(0) == m && y.dim(1) == n,
                        "gemv: y must be [{}, {}] (x's rows, w's rows), got y {}", m, n, y.str());
    if (y.numel() > 0) {
      TESSERA_CHECK_SHAPE(!overlaps(y, x), "gemv: y {} overlaps x {}", y.str(), x.str());
      for (size_t q = 0; q < ws.size(); ++q)
        TESSERA_CHECK_SHAPE(!overlaps(y, ws[q]) && (q == p || !overlaps(y, ys[q])),
                            "gemv: y {} overlaps another operand (w {}, y {})", y.str(), ws[q].str(),
                            ys[q].str());
    }
    args[p] = {m, n, k, x.data(), k, w.data(), k, y.data(), n, opts.accumulate};
  }
  if (m == 0) return;
  const std::span<const backends::GemvArgs> products(args.data(), ws.size());
  const backends::GemvKernels& kern = *backends::kernels_for(x).gemv;
  if (x.dtype() == DType::kF32)
    kern.f32(products);
  else if (ys[0].dtype() == DType::kF32)
    kern.bf16_f32(products);
  else
    kern.bf16_bf16(products);
}

bool gemv_is_faster(const Tensor& x) {
  return x.dim(0) < backends::kernels_for(x).gemm->gemv_rows_below(x.dtype());
}

int64_t gemv_bytes(int64_t m, int64_t n, int64_t k, DType xw_dtype, DType y_dtype, bool accumulate) {
  const auto e = static_cast<int64_t>(dtype_size(xw_dtype)), ye = static_cast<int64_t>(dtype_size(y_dtype));
  return (m * k + n * k) * e + m * n * ye * (accumulate ? 2 : 1);
}

void gemv_ref(const double* x, const double* w, double* y, int64_t m, int64_t n, int64_t k,
              GemvOptions opts) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t r = 0; r < n; ++r) {
      double s = 0;
      for (int64_t j = 0; j < k; ++j) s += x[i * k + j] * w[r * k + j];
      y[i * n + r] = opts.accumulate ? y[i * n + r] + s : s;
    }
}

}  // namespace tessera::ops
