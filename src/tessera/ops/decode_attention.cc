// decode_attention op entry (checks, then the kernels) and the double reference.
#include "tessera/ops/decode_attention.h"

#include <algorithm>
#include <cmath>

#include "tessera/backends/kernels.h"
#include "tessera/core/error.h"

namespace tessera::ops {

namespace {
constexpr int64_t kMaxHeadDim = 256;  // the kernels' stack buffers

void check_index(const char* name, const Tensor& t, int64_t M) {
  TESSERA_CHECK_SHAPE(t.rank() == 1 && t.dim(0) == M && t.dtype() == DType::kI32 && t.is_contiguous(),
                      "decode_attention: {} must be contiguous int32 [{}] (one per query row), got {}", name,
                      M, t.str());
}
}  // namespace

void decode_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& slot,
                      const Tensor& length, const Tensor& out, const DecodeAttentionOptions& opt) {
  TESSERA_CHECK_SHAPE(
      q.rank() == 3 && (q.dtype() == DType::kF32 || q.dtype() == DType::kBF16) && q.is_contiguous(),
      "decode_attention: q must be contiguous float32 or bfloat16 [M, H, D], got {}", q.str());
  const int64_t M = q.dim(0), H = q.dim(1), D = q.dim(2);
  TESSERA_CHECK_SHAPE(k_cache.rank() == 4 && k_cache.dim(3) == D,
                      "decode_attention: k_cache must be [S, T, Hkv, {}], got {}", D, k_cache.str());
  const int64_t S = k_cache.dim(0), T = k_cache.dim(1), Hkv = k_cache.dim(2);
  TESSERA_CHECK_SHAPE(Hkv >= 1 && H % Hkv == 0,
                      "decode_attention: the {} query heads must be a multiple of the {} kv heads", H, Hkv);
  TESSERA_CHECK_SHAPE(D >= 1 && D <= kMaxHeadDim, "decode_attention: head dim D must be in [1, {}], got {}",
                      kMaxHeadDim, D);
  for (const auto& [name, t] :
       {std::pair<const char*, const Tensor*>{"k_cache", &k_cache}, {"v_cache", &v_cache}})
    TESSERA_CHECK_SHAPE(t->shape() == k_cache.shape() && t->dtype() == q.dtype() && t->is_contiguous(),
                        "decode_attention: {} must be contiguous {} {}, got {}", name, dtype_name(q.dtype()),
                        k_cache.shape().str(), t->str());
  TESSERA_CHECK_SHAPE(out.shape() == q.shape() && out.dtype() == q.dtype() && out.is_contiguous(),
                      "decode_attention: out must be contiguous like q ({}), got {}", q.str(), out.str());
  check_index("slot", slot, M);
  check_index("length", length, M);
  const float scale = opt.scale == 0.0f ? 1.0f / std::sqrt(static_cast<float>(D)) : opt.scale;
  TESSERA_CHECK_SHAPE(std::isfinite(scale) && scale > 0,
                      "decode_attention: scale must be finite and > 0, got {}", scale);
  TESSERA_CHECK_SHAPE(std::isfinite(opt.logits_soft_cap) && opt.logits_soft_cap >= 0,
                      "decode_attention: logits_soft_cap must be >= 0 (0 = off), got {}",
                      opt.logits_soft_cap);
  TESSERA_CHECK_SHAPE(opt.sliding_window >= 0, "decode_attention: sliding_window must be >= 0, got {}",
                      opt.sliding_window);
  const int32_t* s = slot.ptr<int32_t>();
  const int32_t* len = length.ptr<int32_t>();
  for (int64_t b = 0; b < M; ++b) {
    TESSERA_CHECK_SHAPE(s[b] >= 0 && s[b] < S, "decode_attention: slot[{}] = {} is outside [0, {})", b, s[b],
                        S);
    TESSERA_CHECK_SHAPE(len[b] >= 1 && len[b] <= T, "decode_attention: length[{}] = {} is outside [1, {}]", b,
                        len[b], T);
  }
  const bool sinks = opt.sinks.defined();
  TESSERA_CHECK_SHAPE(!sinks || (opt.sinks.shape() == Shape{H} && opt.sinks.dtype() == DType::kF32 &&
                                 opt.sinks.is_contiguous()),
                      "decode_attention: sinks must be contiguous float32 [{}], got {}", H,
                      sinks ? opt.sinks.str() : std::string());
  if (M == 0) return;
  const backends::DecodeAttentionProblem p{M,
                                           H,
                                           Hkv,
                                           D,
                                           S,
                                           T,
                                           q.dtype() == DType::kBF16,
                                           scale,
                                           opt.sliding_window,
                                           s,
                                           len,
                                           sinks ? opt.sinks.ptr<float>() : nullptr,
                                           opt.logits_soft_cap};
  backends::kernels_for(q).decode_attention->forward(p, q.data(), k_cache.data(), v_cache.data(), out.data());
}

double decode_attention_flops(const std::vector<int64_t>& visible_keys, int64_t H, int64_t D) {
  double keys = 0;
  for (int64_t n : visible_keys) keys += static_cast<double>(n);
  return 4.0 * keys * static_cast<double>(H) * static_cast<double>(D);
}

void decode_attention_ref(const DecodeAttentionDims& d, const DecodeAttentionOptions& opt,
                          const std::vector<double>& q, const std::vector<double>& k,
                          const std::vector<double>& v, const std::vector<int32_t>& slot,
                          const std::vector<int32_t>& length, std::vector<double>* out,
                          const std::vector<double>& sinks) {
  out->assign(d.M * d.H * d.D, 0.0);
  const double scale = opt.scale == 0 ? 1.0 / std::sqrt(static_cast<double>(d.D)) : opt.scale;
  const int64_t G = d.H / d.Hkv;
  for (int64_t b = 0; b < d.M; ++b) {
    const int64_t i = length[b] - 1;
    const int64_t j0 = opt.sliding_window > 0 ? std::max<int64_t>(0, i - opt.sliding_window + 1) : 0;
    for (int64_t h = 0; h < d.H; ++h) {
      const double* qh = &q[(b * d.H + h) * d.D];
      auto kv = [&](const std::vector<double>& c, int64_t j) {
        return &c[((slot[b] * d.T + j) * d.Hkv + h / G) * d.D];
      };
      std::vector<double> s(static_cast<size_t>(i + 1 - j0));
      double mx = -INFINITY;
      for (int64_t j = j0; j <= i; ++j) {
        double dot = 0;
        for (int64_t x = 0; x < d.D; ++x) dot += qh[x] * kv(k, j)[x];
        s[j - j0] = scale * dot;
        if (opt.logits_soft_cap > 0)
          s[j - j0] = opt.logits_soft_cap * std::tanh(s[j - j0] / opt.logits_soft_cap);
        mx = std::max(mx, s[j - j0]);
      }
      if (!sinks.empty()) mx = std::max(mx, sinks[static_cast<size_t>(h)]);
      double sum = sinks.empty() ? 0.0 : std::exp(sinks[static_cast<size_t>(h)] - mx);
      for (double& e : s) sum += (e = std::exp(e - mx));
      double* o = &(*out)[(b * d.H + h) * d.D];
      for (int64_t j = j0; j <= i; ++j)
        for (int64_t x = 0; x < d.D; ++x) o[x] += s[j - j0] / sum * kv(v, j)[x];
    }
  }
}

}  // namespace tessera::ops
