#include "tessera/ops/norm.h"

#include <cmath>
#include <vector>

#include "tessera/backends/kernels.h"
#include "tessera/core/error.h"

namespace tessera::ops {

namespace {

// Checks an activation tensor [.., C] and returns its row count N.
int64_t check_rows(const char* op, const Tensor& x) {
  TESSERA_CHECK_SHAPE(x.rank() >= 1 && x.dim(-1) >= 1, "{}: x must be [N, C] with C >= 1, got {}", op,
                      x.str());
  TESSERA_CHECK_SHAPE(x.dtype() == DType::kF32 || x.dtype() == DType::kBF16,
                      "{}: x must be float32 or bfloat16, got {}", op, x.str());
  TESSERA_CHECK_SHAPE(x.is_contiguous(), "{}: x must be contiguous, got {}", op, x.str());
  return x.numel() / x.dim(-1);
}

void check_like(const char* op, const char* arg, const Tensor& t, const Tensor& x) {
  TESSERA_CHECK_SHAPE(t.defined(), "{}: {} is missing", op, arg);
  TESSERA_CHECK_SHAPE(t.shape() == x.shape() && t.dtype() == x.dtype(), "{}: {} must match x ({}), got {}",
                      op, arg, x.str(), t.str());
  TESSERA_CHECK_SHAPE(t.is_contiguous(), "{}: {} must be contiguous", op, arg);
}

// An f32 vector of `n` elements (any shape with that numel, contiguous).
void check_f32_vec(const char* op, const char* arg, const Tensor& t, int64_t n, const char* what) {
  TESSERA_CHECK_SHAPE(t.defined(), "{}: {} is missing", op, arg);
  TESSERA_CHECK_SHAPE(t.dtype() == DType::kF32 && t.numel() == n && t.is_contiguous(),
                      "{}: {} must be float32 with {} = {} elements, got {}", op, arg, what, n, t.str());
}

bool is_f32(const Tensor& x) {
  return x.dtype() == DType::kF32;
}

}  // namespace

void rmsnorm_fwd(const Tensor& x, const Tensor& gamma, float eps, const Tensor& y, const Tensor& rstd,
                 float gamma_offset) {
  const int64_t n = check_rows("rmsnorm_fwd", x), c = x.dim(-1);
  check_f32_vec("rmsnorm_fwd", "gamma", gamma, c, "C");
  check_like("rmsnorm_fwd", "y", y, x);
  check_f32_vec("rmsnorm_fwd", "rstd", rstd, n, "N");
  TESSERA_CHECK_SHAPE(eps >= 0, "rmsnorm_fwd: eps must be >= 0, got {}", eps);
  if (n == 0) return;
  backends::NormFwdArgs a{.x = x.data(),
                          .gamma = gamma.ptr<float>(),
                          .beta = nullptr,
                          .eps = eps,
                          .y = y.data(),
                          .mean = nullptr,
                          .rstd = rstd.ptr<float>(),
                          .rows = n,
                          .cols = c,
                          .gamma_offset = gamma_offset};
  const auto& k = *backends::kernels_for(x).norm;
  (is_f32(x) ? k.rmsnorm_fwd_f32 : k.rmsnorm_fwd_bf16)(a);
}

void rmsnorm_bwd(const Tensor& x, const Tensor& gamma, const Tensor& rstd, const Tensor& dy, const Tensor& dx,
                 const Tensor& dgamma, float gamma_offset, bool accumulate_dx) {
  const int64_t n = check_rows("rmsnorm_bwd", x), c = x.dim(-1);
  check_f32_vec("rmsnorm_bwd", "gamma", gamma, c, "C");
  check_f32_vec("rmsnorm_bwd", "rstd", rstd, n, "N");
  check_like("rmsnorm_bwd", "dy", dy, x);
  check_like("rmsnorm_bwd", "dx", dx, x);
  check_f32_vec("rmsnorm_bwd", "dgamma", dgamma, c, "C");
  if (n == 0) return;
  backends::NormBwdArgs a{x.data(),
                          gamma.ptr<float>(),
                          nullptr,
                          rstd.ptr<float>(),
                          dy.data(),
                          dx.data(),
                          dgamma.ptr<float>(),
                          nullptr,
                          n,
                          c,
                          gamma_offset,
                          accumulate_dx};
  const auto& k = *backends::kernels_for(x).norm;
  (is_f32(x) ? k.rmsnorm_bwd_f32 : k.rmsnorm_bwd_bf16)(a);
}

void layernorm_fwd(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, const Tensor& y,
                   const Tensor& mean, const Tensor& rstd) {
  const int64_t n = check_rows("layernorm_fwd", x), c = x.dim(-1);
  check_f32_vec("layernorm_fwd", "gamma", gamma, c, "C");
  if (beta.defined()) check_f32_vec("layernorm_fwd", "beta", beta, c, "C");
  check_like("layernorm_fwd", "y", y, x);
  check_f32_vec("layernorm_fwd", "mean", mean, n, "N");
  check_f32_vec("layernorm_fwd", "rstd", rstd, n, "N");
  TESSERA_CHECK_SHAPE(eps >= 0, "layernorm_fwd: eps must be >= 0, got {}", eps);
  if (n == 0) return;
  backends::NormFwdArgs a{x.data(),
                          gamma.ptr<float>(),
                          beta.defined() ? beta.ptr<float>() : nullptr,
                          eps,
                          y.data(),
                          mean.ptr<float>(),
                          rstd.ptr<float>(),
                          n,
                          c};
  const auto& k = *backends::kernels_for(x).norm;
  (is_f32(x) ? k.layernorm_fwd_f32 : k.layernorm_fwd_bf16)(a);
}

void layernorm_bwd(const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd,
                   const Tensor& dy, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta,
                   bool accumulate_dx) {
  const int64_t n = check_rows("layernorm_bwd", x), c = x.dim(-1);
  check_f32_vec("layernorm_bwd", "gamma", gamma, c, "C");
  check_f32_vec("layernorm_bwd", "mean", mean, n, "N");
  check_f32_vec("layernorm_bwd", "rstd", rstd, n, "N");
  check_like("layernorm_bwd", "dy", dy, x);
  check_like("layernorm_bwd", "dx", dx, x);
  check_f32_vec("layernorm_bwd", "dgamma", dgamma, c, "C");
  if (dbeta.defined()) check_f32_vec("layernorm_bwd", "dbeta", dbeta, c, "C");
  if (n == 0) return;
  backends::NormBwdArgs a{x.data(),
                          gamma.ptr<float>(),
                          mean.ptr<float>(),
                          rstd.ptr<float>(),
                          dy.data(),
                          dx.data(),
                          dgamma.ptr<float>(),
                          dbeta.defined() ? dbeta.ptr<float>() : nullptr,
                          n,
                          c,
                          0,
                          accumulate_dx};
  const auto& k = *backends::kernels_for(x).norm;
  (is_f32(x) ? k.layernorm_bwd_f32 : k.layernorm_bwd_bf16)(a);
}

// ---- byte counts ------------------------------------------------------------------------------

int64_t rmsnorm_fwd_bytes(int64_t n, int64_t c, DType dtype) {
  const int64_t e = static_cast<int64_t>(dtype_size(dtype));
  return 2 * n * c * e + 4 * c + 4 * n;  // x, y; gamma; rstd
}

int64_t rmsnorm_bwd_bytes(int64_t n, int64_t c, DType dtype) {
  const int64_t e = static_cast<int64_t>(dtype_size(dtype));
  return 3 * n * c * e + 4 * c + 4 * n + 8 * c;  // x, dy, dx; gamma; rstd; dgamma read and written
}

int64_t layernorm_fwd_bytes(int64_t n, int64_t c, DType dtype, bool has_beta) {
  const int64_t e = static_cast<int64_t>(dtype_size(dtype));
  return 2 * n * c * e + (has_beta ? 8 : 4) * c + 8 * n;  // x, y; gamma, beta; mean, rstd
}

int64_t layernorm_bwd_bytes(int64_t n, int64_t c, DType dtype, bool has_beta) {
  const int64_t e = static_cast<int64_t>(dtype_size(dtype));
  return 3 * n * c * e + 4 * c + 8 * n + (has_beta ? 16 : 8) * c;  // ...; dgamma, dbeta read and written
}

// ---- references -------------------------------------------------------------------------------

void rmsnorm_fwd_ref(const double* x, const double* gamma, double eps, int64_t n, int64_t c, double* y,
                     double* rstd) {
  for (int64_t r = 0; r < n; ++r) {
    const double* xr = x + r * c;
    double ss = 0;
    for (int64_t j = 0; j < c; ++j) ss += xr[j] * xr[j];
    const double rs = 1.0 / std::sqrt(ss / c + eps);
    rstd[r] = rs;
    for (int64_t j = 0; j < c; ++j) y[r * c + j] = xr[j] * rs * gamma[j];
  }
}

void rmsnorm_bwd_ref(const double* x, const double* gamma, double eps, const double* dy, int64_t n, int64_t c,
                     double* dx, double* dgamma) {
  std::vector<double> y(static_cast<size_t>(c)), rstd(1);
  for (int64_t j = 0; j < c; ++j) dgamma[j] = 0;
  for (int64_t r = 0; r < n; ++r) {
    const double* xr = x + r * c;
    const double* dyr = dy + r * c;
    rmsnorm_fwd_ref(xr, gamma, eps, 1, c, y.data(), rstd.data());
    const double rs = rstd[0];
    double dot = 0;  // sum of dy * gamma * xhat
    for (int64_t j = 0; j < c; ++j) dot += dyr[j] * gamma[j] * xr[j] * rs;
    for (int64_t j = 0; j < c; ++j) {
      const double xhat = xr[j] * rs;
      dx[r * c + j] = rs * (dyr[j] * gamma[j] - xhat * dot / c);
      dgamma[j] += dyr[j] * xhat;
    }
  }
}

void layernorm_fwd_ref(const double* x, const double* gamma, const double* beta, double eps, int64_t n,
                       int64_t c, double* y, double* mean, double* rstd) {
  for (int64_t r = 0; r < n; ++r) {
    const double* xr = x + r * c;
    double sum = 0;
    for (int64_t j = 0; j < c; ++j) sum += xr[j];
    const double mu = sum / c;
    double ss = 0;
    for (int64_t j = 0; j < c; ++j) ss += (xr[j] - mu) * (xr[j] - mu);
    const double rs = 1.0 / std::sqrt(ss / c + eps);
    mean[r] = mu;
    rstd[r] = rs;
    for (int64_t j = 0; j < c; ++j) y[r * c + j] = (xr[j] - mu) * rs * gamma[j] + (beta ? beta[j] : 0.0);
  }
}

void layernorm_bwd_ref(const double* x, const double* gamma, double eps, const double* dy, int64_t n,
                       int64_t c, double* dx, double* dgamma, double* dbeta) {
  std::vector<double> y(static_cast<size_t>(c));
  double mu, rs;
  for (int64_t j = 0; j < c; ++j) dgamma[j] = dbeta[j] = 0;
  for (int64_t r = 0; r < n; ++r) {
    const double* xr = x + r * c;
    const double* dyr = dy + r * c;
    layernorm_fwd_ref(xr, gamma, nullptr, eps, 1, c, y.data(), &mu, &rs);
    double sum_g = 0, sum_gx = 0;
    for (int64_t j = 0; j < c; ++j) {
      sum_g += dyr[j] * gamma[j];
      sum_gx += dyr[j] * gamma[j] * (xr[j] - mu) * rs;
    }
    for (int64_t j = 0; j < c; ++j) {
      const double xhat = (xr[j] - mu) * rs;
      dx[r * c + j] = rs * (dyr[j] * gamma[j] - sum_g / c - xhat * sum_gx / c);
      dgamma[j] += dyr[j] * xhat;
      dbeta[j] += dyr[j];
    }
  }
}

}  // namespace tessera::ops
