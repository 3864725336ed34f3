// Optimizer op entries: argument checks, the per-call AdamW scalars (bias corrections in double),
// dispatch to the device's optimizer kernels, global norm and clip scale, cost counts, double references.
#include "tessera/ops/optimizer.h"

#include <cmath>

#include "tessera/backends/kernels.h"
#include "tessera/core/error.h"

namespace tessera::ops {

namespace {

void check_f32(const char* op, const char* name, const Tensor& t, int64_t n) {
  TESSERA_CHECK_SHAPE(t.dtype() == DType::kF32 && t.numel() == n && t.is_contiguous(),
                      "{}: {} must be a contiguous float32 tensor of {} elements like param, got {}", op,
                      name, n, t.str());
}

uint16_t* check_copy(const char* op, const Tensor& param_bf16, int64_t n) {
  if (!param_bf16.defined()) return nullptr;
  TESSERA_CHECK_SHAPE(
      param_bf16.dtype() == DType::kBF16 && param_bf16.numel() == n && param_bf16.is_contiguous(),
      "{}: param_bf16 must be a contiguous bfloat16 tensor of {} elements, got {}", op, n, param_bf16.str());
  return param_bf16.ptr<uint16_t>();
}

}  // namespace

void adamw_update(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                  const AdamWHyperparams& hp, const Tensor& param_bf16) {
  const char* op = "adamw_update";
  const int64_t n = param.numel();
  check_f32(op, "param", param, n);
  check_f32(op, "grad", grad, n);
  check_f32(op, "m", m, n);
  check_f32(op, "v", v, n);
  uint16_t* copy = check_copy(op, param_bf16, n);
  TESSERA_CHECK(hp.step >= 1, ErrorKind::kConfig, "{}: step must be >= 1 (bias correction), got {}", op,
                hp.step);
  TESSERA_CHECK(hp.b1 >= 0 && hp.b1 < 1 && hp.b2 >= 0 && hp.b2 < 1, ErrorKind::kConfig,
                "{}: betas must lie in [0, 1), got b1 = {}, b2 = {}", op, hp.b1, hp.b2);
  // Bias corrections in double: 1 - b2^t is 1e-3 at t = 1 for b2 = 0.999, and f32 pow would lose
  // digits of it.
  const double t = static_cast<double>(hp.step);
  const double bc1 = 1.0 - std::pow(hp.b1, t), bc2 = 1.0 - std::pow(hp.b2, t);
  const backends::AdamWScalars s = {.grad_scale = static_cast<float>(hp.grad_scale),
                                    .decay = static_cast<float>(1.0 - hp.lr * hp.weight_decay),
                                    .b1 = static_cast<float>(hp.b1),
                                    .one_minus_b1 = static_cast<float>(1.0 - hp.b1),
                                    .b2 = static_cast<float>(hp.b2),
                                    .one_minus_b2 = static_cast<float>(1.0 - hp.b2),
                                    .inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2)),
                                    .eps = static_cast<float>(hp.eps),
                                    .step_size = static_cast<float>(hp.lr / bc1)};
  backends::kernels_for(param).optimizer->adamw(s, param.ptr<float>(), grad.ptr<float>(), m.ptr<float>(),
                                                v.ptr<float>(), copy, n);
}

void sgd_update(const Tensor& param, const Tensor& grad, const SgdHyperparams& hp, const Tensor& param_bf16) {
  const char* op = "sgd_update";
  const int64_t n = param.numel();
  check_f32(op, "param", param, n);
  check_f32(op, "grad", grad, n);
  uint16_t* copy = check_copy(op, param_bf16, n);
  backends::kernels_for(param).optimizer->sgd(static_cast<float>(hp.lr), static_cast<float>(hp.grad_scale),
                                              param.ptr<float>(), grad.ptr<float>(), copy, n);
}

double global_norm(std::span<const Tensor> grads) {
  double sum = 0;
  for (size_t i = 0; i < grads.size(); ++i) {
    const Tensor& g = grads[i];
    TESSERA_CHECK_SHAPE(g.dtype() == DType::kF32 && g.is_contiguous(),
                        "global_norm: gradient {} must be a contiguous float32 tensor, got {}", i, g.str());
    sum += backends::kernels_for(g).vector->sum_squares_f32(g.ptr<float>(), g.numel());
  }
  return std::sqrt(sum);
}

float clip_scale(double norm, double threshold) {
  return threshold > 0 && norm > threshold ? static_cast<float>(threshold / norm) : 1.0f;
}

// AdamW: 15 FLOPs per parameter (scale; m: 3; v: 4; sqrt, multiply, add; decay; divide, multiply,
// subtract). SGD: 3.
OptimizerCost adamw_cost(int64_t n, bool bf16_copy) {
  const double dn = static_cast<double>(n);
  return {15.0 * dn, (28.0 + (bf16_copy ? 2.0 : 0.0)) * dn};
}

OptimizerCost sgd_cost(int64_t n, bool bf16_copy) {
  const double dn = static_cast<double>(n);
  return {3.0 * dn, (12.0 + (bf16_copy ? 2.0 : 0.0)) * dn};
}

void adamw_update_ref(std::vector<double>& param, const std::vector<double>& grad, std::vector<double>& m,
                      std::vector<double>& v, const AdamWHyperparams& hp) {
  const double t = static_cast<double>(hp.step);
  const double bc1 = 1.0 - std::pow(hp.b1, t), bc2 = 1.0 - std::pow(hp.b2, t);
  for (size_t i = 0; i < param.size(); ++i) {
    const double g = hp.grad_scale * grad[i];
    param[i] -= hp.lr * hp.weight_decay * param[i];
    m[i] = hp.b1 * m[i] + (1 - hp.b1) * g;
    v[i] = hp.b2 * v[i] + (1 - hp.b2) * g * g;
    param[i] -= hp.lr * (m[i] / bc1) / (std::sqrt(v[i] / bc2) + hp.eps);
  }
}

void sgd_update_ref(std::vector<double>& param, const std::vector<double>& grad, const SgdHyperparams& hp) {
  for (size_t i = 0; i < param.size(); ++i) param[i] -= hp.lr * hp.grad_scale * grad[i];
}

double global_norm_ref(const std::vector<std::vector<double>>& grads) {
  double sum = 0;
  for (const auto& g : grads)
    for (double x : g) sum += x * x;
  return std::sqrt(sum);
}

}  // namespace tessera::ops
