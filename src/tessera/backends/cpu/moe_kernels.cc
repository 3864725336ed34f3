// The CPU's mixture-of-experts kernels (moe_kernels.h). Rows are f32 or bf16 (the `bf16` flag of
// the problem); arithmetic is f32 and reductions over tokens are double. Loops over tokens run on
// the OpenMP pool; the dispatch order (which row each assignment gets) is computed on one thread,
// as it is a prefix sum over N * k small integers.
#include "tessera/backends/cpu/moe_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "tessera/core/dtype.h"
#include "tessera/core/error.h"

namespace tessera::cpu {
namespace {

using backends::MoeDispatchProblem;
using backends::MoeRouteProblem;

inline float load(const void* p, int64_t i, bool bf16) {
  return bf16 ? bf16_to_f32(static_cast<const uint16_t*>(p)[i]) : static_cast<const float*>(p)[i];
}

// A row of `width` values of the given dtype, as f32 into `out`.
inline void load_row(const void* base, int64_t row, int64_t width, bool bf16, float* out) {
  if (bf16) {
    const uint16_t* r = static_cast<const uint16_t*>(base) + row * width;
    for (int64_t i = 0; i < width; ++i) out[i] = bf16_to_f32(r[i]);
  } else {
    std::memcpy(out, static_cast<const float*>(base) + row * width, static_cast<size_t>(width) * 4);
  }
}
inline void store_row(void* base, int64_t row, int64_t width, bool bf16, const float* in) {
  if (bf16) {
    uint16_t* r = static_cast<uint16_t*>(base) + row * width;
    for (int64_t i = 0; i < width; ++i) r[i] = f32_to_bf16(in[i]);
  } else {
    std::memcpy(static_cast<float*>(base) + row * width, in, static_cast<size_t>(width) * 4);
  }
}

// Per-thread scratch rows, grown on first use and kept (no allocation in steady state).
float* scratch(int64_t n, int slot) {
  thread_local std::vector<float> buf[2];
  if (static_cast<int64_t>(buf[slot].size()) < n) buf[slot].resize(static_cast<size_t>(n));
  return buf[slot].data();
}

void route(const MoeRouteProblem& p, const void* logits, float* weights, int32_t* experts) {
  const int64_t X = p.experts, K = p.k;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < p.tokens; ++n) {
    float* row = scratch(X, 0);
    load_row(logits, n, X, p.bf16, row);
    float* w = weights + n * K;
    int32_t* e = experts + n * K;
    for (int64_t j = 0; j < K; ++j) {  // k passes of argmax: k and X are small
      int32_t best = -1;
      for (int64_t x = 0; x < X; ++x) {
        bool taken = false;
        for (int64_t i = 0; i < j; ++i) taken |= e[i] == x;
        if (!taken && (best < 0 || row[x] > row[best])) best = static_cast<int32_t>(x);
      }
      e[j] = best;
      w[j] = row[best];
    }
    const float m = w[0];
    float sum = 0;
    for (int64_t j = 0; j < K; ++j) sum += (w[j] = std::exp(w[j] - m));
    for (int64_t j = 0; j < K; ++j) w[j] /= sum;
  }
}

void route_backward(const MoeRouteProblem& p, const float* weights, const int32_t* experts,
                    const float* dweights, void* dlogits) {
  const int64_t X = p.experts, K = p.k;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < p.tokens; ++n) {
    float* row = scratch(X, 0);
    std::fill(row, row + X, 0.0f);
    const float* w = weights + n * K;
    const float* dw = dweights + n * K;
    float dot = 0;
    for (int64_t j = 0; j < K; ++j) dot += w[j] * dw[j];
    for (int64_t j = 0; j < K; ++j) row[experts[n * K + j]] = w[j] * (dw[j] - dot);
    store_row(dlogits, n, X, p.bf16, row);
  }
}

// softmax of one row of logits into `out`.
void softmax_row(const void* logits, int64_t n, int64_t X, bool bf16, float* out) {
  load_row(logits, n, X, bf16, out);
  const float m = *std::max_element(out, out + X);
  float sum = 0;
  for (int64_t x = 0; x < X; ++x) sum += (out[x] = std::exp(out[x] - m));
  for (int64_t x = 0; x < X; ++x) out[x] /= sum;
}

// density[b, e]: the share of sequence b's tokens whose k choices include e (summed over slots).
void densities(const MoeRouteProblem& p, int64_t batch, const int32_t* experts, std::vector<double>& d) {
  const int64_t X = p.experts, S = p.tokens / batch;
  d.assign(static_cast<size_t>(batch * X), 0.0);
  for (int64_t n = 0; n < p.tokens; ++n)
    for (int64_t j = 0; j < p.k; ++j) d[static_cast<size_t>((n / S) * X + experts[n * p.k + j])] += 1.0;
  for (double& v : d) v /= static_cast<double>(S);
}

