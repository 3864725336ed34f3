// Cross-entropy op entries: argument checks, dispatch to the device's cross-entropy kernels
// (backends/kernels.h), the mean helper, cost counts and the double references.
#include "tessera/ops/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tessera/backends/kernels.h"
#include "tessera/core/error.h"

namespace tessera::ops {

namespace {

// Checks logits [N, V] (f32|bf16, contiguous), targets int32 [N] with every t < V, and each f32 [N]
// vector in `rows`; returns the kernel's view of the problem.
backends::CrossEntropyRows check_rows(const char* op, const Tensor& logits, const Tensor& targets,
                                      float z_loss,
                                      std::initializer_list<std::pair<const char*, const Tensor*>> rows) {
  TESSERA_CHECK_SHAPE(logits.rank() == 2 && logits.is_contiguous(),
                      "{}: logits must be a contiguous [N, V] tensor, got {}", op, logits.str());
  TESSERA_CHECK_SHAPE(logits.dtype() == DType::kF32 || logits.dtype() == DType::kBF16,
                      "{}: logits must be float32 or bfloat16, got {}", op, logits.str());
  const int64_t n = logits.dim(0), vocab = logits.dim(1);
  TESSERA_CHECK_SHAPE(vocab > 0, "{}: logits need a vocabulary of at least 1, got {}", op, logits.str());
  TESSERA_CHECK_SHAPE(vocab <= std::numeric_limits<int32_t>::max(),
                      "{}: a vocabulary of {} does not fit int32 targets", op, vocab);
  TESSERA_CHECK_SHAPE(
      targets.dtype() == DType::kI32 && targets.shape() == Shape{n} && targets.is_contiguous(),
      "{}: targets must be int32[{}], got {}", op, n, targets.str());
  for (auto [name, t] : rows)
    TESSERA_CHECK_SHAPE(t->dtype() == DType::kF32 && t->shape() == Shape{n} && t->is_contiguous(),
                        "{}: {} must be float32[{}], got {}", op, name, n, t->str());
  const int32_t* tg = targets.ptr<int32_t>();
  for (int64_t i = 0; i < n; ++i)
    TESSERA_CHECK_SHAPE(tg[i] < vocab, "{}: targets[{}] = {} is out of range for a vocabulary of {}", op, i,
                        tg[i], vocab);
  return {logits.data(), logits.dtype() == DType::kBF16, tg, n, vocab, z_loss};
}

}  // namespace

void cross_entropy_forward(const Tensor& logits, const Tensor& targets, const Tensor& loss, const Tensor& lse,
                           float z_loss) {
  auto rows = check_rows("cross_entropy_forward", logits, targets, z_loss, {{"loss", &loss}, {"lse", &lse}});
  backends::kernels_for(logits).cross_entropy->forward(rows, loss.ptr<float>(), lse.ptr<float>());
}

void check_dlogits(const char* op, const Tensor& logits, const Tensor& dlogits) {
  TESSERA_CHECK_SHAPE(
      dlogits.shape() == logits.shape() && dlogits.dtype() == logits.dtype() && dlogits.is_contiguous(),
      "{}: dlogits must be a contiguous {} like the logits, got {}", op, logits.str(), dlogits.str());
  const char* l0 = static_cast<const char*>(logits.data());
  const char* d0 = static_cast<const char*>(dlogits.data());
  TESSERA_CHECK_SHAPE(l0 == d0 || d0 + dlogits.nbytes() <= l0 || l0 + logits.nbytes() <= d0,
                      "{}: dlogits overlaps the logits without being the same tensor", op);
}

void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                            const Tensor& dloss, const Tensor& dlogits, float z_loss) {
  auto rows =
      check_rows("cross_entropy_backward", logits, targets, z_loss, {{"lse", &lse}, {"dloss", &dloss}});
  check_dlogits("cross_entropy_backward", logits, dlogits);
  backends::kernels_for(logits).cross_entropy->backward(rows, lse.ptr<float>(), dloss.ptr<float>(),
                                                        dlogits.data());
}

