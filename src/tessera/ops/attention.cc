#include "tessera/ops/attention.h"

#include <algorithm>
#include <cmath>

#include "tessera/backends/kernels.h"
#include "tessera/core/error.h"

namespace tessera::ops {

namespace {

// Checks one [B, T, heads, D] activation tensor.
void check_activation(const char* op, const char* name, const Tensor& t, int64_t B, int64_t T, int64_t heads,
                      int64_t D, DType dtype) {
  TESSERA_CHECK_SHAPE(t.rank() == 4 && t.dim(0) == B && t.dim(1) == T && t.dim(2) == heads && t.dim(3) == D,
                      "{}: {} must be [{}, {}, {}, {}], got {}", op, name, B, T, heads, D, t.shape().str());
  TESSERA_CHECK_SHAPE(t.dtype() == dtype, "{}: {} must be {} like q, got {}", op, name, dtype_name(dtype),
                      dtype_name(t.dtype()));
  TESSERA_CHECK_SHAPE(t.is_contiguous(), "{}: {} must be contiguous", op, name);
}

// Checks q, k, v, lse and the options; returns the kernel's problem description.
backends::AttentionProblem check_problem(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                                         const Tensor& lse, const AttentionOptions& opt) {
  TESSERA_CHECK_SHAPE(q.rank() == 4, "{}: q must be [B, T, H, D], got {}", op, q.shape().str());
  TESSERA_CHECK_SHAPE(q.dtype() == DType::kF32 || q.dtype() == DType::kBF16,
                      "{}: q must be float32 or bfloat16, got {}", op, dtype_name(q.dtype()));
  const int64_t B = q.dim(0), T = q.dim(1), H = q.dim(2), D = q.dim(3);
  TESSERA_CHECK_SHAPE(k.rank() == 4, "{}: k must be [B, T, Hkv, D], got {}", op, k.shape().str());
  const int64_t Hkv = k.dim(2);
  TESSERA_CHECK_SHAPE(Hkv >= 1 && H % Hkv == 0,
                      "{}: the {} query heads must be a multiple of the {} kv heads", op, H, Hkv);
  TESSERA_CHECK_SHAPE(D >= 1, "{}: head dimension D must be >= 1, got {}", op, D);
  check_activation(op, "q", q, B, T, H, D, q.dtype());
  check_activation(op, "k", k, B, T, Hkv, D, q.dtype());
  check_activation(op, "v", v, B, T, Hkv, D, q.dtype());
  TESSERA_CHECK_SHAPE(lse.rank() == 3 && lse.dim(0) == B && lse.dim(1) == H && lse.dim(2) == T,
                      "{}: lse must be [{}, {}, {}] (B, H, T), got {}", op, B, H, T, lse.shape().str());
  TESSERA_CHECK_SHAPE(lse.dtype() == DType::kF32 && lse.is_contiguous(),
                      "{}: lse must be contiguous float32, got {}", op, lse.str());
  const float scale = opt.scale == 0.0f ? 1.0f / std::sqrt(static_cast<float>(D)) : opt.scale;
  TESSERA_CHECK_SHAPE(std::isfinite(scale) && scale > 0, "{}: scale must be finite and > 0, got {}", op,
                      scale);
  TESSERA_CHECK_SHAPE(opt.sliding_window >= 0, "{}: sliding_window must be >= 0, got {}", op,
                      opt.sliding_window);
  TESSERA_CHECK_SHAPE(std::isfinite(opt.logits_soft_cap) && opt.logits_soft_cap >= 0,
                      "{}: logits_soft_cap must be >= 0 (0 = off), got {}", op, opt.logits_soft_cap);
  TESSERA_CHECK_SHAPE(opt.block_q >= 0 && opt.block_k >= 0, "{}: block sizes must be >= 0, got {} and {}", op,
                      opt.block_q, opt.block_k);
  TESSERA_CHECK_SHAPE(T < (int64_t{1} << 30), "{}: T must be < 2^30, got {}", op, T);
  if (opt.sinks.defined())
    TESSERA_CHECK_SHAPE(
        opt.sinks.dtype() == DType::kF32 && opt.sinks.shape() == Shape{H} && opt.sinks.is_contiguous(),
        "{}: sinks must be float32 [{}] (one per query head), got {}", op, H, opt.sinks.str());
  const Tensor& seg = opt.segment_ids;
  if (seg.defined()) {
    TESSERA_CHECK_SHAPE(seg.rank() == 2 && seg.dim(0) == B && seg.dim(1) == T && seg.dtype() == DType::kI32 &&
                            seg.is_contiguous(),
                        "{}: segment_ids must be contiguous int32 [{}, {}], got {}", op, B, T, seg.str());
  }
  return backends::AttentionProblem{B,
                                    T,
                                    H,
                                    Hkv,
                                    D,
                                    q.dtype() == DType::kBF16,
                                    opt.causal,
                                    scale,
                                    opt.sliding_window < T ? opt.sliding_window : 0,  // W >= T hides nothing
                                    opt.logits_soft_cap,
                                    seg.defined() ? seg.ptr<int32_t>() : nullptr,
                                    opt.block_q,
                                    opt.block_k};
}

}  // namespace

void attention_fwd(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                   const AttentionOptions& opt) {
  const backends::AttentionProblem p = check_problem("attention_fwd", q, k, v, lse, opt);
  check_activation("attention_fwd", "out", out, p.B, p.T, p.H, p.D, q.dtype());
  if (p.B == 0 || p.T == 0) return;
  const backends::AttentionKernels& kern = *backends::kernels_for(q).attention;
  kern.forward(p, q.data(), k.data(), v.data(), out.data(), lse.ptr<float>());
  if (opt.sinks.defined()) kern.apply_sinks(p, opt.sinks.ptr<float>(), out.data(), lse.ptr<float>());
}

void attention_sinks_bwd(const Tensor& dout, const Tensor& out, const Tensor& lse, const Tensor& dsinks,
                         const AttentionOptions& opt) {
  const char* op = "attention_sinks_bwd";
  TESSERA_CHECK_SHAPE(out.rank() == 4 && (out.dtype() == DType::kF32 || out.dtype() == DType::kBF16),
                      "{}: out must be [B, T, H, D] float32 or bfloat16, got {}", op, out.str());
  const int64_t B = out.dim(0), T = out.dim(1), H = out.dim(2), D = out.dim(3);
  check_activation(op, "dout", dout, B, T, H, D, out.dtype());
  check_activation(op, "out", out, B, T, H, D, out.dtype());
  TESSERA_CHECK_SHAPE(lse.dtype() == DType::kF32 && lse.shape() == (Shape{B, H, T}) && lse.is_contiguous(),
                      "{}: lse must be float32 [{}, {}, {}], got {}", op, B, H, T, lse.str());
  for (const Tensor* t : {&opt.sinks, &dsinks})
    TESSERA_CHECK_SHAPE(
        t->defined() && t->dtype() == DType::kF32 && t->shape() == Shape{H} && t->is_contiguous(),
        "{}: sinks and dsinks must be float32 [{}], got {}", op, H, t->defined() ? t->str() : "none");
  if (B == 0 || T == 0) return;
  backends::AttentionProblem p{};
  p.B = B, p.T = T, p.H = H, p.Hkv = H, p.D = D, p.bf16 = out.dtype() == DType::kBF16;
  backends::kernels_for(out).attention->sinks_backward(p, opt.sinks.ptr<float>(), dout.data(), out.data(),
                                                       lse.ptr<float>(), dsinks.ptr<float>());
}

void attention_bwd(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                   const Tensor& lse, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                   const AttentionOptions& opt) {
  const char* op = "attention_bwd";
  const backends::AttentionProblem p = check_problem(op, q, k, v, lse, opt);
  check_activation(op, "out", out, p.B, p.T, p.H, p.D, q.dtype());
  check_activation(op, "dout", dout, p.B, p.T, p.H, p.D, q.dtype());
  check_activation(op, "dq", dq, p.B, p.T, p.H, p.D, q.dtype());
  check_activation(op, "dk", dk, p.B, p.T, p.Hkv, p.D, q.dtype());
  check_activation(op, "dv", dv, p.B, p.T, p.Hkv, p.D, q.dtype());
  if (p.B == 0 || p.T == 0) return;
  backends::kernels_for(dout).attention->backward(p, dout.data(), q.data(), k.data(), v.data(), out.data(),
                                                  lse.ptr<float>(), dq.data(), dk.data(), dv.data());
}

double attention_fwd_flops(int64_t B, int64_t T, int64_t H, int64_t D, int64_t window, bool causal) {
  const double t = static_cast<double>(T), per_pair = 4.0 * B * H * D;  // QK^T and PV: 2 FLOPs each per d
  if (window > 0 && window < T) {
    const double w = static_cast<double>(window), band = t * w - w * w / 2;
    return per_pair * (causal ? band : 2 * band);
  }
  return per_pair * t * t * (causal ? 0.5 : 1.0);
}

double attention_bwd_flops(int64_t B, int64_t T, int64_t H, int64_t D, int64_t window, bool causal) {
  return 2.5 * attention_fwd_flops(B, T, H, D, window, causal);
}

// ---------------------------------------------------------------------------------------------
// Reference in double.

namespace {

bool visible_ref(const AttentionOptions& opt, const int32_t* seg_b, int64_t i, int64_t j) {
  const int64_t W = opt.sliding_window;
  if (opt.causal && j > i) return false;
  if (W > 0 && !(j > i - W)) return false;
  if (W > 0 && !opt.causal && !(j < i + W)) return false;
  if (seg_b && seg_b[i] != seg_b[j]) return false;
  return true;
}

// One query row of the forward: the logits s_j (and tanh t_j when capped) of every key j, and
// the probabilities p_j; hidden keys get p_j = 0. Returns the logsumexp.
double score_row_ref(const AttentionDims& d, const AttentionOptions& opt, const std::vector<double>& q,
                     const std::vector<double>& k, int64_t b, int64_t h, int64_t i, std::vector<double>* t,
                     std::vector<double>* p) {
  const int32_t* seg_b = opt.segment_ids.defined() ? opt.segment_ids.ptr<int32_t>() + b * d.T : nullptr;
  const double scale = opt.scale == 0 ? 1.0 / std::sqrt(static_cast<double>(d.D)) : opt.scale;
  const double cap = opt.logits_soft_cap;
  const int64_t hk = h / (d.H / d.Hkv);
  const double* qi = &q[((b * d.T + i) * d.H + h) * d.D];
  double mx = -INFINITY;
  std::vector<double> s(d.T, -INFINITY);
  for (int64_t j = 0; j < d.T; ++j) {
    if (!visible_ref(opt, seg_b, i, j)) continue;
    const double* kj = &k[((b * d.T + j) * d.Hkv + hk) * d.D];
    double dot = 0;
    for (int64_t x = 0; x < d.D; ++x) dot += qi[x] * kj[x];
    s[j] = scale * dot;
    if (cap > 0) {
      (*t)[j] = std::tanh(s[j] / cap);
      s[j] = cap * (*t)[j];
    }
    mx = std::max(mx, s[j]);
  }
  const bool sink = opt.sinks.defined();
  const double sink_logit = sink ? static_cast<double>(opt.sinks.ptr<float>()[h]) : 0.0;
  if (sink) mx = std::max(mx, sink_logit);
  double sum = sink ? std::exp(sink_logit - mx) : 0.0;
  for (int64_t j = 0; j < d.T; ++j) sum += std::isinf(s[j]) ? 0.0 : std::exp(s[j] - mx);
  const double lse = mx + std::log(sum);
  for (int64_t j = 0; j < d.T; ++j) (*p)[j] = std::isinf(s[j]) ? 0.0 : std::exp(s[j] - lse);
  return lse;
}

}  // namespace

void attention_ref(const AttentionDims& d, const AttentionOptions& opt, const std::vector<double>& q,
                   const std::vector<double>& k, const std::vector<double>& v, std::vector<double>* out,
                   std::vector<double>* lse) {
  out->assign(d.B * d.T * d.H * d.D, 0.0);
  lse->assign(d.B * d.H * d.T, 0.0);
  std::vector<double> t(d.T, 0.0), p(d.T, 0.0);
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t h = 0; h < d.H; ++h)
      for (int64_t i = 0; i < d.T; ++i) {
        (*lse)[(b * d.H + h) * d.T + i] = score_row_ref(d, opt, q, k, b, h, i, &t, &p);
        double* o = &(*out)[((b * d.T + i) * d.H + h) * d.D];
        const int64_t hk = h / (d.H / d.Hkv);
        for (int64_t j = 0; j < d.T; ++j)
          for (int64_t x = 0; x < d.D; ++x) o[x] += p[j] * v[((b * d.T + j) * d.Hkv + hk) * d.D + x];
      }
}