double load_balance(const MoeRouteProblem& p, int64_t batch, double weight, const void* logits,
                    const int32_t* experts) {
  const int64_t X = p.experts, S = p.tokens / batch;
  thread_local std::vector<double> density, prob;
  densities(p, batch, experts, density);
  prob.assign(static_cast<size_t>(batch * X), 0.0);
  for (int64_t b = 0; b < batch; ++b) {
    double* pb = prob.data() + b * X;
    for (int64_t s = 0; s < S; ++s) {
      float* row = scratch(X, 0);
      softmax_row(logits, b * S + s, X, p.bf16, row);
      for (int64_t x = 0; x < X; ++x) pb[x] += row[x];
    }
  }
  double sum = 0;
  for (size_t i = 0; i < prob.size(); ++i) sum += density[i] * prob[i] / static_cast<double>(S);
  return weight * static_cast<double>(X) * static_cast<double>(X) * sum / static_cast<double>(batch * X);
}

void load_balance_backward(const MoeRouteProblem& p, int64_t batch, double weight, float dloss,
                           const void* logits, const int32_t* experts, void* dlogits) {
  const int64_t X = p.experts, S = p.tokens / batch;
  thread_local std::vector<double> density;
  densities(p, batch, experts, density);
  // d loss / d p[b, s, e] = weight * X^2 / (B X) * density[b, e] / S
  const double scale = dloss * weight * static_cast<double>(X) / static_cast<double>(batch * S);
  const double* dens = density.data();
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < p.tokens; ++n) {
    float* pr = scratch(X, 0);
    float* out = scratch(X, 1);
    softmax_row(logits, n, X, p.bf16, pr);
    const double* d = dens + (n / S) * X;
    double dot = 0;
    for (int64_t x = 0; x < X; ++x) dot += pr[x] * scale * d[x];
    for (int64_t x = 0; x < X; ++x) out[x] = static_cast<float>(pr[x] * (scale * d[x] - dot));
    store_row(dlogits, n, X, p.bf16, out);
  }
}

void copy_row(const void* src, int64_t src_row, void* dst, int64_t dst_row, int64_t width, size_t elem) {
  std::memcpy(static_cast<char*>(dst) + static_cast<size_t>(dst_row * width) * elem,
              static_cast<const char*>(src) + static_cast<size_t>(src_row * width) * elem,
              static_cast<size_t>(width) * elem);
}

void dispatch(const MoeDispatchProblem& p, const void* x, const int32_t* experts, void* xs, int32_t* rows,
              int32_t* group_sizes) {
  const int64_t N = p.tokens, X = p.experts, K = p.k, W = p.width;
  const size_t elem = p.bf16 ? 2 : 4;
  if (p.dense) {
    for (int64_t e = 0; e < X; ++e) group_sizes[e] = static_cast<int32_t>(N);
    for (int64_t a = 0; a < N * K; ++a) rows[a] = static_cast<int32_t>(experts[a] * N + a / K);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < N * X; ++r) copy_row(x, r % N, xs, r, W, elem);
    return;
  }
  // Which assignments are kept, and each expert's count: rows[a] = 0 for kept, -1 for dropped.
  std::fill(group_sizes, group_sizes + X, 0);
  if (p.capacity > 0) {
    thread_local std::vector<int64_t> in_seq;
    for (int64_t n0 = 0; n0 < N; n0 += p.seq) {
      in_seq.assign(static_cast<size_t>(X), 0);
      for (int64_t a = n0 * K; a < std::min(N, n0 + p.seq) * K; ++a) {
        const int32_t e = experts[a];
        const bool keep = in_seq[static_cast<size_t>(e)] < p.capacity;
        in_seq[static_cast<size_t>(e)] += keep ? 1 : 0;
        group_sizes[e] += keep ? 1 : 0;
        rows[a] = keep ? 0 : -1;
      }
    }
  } else {
    for (int64_t a = 0; a < N * K; ++a) {
      ++group_sizes[experts[a]];
      rows[a] = 0;
    }
  }
  // Rows: group e starts after the groups before it; within it, assignments in (token, slot) order.
  thread_local std::vector<int64_t> next;
  next.assign(static_cast<size_t>(X), 0);
  int64_t total = 0;
  for (int64_t e = 0; e < X; ++e) {
    next[static_cast<size_t>(e)] = total;
    total += group_sizes[e];
  }
  for (int64_t a = 0; a < N * K; ++a)
    if (rows[a] >= 0) rows[a] = static_cast<int32_t>(next[static_cast<size_t>(experts[a])]++);
#pragma omp parallel for schedule(static)
  for (int64_t a = 0; a < N * K; ++a)
    if (rows[a] >= 0) copy_row(x, a / K, xs, rows[a], W, elem);
  if (total < N * K)  // the rows of dropped assignments (at the end) are zero
    std::memset(static_cast<char*>(xs) + static_cast<size_t>(total * W) * elem, 0,
                static_cast<size_t>((N * K - total) * W) * elem);
}