void cross_entropy_forward_backward(const Tensor& logits, const Tensor& targets, const Tensor& dloss,
                                    const Tensor& loss, const Tensor& lse, const Tensor& dlogits,
                                    float z_loss) {
  auto rows = check_rows("cross_entropy_forward_backward", logits, targets, z_loss,
                         {{"dloss", &dloss}, {"loss", &loss}, {"lse", &lse}});
  check_dlogits("cross_entropy_forward_backward", logits, dlogits);
  backends::kernels_for(logits).cross_entropy->forward_backward(rows, dloss.ptr<float>(), loss.ptr<float>(),
                                                                lse.ptr<float>(), dlogits.data());
}

MeanLoss cross_entropy_mean(const Tensor& loss, const Tensor& targets) {
  TESSERA_CHECK_SHAPE(loss.dtype() == DType::kF32 && loss.rank() == 1 && loss.is_contiguous(),
                      "cross_entropy_mean: loss must be float32[N], got {}", loss.str());
  TESSERA_CHECK_SHAPE(targets.dtype() == DType::kI32 && targets.shape() == loss.shape(),
                      "cross_entropy_mean: targets must be int32{}, got {}", loss.shape().str(),
                      targets.str());
  double sum = 0;
  int64_t count = 0;
  for (int64_t i = 0; i < loss.numel(); ++i) {
    if (targets.ptr<int32_t>()[i] < 0) continue;
    sum += loss.ptr<float>()[i];
    ++count;
  }
  return {count > 0 ? sum / static_cast<double>(count) : 0.0, count};
}

// Forward per logit: max, subtract, exp, add (4). Backward per logit: subtract, exp, multiply (3).
CrossEntropyCost cross_entropy_forward_cost(int64_t n, int64_t vocab, DType logits_dtype) {
  const double elems = static_cast<double>(n) * static_cast<double>(vocab);
  return {4.0 * elems, elems * static_cast<double>(dtype_size(logits_dtype)) + 12.0 * static_cast<double>(n)};
}

CrossEntropyCost cross_entropy_backward_cost(int64_t n, int64_t vocab, DType logits_dtype) {
  const double elems = static_cast<double>(n) * static_cast<double>(vocab);
  return {3.0 * elems,
          2.0 * elems * static_cast<double>(dtype_size(logits_dtype)) + 12.0 * static_cast<double>(n)};
}

// Both passes' traffic in one: the logits read once, dlogits written once; the exp counted once.
CrossEntropyCost cross_entropy_forward_backward_cost(int64_t n, int64_t vocab, DType logits_dtype) {
  const double elems = static_cast<double>(n) * static_cast<double>(vocab);
  return {5.0 * elems,
          2.0 * elems * static_cast<double>(dtype_size(logits_dtype)) + 16.0 * static_cast<double>(n)};
}

void cross_entropy_forward_ref(const std::vector<double>& logits, const std::vector<int32_t>& targets,
                               int64_t vocab, double z_loss, std::vector<double>& loss,
                               std::vector<double>& lse) {
  const size_t n = targets.size();
  loss.assign(n, 0.0);
  lse.assign(n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    const double* x = logits.data() + i * vocab;
    const double m = *std::max_element(x, x + vocab);
    double s = 0;
    for (int64_t v = 0; v < vocab; ++v) s += std::exp(x[v] - m);
    lse[i] = m + std::log(s);
    if (targets[i] >= 0) loss[i] = lse[i] - x[targets[i]] + z_loss * lse[i] * lse[i];
  }
}

void cross_entropy_backward_ref(const std::vector<double>& logits, const std::vector<int32_t>& targets,
                                int64_t vocab, double z_loss, const std::vector<double>& dloss,
                                std::vector<double>& dlogits) {
  std::vector<double> loss, lse;
  cross_entropy_forward_ref(logits, targets, vocab, z_loss, loss, lse);
  dlogits.assign(logits.size(), 0.0);
  for (size_t i = 0; i < targets.size(); ++i) {
    if (targets[i] < 0) continue;
    const double a = dloss[i] * (1.0 + 2.0 * z_loss * lse[i]);
    for (int64_t v = 0; v < vocab; ++v) dlogits[i * vocab + v] = a * std::exp(logits[i * vocab + v] - lse[i]);
    dlogits[i * vocab + targets[i]] -= dloss[i];
  }
}

}  // namespace tessera::ops
