// Vocabulary-parallel op entries: argument checks, dispatch to the device's vocab-parallel kernels (and,
// for the shard's log-sum-exp, to its cross-entropy kernels), the O(N) combining steps, and the
// double references.
#include "tessera/ops/vocab_parallel.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tessera/backends/kernels.h"
#include "tessera/core/error.h"
#include "tessera/ops/cross_entropy.h"

namespace tessera::ops {

namespace {

bool is_float(DType d) {
  return d == DType::kF32 || d == DType::kBF16;
}

// Checks the shard [offset, offset + vocab_local) against V, and ids int32 [n] each in [lo, V)
// (lo = 0 for token ids; targets may be negative: ignored). Returns the kernel's view.
backends::VocabShard check_shard(const char* op, const char* what, const Tensor& ids, int64_t n,
                                 int64_t vocab_local, VocabShardRange r, bool allow_negative) {
  TESSERA_CHECK_SHAPE(r.offset >= 0 && vocab_local >= 1 && r.offset + vocab_local <= r.vocab,
                      "{}: the shard [{}, {}) does not lie in a vocabulary of {}", op, r.offset,
                      r.offset + vocab_local, r.vocab);
  TESSERA_CHECK_SHAPE(r.vocab <= std::numeric_limits<int32_t>::max(),
                      "{}: a vocabulary of {} does not fit int32 {}", op, r.vocab, what);
  TESSERA_CHECK_SHAPE(ids.dtype() == DType::kI32 && ids.shape() == Shape{n} && ids.is_contiguous(),
                      "{}: {} must be int32[{}], got {}", op, what, n, ids.str());
  const int32_t* p = ids.ptr<int32_t>();
  for (int64_t i = 0; i < n; ++i)
    TESSERA_CHECK_SHAPE((allow_negative || p[i] >= 0) && p[i] < r.vocab,
                        "{}: {}[{}] = {} is out of range for a vocabulary of {}", op, what, i, p[i], r.vocab);
  return {p, n, r.offset, vocab_local};
}

void check_f32(const char* op, const char* name, const Tensor& t, Shape want) {
  TESSERA_CHECK_SHAPE(t.dtype() == DType::kF32 && t.shape() == want && t.is_contiguous(),
                      "{}: {} must be a contiguous float32{}, got {}", op, name, want.str(), t.str());
}

void check_logits(const char* op, const Tensor& logits) {
  TESSERA_CHECK_SHAPE(logits.rank() == 2 && is_float(logits.dtype()) && logits.is_contiguous(),
                      "{}: logits must be a contiguous float32 or bfloat16 [N, Vl], got {}", op,
                      logits.str());
}

// Targets of -1 for every row, grown once per thread: the cross-entropy kernel's forward then
// computes only the log-sum-exp (loss 0 on ignored rows).
const int32_t* all_ignored(int64_t n) {
  thread_local std::vector<int32_t> ignored;
  if (static_cast<int64_t>(ignored.size()) < n) ignored.resize(static_cast<size_t>(n), -1);
  return ignored.data();
}

}  // namespace

void vocab_embedding_forward(const Tensor& table, const Tensor& ids, VocabShardRange r, const Tensor& out) {
  const char* op = "vocab_embedding_forward";
  TESSERA_CHECK_SHAPE(table.rank() == 2 && is_float(table.dtype()) && table.is_contiguous(),
                      "{}: table must be a contiguous float32 or bfloat16 [Vl, C], got {}", op, table.str());
  const int64_t c = table.dim(1);
  TESSERA_CHECK_SHAPE(out.rank() == 2 && out.dim(1) == c && is_float(out.dtype()) && out.is_contiguous(),
                      "{}: out must be a contiguous float32 or bfloat16 [N, {}], got {}", op, c, out.str());
  const auto s = check_shard(op, "ids", ids, out.dim(0), table.dim(0), r, false);
  backends::kernels_for(table).vocab_parallel->embedding_forward(s, c, table.data(), table.dtype(),
                                                                 out.data(), out.dtype());
}

void vocab_embedding_backward(const Tensor& dout, const Tensor& ids, VocabShardRange r,
                              const Tensor& dtable) {
  const char* op = "vocab_embedding_backward";
  TESSERA_CHECK_SHAPE(dtable.rank() == 2 && dtable.dtype() == DType::kF32 && dtable.is_contiguous(),
                      "{}: dtable must be a contiguous float32 [Vl, C], got {}", op, dtable.str());
  const int64_t c = dtable.dim(1);
  TESSERA_CHECK_SHAPE(dout.rank() == 2 && dout.dim(1) == c && is_float(dout.dtype()) && dout.is_contiguous(),
                      "{}: dout must be a contiguous float32 or bfloat16 [N, {}], got {}", op, c, dout.str());
  const auto s = check_shard(op, "ids", ids, dout.dim(0), dtable.dim(0), r, false);
  backends::kernels_for(dout).vocab_parallel->embedding_backward(s, c, dout.data(), dout.dtype(),
                                                                 dtable.ptr<float>());
}

void vocab_cross_entropy_partials(const Tensor& logits, const Tensor& targets, VocabShardRange r,
                                  const Tensor& lse, const Tensor& stats) {
  const char* op = "vocab_cross_entropy_partials";
  check_logits(op, logits);
  const int64_t n = logits.dim(0), vl = logits.dim(1);
  const auto s = check_shard(op, "targets", targets, n, vl, r, true);
  check_f32(op, "lse", lse, Shape{n});
  check_f32(op, "stats", stats, Shape{2, n});
  float* local_lse = stats.ptr<float>();
  float* target_logit = local_lse + n;
  const bool bf16 = logits.dtype() == DType::kBF16;
  // The shard's log-sum-exp is the cross-entropy kernel's forward with every target ignored; its
  // loss output (all 0) goes to the target row, which is filled next.
  const backends::CrossEntropyRows rows{logits.data(), bf16, all_ignored(n), n, vl, 0.0f};
  backends::kernels_for(logits).cross_entropy->forward(rows, target_logit, local_lse);
  for (int64_t i = 0; i < n; ++i) {
    lse.ptr<float>()[i] = local_lse[i];
    const int64_t t = s.ids[i] - r.offset;
    float xt = 0.0f;
    if (s.ids[i] >= 0 && t >= 0 && t < vl)
      xt = bf16 ? bf16_to_f32(logits.ptr<uint16_t>()[i * vl + t]) : logits.ptr<float>()[i * vl + t];
    target_logit[i] = xt;
  }
}

void vocab_cross_entropy_rescale(const Tensor& lse, const Tensor& stats) {
  const char* op = "vocab_cross_entropy_rescale";
  TESSERA_CHECK_SHAPE(lse.rank() == 1, "{}: lse must be float32[N], got {}", op, lse.str());
  const int64_t n = lse.dim(0);
  check_f32(op, "lse", lse, Shape{n});
  check_f32(op, "stats", stats, Shape{2, n});
  const float* m = lse.ptr<float>();
  float* s = stats.ptr<float>();
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  // sum-exp of the shard relative to the global max: exp(lse_shard - m), in double for the exp.
  for (int64_t i = 0; i < n; ++i)
    s[i] = s[i] == kNegInf ? 0.0f : static_cast<float>(std::exp(static_cast<double>(s[i]) - m[i]));
}

void vocab_cross_entropy_finish(const Tensor& targets, const Tensor& stats, float z_loss, const Tensor& lse,
                                const Tensor& loss) {
  const char* op = "vocab_cross_entropy_finish";
  TESSERA_CHECK_SHAPE(lse.rank() == 1, "{}: lse must be float32[N], got {}", op, lse.str());
  const int64_t n = lse.dim(0);
  check_f32(op, "lse", lse, Shape{n});
  check_f32(op, "loss", loss, Shape{n});
  check_f32(op, "stats", stats, Shape{2, n});
  TESSERA_CHECK_SHAPE(
      targets.dtype() == DType::kI32 && targets.shape() == Shape{n} && targets.is_contiguous(),
      "{}: targets must be int32[{}], got {}", op, n, targets.str());
  const float* s = stats.ptr<float>();
  const int32_t* t = targets.ptr<int32_t>();
  for (int64_t i = 0; i < n; ++i) {
    // lse = m + log(sum_shards exp(lse_shard - m)); loss as cross_entropy_forward forms it, in double.
    const double l = static_cast<double>(lse.ptr<float>()[i]) + std::log(static_cast<double>(s[i]));
    lse.ptr<float>()[i] = static_cast<float>(l);
    loss.ptr<float>()[i] = t[i] < 0 ? 0.0f : static_cast<float>(l - s[n + i] + z_loss * l * l);
  }
}

void vocab_cross_entropy_backward(const Tensor& logits, const Tensor& targets, VocabShardRange r,
                                  const Tensor& lse, const Tensor& dloss, const Tensor& dlogits,
                                  float z_loss) {
  const char* op = "vocab_cross_entropy_backward";
  check_logits(op, logits);
  const int64_t n = logits.dim(0), vl = logits.dim(1);
  const auto s = check_shard(op, "targets", targets, n, vl, r, true);
  check_f32(op, "lse", lse, Shape{n});
  check_f32(op, "dloss", dloss, Shape{n});
  check_dlogits(op, logits, dlogits);
  backends::kernels_for(logits).vocab_parallel->cross_entropy_backward(
      s, logits.data(), logits.dtype() == DType::kBF16, z_loss, lse.ptr<float>(), dloss.ptr<float>(),
      dlogits.data());
}

void vocab_embedding_forward_ref(const std::vector<double>& table, const std::vector<int32_t>& ids, int64_t c,
                                 int64_t offset, int64_t vocab_local, std::vector<double>& out) {
  out.assign(ids.size() * c, 0.0);
  for (size_t n = 0; n < ids.size(); ++n) {
    const int64_t row = ids[n] - offset;
    if (row < 0 || row >= vocab_local) continue;
    for (int64_t i = 0; i < c; ++i) out[n * c + i] = table[row * c + i];
  }
}

void vocab_embedding_backward_ref(const std::vector<double>& dout, const std::vector<int32_t>& ids, int64_t c,
                                  int64_t offset, int64_t vocab_local, std::vector<double>& dtable) {
  for (size_t n = 0; n < ids.size(); ++n) {
    const int64_t row = ids[n] - offset;
    if (row < 0 || row >= vocab_local) continue;
    for (int64_t i = 0; i < c; ++i) dtable[row * c + i] += dout[n * c + i];
  }
}

void vocab_cross_entropy_partials_ref(const std::vector<double>& logits, const std::vector<int32_t>& targets,
                                      int64_t offset, int64_t vocab_local, std::vector<double>& lse_local,
                                      std::vector<double>& target_logit) {
  const size_t n = targets.size();
  lse_local.assign(n, 0.0);
  target_logit.assign(n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    const double* x = logits.data() + i * vocab_local;
    const double m = *std::max_element(x, x + vocab_local);
    double s = 0;
    for (int64_t v = 0; v < vocab_local; ++v) s += std::exp(x[v] - m);
    lse_local[i] = m + std::log(s);
    const int64_t t = targets[i] - offset;
    if (targets[i] >= 0 && t >= 0 && t < vocab_local) target_logit[i] = x[t];
  }
}

void vocab_cross_entropy_backward_ref(const std::vector<double>& logits, const std::vector<int32_t>& targets,
                                      int64_t offset, int64_t vocab_local, double z_loss,
                                      const std::vector<double>& lse, const std::vector<double>& dloss,
                                      std::vector<double>& dlogits) {
  dlogits.assign(logits.size(), 0.0);
  for (size_t i = 0; i < targets.size(); ++i) {
    if (targets[i] < 0) continue;
    const double a = dloss[i] * (1.0 + 2.0 * z_loss * lse[i]);
    for (int64_t v = 0; v < vocab_local; ++v)
      dlogits[i * vocab_local + v] = a * std::exp(logits[i * vocab_local + v] - lse[i]);
    const int64_t t = targets[i] - offset;
    if (t >= 0 && t < vocab_local) dlogits[i * vocab_local + t] -= dloss[i];
  }
}

}  // namespace tessera::ops