// With s_j the logits and p = softmax(s): dp_j = dout . v_j, ds_j = p_j (dp_j - sum_l p_l dp_l);
// through the cap, d(scale q.k_j) = ds_j (1 - t_j^2); then dq = scale sum_j ds_j k_j,
// dk_j += scale ds_j q, dv_j += p_j dout.
void attention_bwd_ref(const AttentionDims& d, const AttentionOptions& opt, const std::vector<double>& dout,
                       const std::vector<double>& q, const std::vector<double>& k,
                       const std::vector<double>& v, std::vector<double>* dq, std::vector<double>* dk,
                       std::vector<double>* dv, std::vector<double>* dq_terms, std::vector<double>* dk_terms,
                       std::vector<double>* dsinks) {
  if (dsinks) dsinks->assign(static_cast<size_t>(d.H), 0.0);
  dq->assign(d.B * d.T * d.H * d.D, 0.0);
  dk->assign(d.B * d.T * d.Hkv * d.D, 0.0);
  dv->assign(d.B * d.T * d.Hkv * d.D, 0.0);
  if (dq_terms) dq_terms->assign(dq->size(), 0.0);
  if (dk_terms) dk_terms->assign(dk->size(), 0.0);
  const double scale = opt.scale == 0 ? 1.0 / std::sqrt(static_cast<double>(d.D)) : opt.scale;
  std::vector<double> t(d.T, 0.0), p(d.T, 0.0), dp(d.T, 0.0);
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t h = 0; h < d.H; ++h)
      for (int64_t i = 0; i < d.T; ++i) {
        const double lse = score_row_ref(d, opt, q, k, b, h, i, &t, &p);
        const int64_t hk = h / (d.H / d.Hkv), qi = ((b * d.T + i) * d.H + h) * d.D;
        double dsum = 0;
        for (int64_t j = 0; j < d.T; ++j) {
          dp[j] = 0;
          for (int64_t x = 0; x < d.D; ++x) dp[j] += dout[qi + x] * v[((b * d.T + j) * d.Hkv + hk) * d.D + x];
          dsum += p[j] * dp[j];
        }
        // The sink's value is zero (its dp is 0): its logit's gradient is p_sink (0 - dsum).
        if (dsinks) (*dsinks)[h] -= std::exp(static_cast<double>(opt.sinks.ptr<float>()[h]) - lse) * dsum;
        for (int64_t j = 0; j < d.T; ++j) {
          if (p[j] == 0) continue;
          double ds = p[j] * (dp[j] - dsum);
          if (opt.logits_soft_cap > 0) ds *= 1 - t[j] * t[j];
          const int64_t kj = ((b * d.T + j) * d.Hkv + hk) * d.D;
          for (int64_t x = 0; x < d.D; ++x) {
            (*dq)[qi + x] += scale * ds * k[kj + x];
            (*dk)[kj + x] += scale * ds * q[qi + x];
            (*dv)[kj + x] += p[j] * dout[qi + x];
          }
          const double mag = scale * p[j] * (std::abs(dp[j]) + std::abs(dsum));
          for (int64_t x = 0; x < d.D; ++x) {
            if (dq_terms) (*dq_terms)[qi + x] += mag * std::abs(k[kj + x]);
            if (dk_terms) (*dk_terms)[kj + x] += mag * std::abs(q[qi + x]);
          }
        }
      }
}

}  // namespace tessera::ops
