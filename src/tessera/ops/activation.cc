#include "tessera/ops/activation.h"

#include <cmath>
#include <limits>

#include "tessera/backends/kernels.h"
#include "tessera/core/error.h"

namespace tessera::ops {

namespace {

constexpr double kPi = 3.14159265358979323846;

void check_float_dtype(const char* op, const char* arg, const Tensor& t) {
  TESSERA_CHECK_SHAPE(t.dtype() == DType::kF32 || t.dtype() == DType::kBF16,
                      "{}: {} must be float32 or bfloat16, got {}", op, arg, t.str());
}

void check_like(const char* op, const char* arg, const Tensor& t, const Tensor& ref, const char* ref_name) {
  TESSERA_CHECK_SHAPE(t.defined(), "{}: {} is missing", op, arg);
  TESSERA_CHECK_SHAPE(t.shape() == ref.shape() && t.dtype() == ref.dtype(),
                      "{}: {} must match {} ({}), got {}", op, arg, ref_name, ref.str(), t.str());
}

// Row view of a gated-unit operand [..., F]: a rank-2 tensor with unit column stride may have any
// row stride >= F; other ranks must be contiguous.
backends::ConstRows rows_of(const char* op, const char* arg, const Tensor& t) {
  TESSERA_CHECK_SHAPE(t.rank() >= 1, "{}: {} must have a last dimension F, got {}", op, arg, t.str());
  const int64_t f = t.dim(-1);
  const bool strided_ok = t.rank() == 2 && (t.stride(1) == 1 || f == 1) && t.stride(0) >= f;
  TESSERA_CHECK_SHAPE(strided_ok || t.is_contiguous(),
                      "{}: {} must be contiguous (or [N, F] with unit column stride), got {}", op, arg,
                      t.str());
  return {t.data(), t.rank() == 2 && t.dim(0) > 1 ? t.stride(0) : f};
}

backends::MutRows mut_rows_of(const char* op, const char* arg, const Tensor& t) {
  backends::ConstRows r = rows_of(op, arg, t);
  return {t.data(), r.ld};
}

}  // namespace

Activation activation_from_name(std::string_view name) {
  if (name == "silu" || name == "swish") return Activation::kSilu;
  if (name == "gelu") return Activation::kGeluTanh;
  if (name == "gelu_exact") return Activation::kGeluErf;
  if (name == "linear") return Activation::kLinear;
  if (name == "swish_1702") return Activation::kSwish1702;
  fail(ErrorKind::kConfig,
       "unknown activation '{}'; expected one of: silu (or swish), gelu (tanh approximation, as "
       "jax.nn.gelu), gelu_exact (erf, Hugging Face's \"gelu\"), linear, swish_1702 (GPT-OSS)",
       name);
}

std::string_view activation_name(Activation act) {
  switch (act) {
    case Activation::kLinear:
      return "linear";
    case Activation::kSilu:
      return "silu";
    case Activation::kGeluTanh:
      return "gelu";
    case Activation::kGeluErf:
      return "gelu_exact";
    case Activation::kSwish1702:
      return "swish_1702";
  }
  return "?";
}

void act_fwd(Activation act, const Tensor& x, const Tensor& y) {
  check_float_dtype("act_fwd", "x", x);
  check_like("act_fwd", "y", y, x, "x");
  TESSERA_CHECK_SHAPE(x.is_contiguous() && y.is_contiguous(), "act_fwd: x and y must be contiguous");
  const auto& k = *backends::kernels_for(x).activation;
  if (x.dtype() == DType::kF32)
    k.act_fwd_f32(act, x.ptr<float>(), y.ptr<float>(), x.numel());
  else
    k.act_fwd_bf16(act, x.ptr<uint16_t>(), y.ptr<uint16_t>(), x.numel());
}

void act_bwd(Activation act, const Tensor& x, const Tensor& dy, const Tensor& dx) {
  check_float_dtype("act_bwd", "x", x);
  check_like("act_bwd", "dy", dy, x, "x");
  check_like("act_bwd", "dx", dx, x, "x");
  TESSERA_CHECK_SHAPE(x.is_contiguous() && dy.is_contiguous() && dx.is_contiguous(),
                      "act_bwd: x, dy and dx must be contiguous");
  const auto& k = *backends::kernels_for(x).activation;
  if (x.dtype() == DType::kF32)
    k.act_bwd_f32(act, x.ptr<float>(), dy.ptr<float>(), dx.ptr<float>(), x.numel());
  else
    k.act_bwd_bf16(act, x.ptr<uint16_t>(), dy.ptr<uint16_t>(), dx.ptr<uint16_t>(), x.numel());
}

void scale(const Tensor& x, float a, const Tensor& y) {
  check_float_dtype("scale", "x", x);
  check_like("scale", "y", y, x, "x");
  TESSERA_CHECK_SHAPE(x.is_contiguous() && y.is_contiguous(), "scale: x and y must be contiguous");
  TESSERA_CHECK_SHAPE(std::isfinite(a), "scale: the factor must be finite, got {}", a);
  const auto& k = *backends::kernels_for(x).activation;
  if (x.dtype() == DType::kF32)
    k.scale_f32(x.ptr<float>(), y.ptr<float>(), a, x.numel());
  else
    k.scale_bf16(x.ptr<uint16_t>(), y.ptr<uint16_t>(), a, x.numel());
}

void soft_cap_fwd(const Tensor& x, float cap, const Tensor& y) {
  check_float_dtype("soft_cap_fwd", "x", x);
  check_like("soft_cap_fwd", "y", y, x, "x");
  TESSERA_CHECK_SHAPE(x.is_contiguous() && y.is_contiguous(), "soft_cap_fwd: x and y must be contiguous");
  TESSERA_CHECK_SHAPE(std::isfinite(cap) && cap > 0, "soft_cap_fwd: cap must be finite and > 0, got {}", cap);
  const auto& k = *backends::kernels_for(x).activation;
  if (x.dtype() == DType::kF32)
    k.soft_cap_f32(x.ptr<float>(), y.ptr<float>(), cap, x.numel());
  else
    k.soft_cap_bf16(x.ptr<uint16_t>(), y.ptr<uint16_t>(), cap, x.numel());
}

void soft_cap_bwd(const Tensor& x, const Tensor& dy, float cap, const Tensor& dx) {
  check_float_dtype("soft_cap_bwd", "x", x);
  check_like("soft_cap_bwd", "dy", dy, x, "x");
  check_like("soft_cap_bwd", "dx", dx, x, "x");
  TESSERA_CHECK_SHAPE(x.is_contiguous() && dy.is_contiguous() && dx.is_contiguous(),
                      "soft_cap_bwd: x, dy and dx must be contiguous");
  TESSERA_CHECK_SHAPE(std::isfinite(cap) && cap > 0, "soft_cap_bwd: cap must be finite and > 0, got {}", cap);
  const auto& k = *backends::kernels_for(x).activation;
  if (x.dtype() == DType::kF32)
    k.soft_cap_bwd_f32(x.ptr<float>(), dy.ptr<float>(), dx.ptr<float>(), cap, x.numel());
  else
    k.soft_cap_bwd_bf16(x.ptr<uint16_t>(), dy.ptr<uint16_t>(), dx.ptr<uint16_t>(), cap, x.numel());
}

double soft_cap_ref(double x, double cap) {
  return cap * std::tanh(x / cap);
}

double soft_cap_grad_ref(double x, double cap) {
  const double t = std::tanh(x / cap);
  return 1 - t * t;
}

namespace {
backends::GluClamp clamp_of(const char* op, GluOptions opt) {
  TESSERA_CHECK_SHAPE(opt.limit >= 0 && std::isfinite(opt.up_offset), "{}: limit {} must be >= 0 (0: none)",
                      op, opt.limit);
  return {.limit = opt.limit > 0 ? opt.limit : std::numeric_limits<float>::infinity(),
          .up_offset = opt.up_offset};
}
}  // namespace

void glu_fwd(Activation act, const Tensor& gate, const Tensor& up, const Tensor& out, GluOptions opt) {
  check_float_dtype("glu_fwd", "gate", gate);
  check_like("glu_fwd", "up", up, gate, "gate");
  check_like("glu_fwd", "out", out, gate, "gate");
  const int64_t f = gate.rank() >= 1 ? gate.dim(-1) : 1;
  backends::GluFwdArgs a{act,
                         f > 0 ? gate.numel() / f : 0,
                         f,
                         rows_of("glu_fwd", "gate", gate),
                         rows_of("glu_fwd", "up", up),
                         mut_rows_of("glu_fwd", "out", out),
                         clamp_of("glu_fwd", opt)};
  if (a.rows == 0 || a.cols == 0) return;
  const auto& k = *backends::kernels_for(gate).activation;
  (gate.dtype() == DType::kF32 ? k.glu_fwd_f32 : k.glu_fwd_bf16)(a);
}

void glu_bwd(Activation act, const Tensor& gate, const Tensor& up, const Tensor& dout, const Tensor& dgate,
             const Tensor& dup, GluOptions opt) {
  check_float_dtype("glu_bwd", "gate", gate);
  check_like("glu_bwd", "up", up, gate, "gate");
  check_like("glu_bwd", "dout", dout, gate, "gate");
  check_like("glu_bwd", "dgate", dgate, gate, "gate");
  check_like("glu_bwd", "dup", dup, gate, "gate");
  const int64_t f = gate.rank() >= 1 ? gate.dim(-1) : 1;
  backends::GluBwdArgs a{act,
                         f > 0 ? gate.numel() / f : 0,
                         f,
                         rows_of("glu_bwd", "gate", gate),
                         rows_of("glu_bwd", "up", up),
                         rows_of("glu_bwd", "dout", dout),
                         mut_rows_of("glu_bwd", "dgate", dgate),
                         mut_rows_of("glu_bwd", "dup", dup),
                         clamp_of("glu_bwd", opt)};
  if (a.rows == 0 || a.cols == 0) return;
  const auto& k = *backends::kernels_for(gate).activation;
  (gate.dtype() == DType::kF32 ? k.glu_bwd_f32 : k.glu_bwd_bf16)(a);
}

int64_t act_fwd_bytes(int64_t n, DType dtype) {
  return 2 * n * static_cast<int64_t>(dtype_size(dtype));
}
int64_t act_bwd_bytes(int64_t n, DType dtype) {
  return 3 * n * static_cast<int64_t>(dtype_size(dtype));
}
int64_t glu_fwd_bytes(int64_t n, int64_t f, DType dtype) {
  return 3 * n * f * static_cast<int64_t>(dtype_size(dtype));
}
int64_t glu_bwd_bytes(int64_t n, int64_t f, DType dtype) {
  return 5 * n * f * static_cast<int64_t>(dtype_size(dtype));
}

// ---- references -------------------------------------------------------------------------------
// In double. The tanh gelu is evaluated through the identity 0.5 (1 + tanh u) = 1 / (1 + e^-2u):
// the textbook 1 + tanh(u) cancels for u << 0 even in double (at u = -17 it keeps two digits),
// and the tests need a reference accurate in relative terms over the whole range. (The kernels
// make the same choice in f32; activation_test.cc checks the textbook value at x = 1.) Phi uses
// erfc for the same reason.

namespace {
constexpr double kGeluCubic = 0.044715;
double gelu_u(double x) {
  return std::sqrt(2.0 / kPi) * (x + kGeluCubic * x * x * x);
}
double sigmoid(double z) {
  return 1.0 / (1.0 + std::exp(-z));
}
double normal_cdf(double x) {
  return 0.5 * std::erfc(-x / std::sqrt(2.0));
}
double normal_pdf(double x) {
  return std::exp(-0.5 * x * x) / std::sqrt(2.0 * kPi);
}
}  // namespace

double act_ref(Activation act, double x) {
  switch (act) {
    case Activation::kLinear:
      return x;
    case Activation::kSilu:
      return x * sigmoid(x);
    case Activation::kGeluTanh:
      return x * sigmoid(2.0 * gelu_u(x));  // = 0.5 x (1 + tanh u)
    case Activation::kGeluErf:
      return x * normal_cdf(x);
    case Activation::kSwish1702:
      return x * sigmoid(1.702 * x);
  }
  return 0;
}

double act_grad_ref(Activation act, double x) {
  switch (act) {
    case Activation::kLinear:
      return 1.0;
    case Activation::kSilu: {
      const double s = sigmoid(x);
      return s + x * s * (1.0 - s);
    }
    case Activation::kGeluTanh: {
      // d/dx [0.5 x (1 + tanh u)] = 0.5 (1 + t) + 0.5 x (1 - t^2) u', with 0.5 (1 + t) = s and
      // 1 - t^2 = 4 s (1 - s), s = sigmoid(2u).
      const double s = sigmoid(2.0 * gelu_u(x));
      const double du = std::sqrt(2.0 / kPi) * (1.0 + 3.0 * kGeluCubic * x * x);
      return s + 2.0 * x * s * (1.0 - s) * du;
    }
    case Activation::kGeluErf:
      return normal_cdf(x) + x * normal_pdf(x);
    case Activation::kSwish1702: {
      const double s = sigmoid(1.702 * x);
      return s + 1.702 * x * s * (1.0 - s);
    }
  }
  return 0;
}

void act_fwd_ref(Activation act, const double* x, double* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = act_ref(act, x[i]);
}

void act_bwd_ref(Activation act, const double* x, const double* dy, double* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * act_grad_ref(act, x[i]);
}

void glu_fwd_ref(Activation act, const double* gate, const double* up, double* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = act_ref(act, gate[i]) * up[i];
}

void glu_bwd_ref(Activation act, const double* gate, const double* up, const double* dout, double* dgate,
                 double* dup, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    dgate[i] = dout[i] * up[i] * act_grad_ref(act, gate[i]);
    dup[i] = dout[i] * act_ref(act, gate[i]);
  }
}

}  // namespace tessera::ops