void dispatch_backward(const MoeDispatchProblem& p, const void* dxs, const int32_t* rows, void* dx) {
  const int64_t N = p.tokens, K = p.k, W = p.width;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    float* acc = scratch(W, 0);
    float* row = scratch(W, 1);
    std::fill(acc, acc + W, 0.0f);
    const int64_t sources = p.dense ? p.experts : K;
    for (int64_t j = 0; j < sources; ++j) {
      const int64_t r = p.dense ? j * N + n : rows[n * K + j];
      if (r < 0) continue;
      load_row(dxs, r, W, p.bf16, row);
      for (int64_t i = 0; i < W; ++i) acc[i] += row[i];
    }
    store_row(dx, n, W, p.bf16, acc);
  }
}

void combine(const MoeDispatchProblem& p, const void* ys, const float* weights, const int32_t* rows,
             void* y) {
  const int64_t N = p.tokens, K = p.k, W = p.width;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    float* acc = scratch(W, 0);
    float* row = scratch(W, 1);
    std::fill(acc, acc + W, 0.0f);
    for (int64_t j = 0; j < K; ++j) {
      const int64_t r = rows[n * K + j];
      if (r < 0) continue;
      const float w = weights[n * K + j];
      load_row(ys, r, W, p.bf16, row);
      for (int64_t i = 0; i < W; ++i) acc[i] += w * row[i];
    }
    store_row(y, n, W, p.bf16, acc);
  }
}

void combine_backward(const MoeDispatchProblem& p, const void* dy, const void* ys, const float* weights,
                      const int32_t* rows, void* dys, float* dweights) {
  const int64_t N = p.tokens, K = p.k, W = p.width;
  const size_t elem = p.bf16 ? 2 : 4;
  if (p.dense || p.capacity > 0)  // rows that no assignment owns get a zero gradient
    std::memset(dys, 0, static_cast<size_t>(p.buffer_rows() * W) * elem);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    float* g = scratch(W, 0);
    float* row = scratch(W, 1);
    load_row(dy, n, W, p.bf16, g);
    for (int64_t j = 0; j < K; ++j) {
      const int64_t a = n * K + j, r = rows[a];
      if (r < 0) {
        dweights[a] = 0.0f;
        continue;
      }
      load_row(ys, r, W, p.bf16, row);
      float dot = 0;
      for (int64_t i = 0; i < W; ++i) dot += g[i] * row[i];
      dweights[a] = dot;
      const float w = weights[a];
      for (int64_t i = 0; i < W; ++i) row[i] = w * g[i];
      store_row(dys, r, W, p.bf16, row);
    }
  }
}

void grouped_bias_add(int64_t rows, int64_t cols, int64_t groups, const int32_t* group_sizes, bool bf16,
                      const void* x, const float* bias, void* y) {
  int64_t r0 = 0;
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t n = group_sizes[g];
    const float* b = bias + g * cols;
#pragma omp parallel for schedule(static) if (n * cols > 65536)
    for (int64_t r = r0; r < r0 + n; ++r) {
      float* row = scratch(cols, 0);
      load_row(x, r, cols, bf16, row);
      for (int64_t c = 0; c < cols; ++c) row[c] += b[c];
      store_row(y, r, cols, bf16, row);
    }
    r0 += n;
  }
  if (x != y && r0 < rows)
    std::memcpy(static_cast<char*>(y) + static_cast<size_t>(r0 * cols) * (bf16 ? 2 : 4),
                static_cast<const char*>(x) + static_cast<size_t>(r0 * cols) * (bf16 ? 2 : 4),
                static_cast<size_t>((rows - r0) * cols) * (bf16 ? 2 : 4));
}

void grouped_bias_grad(int64_t rows, int64_t cols, int64_t groups, const int32_t* group_sizes, bool bf16,
                       const void* dy, float* dbias) {
  (void)rows;
  int64_t r0 = 0;
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t n = group_sizes[g];
#pragma omp parallel for schedule(static) if (n * cols > 65536)
    for (int64_t c = 0; c < cols; ++c) {
      double sum = 0;
      for (int64_t r = r0; r < r0 + n; ++r) sum += load(dy, r * cols + c, bf16);
      dbias[g * cols + c] += static_cast<float>(sum);
    }
    r0 += n;
  }
}

}  // namespace

const backends::MoeKernels kMoeKernels{.route = route,
                                       .route_backward = route_backward,
                                       .load_balance = load_balance,
                                       .load_balance_backward = load_balance_backward,
                                       .dispatch = dispatch,
                                       .dispatch_backward = dispatch_backward,
                                       .combine = combine,
                                       .combine_backward = combine_backward,
                                       .grouped_bias_add = grouped_bias_add,
                                       .grouped_bias_grad = grouped_bias_grad};

}  // namespace tessera::cpu
