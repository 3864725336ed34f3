// MoE op entries (moe.h): argument checks, then the device's kernels; and the double references.
#include "tessera/ops/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "tessera/backends/kernels.h"
#include "tessera/core/error.h"

namespace tessera::ops {

namespace {

void check_act(const char* op, const char* arg, const Tensor& t, int64_t rows, int64_t cols) {
  TESSERA_CHECK_SHAPE(
      t.defined() && t.is_contiguous() && (t.dtype() == DType::kF32 || t.dtype() == DType::kBF16),
      "{}: {} must be a contiguous float32 or bfloat16 tensor, got {}", op, arg,
      t.defined() ? t.str() : "nothing");
  TESSERA_CHECK_SHAPE(t.rank() == 2 && (rows < 0 || t.dim(0) == rows) && (cols < 0 || t.dim(1) == cols),
                      "{}: {} must be [{}, {}], got {}", op, arg, rows < 0 ? "R" : std::to_string(rows),
                      cols < 0 ? "C" : std::to_string(cols), t.str());
}

void check_typed(const char* op, const char* arg, const Tensor& t, DType dtype, int64_t numel) {
  TESSERA_CHECK_SHAPE(t.defined() && t.is_contiguous() && t.dtype() == dtype && t.numel() == numel,
                      "{}: {} must be a contiguous {} tensor of {} elements, got {}", op, arg,
                      dtype_name(dtype), numel, t.defined() ? t.str() : "nothing");
}

backends::MoeRouteProblem route_problem(const Tensor& logits, int64_t k) {
  return {.tokens = logits.dim(0), .experts = logits.dim(1), .k = k, .bf16 = logits.dtype() == DType::kBF16};
}

backends::MoeDispatchProblem dispatch_problem(const MoeDispatch& d, int64_t tokens, int64_t k, int64_t width,
                                              DType dtype) {
  return {.tokens = tokens,
          .experts = d.experts,
          .k = k,
          .width = width,
          .seq = d.seq,
          .capacity = d.capacity,
          .dense = d.dense,
          .bf16 = dtype == DType::kBF16};
}

void check_dispatch(const char* op, const MoeDispatch& d, int64_t tokens) {
  TESSERA_CHECK_SHAPE(
      d.experts >= 1 && d.capacity >= 0 && !(d.dense && d.capacity > 0),
      "{}: {} experts, capacity {}{}: want >= 1 experts, capacity >= 0, not both dense and capacity", op,
      d.experts, d.capacity, d.dense ? ", dense" : "");
  TESSERA_CHECK_SHAPE(d.capacity == 0 || (d.seq >= 1 && tokens % d.seq == 0),
                      "{}: {} tokens are not whole sequences of {}", op, tokens, d.seq);
}

}  // namespace

void moe_route(const Tensor& logits, const Tensor& weights, const Tensor& experts) {
  check_act("moe_route", "logits", logits, -1, -1);
  const int64_t n = logits.dim(0), x = logits.dim(1);
  TESSERA_CHECK_SHAPE(
      weights.rank() == 2 && weights.dim(0) == n && weights.dim(1) >= 1 && weights.dim(1) <= x,
      "moe_route: weights must be [{}, k] with 1 <= k <= {}, got {}", n, x, weights.str());
  const int64_t k = weights.dim(1);
  check_typed("moe_route", "weights", weights, DType::kF32, n * k);
  check_typed("moe_route", "experts", experts, DType::kI32, n * k);
  if (n == 0) return;
  backends::kernels_for(logits).moe->route(route_problem(logits, k), logits.data(), weights.ptr<float>(),
                                           experts.ptr<int32_t>());
}

void moe_route_backward(const Tensor& weights, const Tensor& experts, const Tensor& dweights,
                        const Tensor& dlogits) {
  check_act("moe_route_backward", "dlogits", dlogits, -1, -1);
  const int64_t n = dlogits.dim(0);
  TESSERA_CHECK_SHAPE(weights.rank() == 2 && weights.dim(0) == n,
                      "moe_route_backward: weights must be [{}, k], got {}", n, weights.str());
  const int64_t k = weights.dim(1);
  check_typed("moe_route_backward", "weights", weights, DType::kF32, n * k);
  check_typed("moe_route_backward", "experts", experts, DType::kI32, n * k);
  check_typed("moe_route_backward", "dweights", dweights, DType::kF32, n * k);
  if (n == 0) return;
  backends::kernels_for(dlogits).moe->route_backward(route_problem(dlogits, k), weights.ptr<float>(),
                                                     experts.ptr<int32_t>(), dweights.ptr<float>(),
                                                     dlogits.data());
}

namespace {
void check_balance(const char* op, const Tensor& logits, const Tensor& experts, int64_t batch) {
  check_act(op, "logits", logits, -1, -1);
  const int64_t n = logits.dim(0);
  TESSERA_CHECK_SHAPE(batch >= 1 && n % batch == 0, "{}: {} tokens are not {} whole sequences", op, n, batch);
  TESSERA_CHECK_SHAPE(
      experts.dtype() == DType::kI32 && experts.rank() == 2 && experts.dim(0) == n && experts.is_contiguous(),
      "{}: experts must be int32 [{}, k], got {}", op, n, experts.str());
}
}  // namespace

double moe_load_balance(const Tensor& logits, const Tensor& experts, int64_t batch, double weight) {
  check_balance("moe_load_balance", logits, experts, batch);
  if (logits.dim(0) == 0) return 0.0;
  return backends::kernels_for(logits).moe->load_balance(route_problem(logits, experts.dim(1)), batch, weight,
                                                         logits.data(), experts.ptr<int32_t>());
}

void moe_load_balance_backward(const Tensor& logits, const Tensor& experts, int64_t batch, double weight,
                               float dloss, const Tensor& dlogits) {
  check_balance("moe_load_balance_backward", logits, experts, batch);
  TESSERA_CHECK_SHAPE(
      dlogits.shape() == logits.shape() && dlogits.dtype() == logits.dtype() && dlogits.is_contiguous(),
      "moe_load_balance_backward: dlogits must match logits ({}), got {}", logits.str(), dlogits.str());
  if (logits.dim(0) == 0) return;
  backends::kernels_for(logits).moe->load_balance_backward(route_problem(logits, experts.dim(1)), batch,
                                                           weight, dloss, logits.data(),
                                                           experts.ptr<int32_t>(), dlogits.data());
}

int64_t moe_capacity(int64_t seq, int64_t k, int64_t experts, double capacity_factor) {
  const double balanced = std::ceil(static_cast<double>(seq * k) / static_cast<double>(experts));
  return static_cast<int64_t>(std::max(balanced * capacity_factor, capacity_factor));
}

void moe_dispatch(const Tensor& x, const Tensor& experts, const MoeDispatch& d, const Tensor& xs,
                  const Tensor& rows, const Tensor& group_sizes) {
  check_act("moe_dispatch", "x", x, -1, -1);
  const int64_t n = x.dim(0), w = x.dim(1);
  check_dispatch("moe_dispatch", d, n);
  TESSERA_CHECK_SHAPE(
      experts.dtype() == DType::kI32 && experts.rank() == 2 && experts.dim(0) == n && experts.is_contiguous(),
      "moe_dispatch: experts must be int32 [{}, k], got {}", n, experts.str());
  const int64_t k = experts.dim(1);
  const backends::MoeDispatchProblem p = dispatch_problem(d, n, k, w, x.dtype());
  check_act("moe_dispatch", "xs", xs, p.buffer_rows(), w);
  TESSERA_CHECK_SHAPE(xs.dtype() == x.dtype(), "moe_dispatch: xs {} must have x's dtype ({})", xs.str(),
                      x.str());
  check_typed("moe_dispatch", "rows", rows, DType::kI32, n * k);
  check_typed("moe_dispatch", "group_sizes", group_sizes, DType::kI32, d.experts);
  const int32_t* e = experts.ptr<int32_t>();
  for (int64_t a = 0; a < n * k; ++a)
    TESSERA_CHECK(e[a] >= 0 && e[a] < d.experts, ErrorKind::kRuntime,
                  "moe_dispatch: assignment {} names expert {} of {}", a, e[a], d.experts);
  if (n == 0) {
    std::fill(group_sizes.ptr<int32_t>(), group_sizes.ptr<int32_t>() + d.experts, 0);
    return;
  }
  backends::kernels_for(x).moe->dispatch(p, x.data(), e, xs.data(), rows.ptr<int32_t>(),
                                         group_sizes.ptr<int32_t>());
}

void moe_dispatch_backward(const Tensor& dxs, const Tensor& rows, const MoeDispatch& d, const Tensor& dx) {
  check_act("moe_dispatch_backward", "dx", dx, -1, -1);
  const int64_t n = dx.dim(0), w = dx.dim(1);
  check_dispatch("moe_dispatch_backward", d, n);
  TESSERA_CHECK_SHAPE(rows.dtype() == DType::kI32 && n > 0 && rows.numel() % n == 0,
                      "moe_dispatch_backward: rows must be int32 [N * k] for N = {}, got {}", n, rows.str());
  const backends::MoeDispatchProblem p = dispatch_problem(d, n, rows.numel() / n, w, dx.dtype());
  check_act("moe_dispatch_backward", "dxs", dxs, p.buffer_rows(), w);
  backends::kernels_for(dx).moe->dispatch_backward(p, dxs.data(), rows.ptr<int32_t>(), dx.data());
}

void moe_combine(const Tensor& ys, const Tensor& weights, const Tensor& rows, const MoeDispatch& d,
                 const Tensor& y) {
  check_act("moe_combine", "y", y, -1, -1);
  const int64_t n = y.dim(0), w = y.dim(1);
  check_dispatch("moe_combine", d, n);
  TESSERA_CHECK_SHAPE(weights.dtype() == DType::kF32 && weights.rank() == 2 && weights.dim(0) == n,
                      "moe_combine: weights must be float32 [{}, k], got {}", n, weights.str());
  const int64_t k = weights.dim(1);
  const backends::MoeDispatchProblem p = dispatch_problem(d, n, k, w, y.dtype());
  check_act("moe_combine", "ys", ys, p.buffer_rows(), w);
  check_typed("moe_combine", "rows", rows, DType::kI32, n * k);
  if (n == 0) return;
  backends::kernels_for(y).moe->combine(p, ys.data(), weights.ptr<float>(), rows.ptr<int32_t>(), y.data());
}

void moe_combine_backward(const Tensor& dy, const Tensor& ys, const Tensor& weights, const Tensor& rows,
                          const MoeDispatch& d, const Tensor& dys, const Tensor& dweights) {
  check_act("moe_combine_backward", "dy", dy, -1, -1);
  const int64_t n = dy.dim(0), w = dy.dim(1);
  check_dispatch("moe_combine_backward", d, n);
  TESSERA_CHECK_SHAPE(weights.dtype() == DType::kF32 && weights.rank() == 2 && weights.dim(0) == n,
                      "moe_combine_backward: weights must be float32 [{}, k], got {}", n, weights.str());
  const int64_t k = weights.dim(1);
  const backends::MoeDispatchProblem p = dispatch_problem(d, n, k, w, dy.dtype());
  check_act("moe_combine_backward", "ys", ys, p.buffer_rows(), w);
  check_act("moe_combine_backward", "dys", dys, p.buffer_rows(), w);
  check_typed("moe_combine_backward", "rows", rows, DType::kI32, n * k);
  check_typed("moe_combine_backward", "dweights", dweights, DType::kF32, n * k);
  if (n == 0) return;
  backends::kernels_for(dy).moe->combine_backward(p, dy.data(), ys.data(), weights.ptr<float>(),
                                                  rows.ptr<int32_t>(), dys.data(), dweights.ptr<float>());
}

void grouped_matmul(const Tensor& a, const Tensor& b, const Tensor& group_sizes, const Tensor& c,
                    GroupedMatmulOptions opts) {
  const char* op = "grouped_matmul";
  TESSERA_CHECK_SHAPE(group_sizes.defined() && group_sizes.dtype() == DType::kI32 &&
                          group_sizes.rank() == 1 && group_sizes.is_contiguous(),
                      "{}: group_sizes must be int32 [G], got {}", op, group_sizes.str());
  const int64_t groups = group_sizes.dim(0);
  check_act(op, "a", a, -1, -1);
  const int64_t rows = a.dim(0), kdim = a.dim(1);
  int64_t ndim = 0;
  if (opts.weight_grad) {
    check_act(op, "b", b, rows, -1);
    ndim = b.dim(1);
    TESSERA_CHECK_SHAPE(
        c.defined() && c.rank() == 3 && c.shape() == (Shape{groups, kdim, ndim}) && c.is_contiguous(),
        "{}: the weight gradient must be [{}, {}, {}], got {}", op, groups, kdim, ndim, c.str());
    TESSERA_CHECK_SHAPE(!opts.trans_b, "{}: weight_grad takes no trans_b", op);
  } else {
    TESSERA_CHECK_SHAPE(b.defined() && b.rank() == 3 && b.dim(0) == groups && b.is_contiguous() &&
                            b.dim(opts.trans_b ? 2 : 1) == kdim,
                        "{}: b must be [{}, {}, N]{} for a {}, got {}", op, groups, kdim,
                        opts.trans_b ? " stored transposed ([G, N, K])" : "", a.str(), b.str());
    ndim = b.dim(opts.trans_b ? 1 : 2);
    check_act(op, "c", c, rows, ndim);
  }
  TESSERA_CHECK_SHAPE(a.dtype() == b.dtype(), "{}: a {} and b {} differ in dtype", op, a.str(), b.str());
  const int32_t* sizes = group_sizes.ptr<int32_t>();
  int64_t total = 0;
  for (int64_t g = 0; g < groups; ++g) {
    TESSERA_CHECK(sizes[g] >= 0, ErrorKind::kRuntime, "{}: group {} has {} rows", op, g, sizes[g]);
    total += sizes[g];
  }
  TESSERA_CHECK(total <= rows, ErrorKind::kRuntime, "{}: the groups hold {} rows but the buffer has {}", op,
                total, rows);
  if (!opts.weight_grad && !opts.accumulate && total < rows)
    std::memset(static_cast<char*>(c.data()) + static_cast<size_t>(total * ndim) * dtype_size(c.dtype()), 0,
                static_cast<size_t>((rows - total) * ndim) * dtype_size(c.dtype()));
  if (groups == 0 || kdim == 0 || ndim == 0) return;
  const backends::GroupedGemmShape s{.groups = groups,
                                     .n = ndim,
                                     .k = kdim,
                                     .trans_b = opts.trans_b,
                                     .weight_grad = opts.weight_grad,
                                     .accumulate = opts.accumulate,
                                     .ab_dtype = a.dtype(),
                                     .c_dtype = c.dtype()};
  backends::kernels_for(c).gemm->grouped_gemm(s, sizes, a.data(), b.data(), c.data());
}

namespace {
int64_t check_grouped_rows(const char* op, const Tensor& x, const Tensor& group_sizes, const Tensor& bias) {
  check_act(op, "x", x, -1, -1);
  TESSERA_CHECK_SHAPE(group_sizes.defined() && group_sizes.dtype() == DType::kI32 && group_sizes.rank() == 1,
                      "{}: group_sizes must be int32 [G], got {}", op, group_sizes.str());
  const int64_t g = group_sizes.dim(0);
  TESSERA_CHECK_SHAPE(bias.defined() && bias.dtype() == DType::kF32 && bias.shape() == (Shape{g, x.dim(1)}) &&
                          bias.is_contiguous(),
                      "{}: the bias must be float32 [{}, {}], got {}", op, g, x.dim(1), bias.str());
  int64_t total = 0;
  for (int64_t i = 0; i < g; ++i) total += group_sizes.ptr<int32_t>()[i];
  TESSERA_CHECK(total <= x.dim(0), ErrorKind::kRuntime, "{}: the groups hold {} rows but the buffer has {}",
                op, total, x.dim(0));
  return g;
}
}  // namespace

void grouped_bias_add(const Tensor& x, const Tensor& bias, const Tensor& group_sizes, const Tensor& y) {
  const int64_t g = check_grouped_rows("grouped_bias_add", x, group_sizes, bias);
  check_act("grouped_bias_add", "y", y, x.dim(0), x.dim(1));
  TESSERA_CHECK_SHAPE(y.dtype() == x.dtype(), "grouped_bias_add: y {} must have x's dtype", y.str());
  backends::kernels_for(x).moe->grouped_bias_add(x.dim(0), x.dim(1), g, group_sizes.ptr<int32_t>(),
                                                 x.dtype() == DType::kBF16, x.data(), bias.ptr<float>(),
                                                 y.data());
}

void grouped_bias_grad(const Tensor& dy, const Tensor& group_sizes, const Tensor& dbias) {
  const int64_t g = check_grouped_rows("grouped_bias_grad", dy, group_sizes, dbias);
  backends::kernels_for(dy).moe->grouped_bias_grad(dy.dim(0), dy.dim(1), g, group_sizes.ptr<int32_t>(),
                                                   dy.dtype() == DType::kBF16, dy.data(), dbias.ptr<float>());
}

// ---- references ------------------------------------------------------------------------------------

void moe_route_ref(const std::vector<double>& logits, int64_t n, int64_t x, int64_t k,
                   std::vector<double>& weights, std::vector<int32_t>& experts) {
  weights.assign(static_cast<size_t>(n * k), 0.0);
  experts.assign(static_cast<size_t>(n * k), -1);
  for (int64_t t = 0; t < n; ++t) {
    std::vector<int32_t> order(static_cast<size_t>(x));
    for (int64_t e = 0; e < x; ++e) order[static_cast<size_t>(e)] = static_cast<int32_t>(e);
    const double* l = logits.data() + t * x;
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return l[a] > l[b]; });
    double sum = 0;
    for (int64_t j = 0; j < k; ++j) sum += std::exp(l[order[static_cast<size_t>(j)]] - l[order[0]]);
    for (int64_t j = 0; j < k; ++j) {
      experts[static_cast<size_t>(t * k + j)] = order[static_cast<size_t>(j)];
      weights[static_cast<size_t>(t * k + j)] =
          std::exp(l[order[static_cast<size_t>(j)]] - l[order[0]]) / sum;
    }
  }
}

double moe_load_balance_ref(const std::vector<double>& logits, const std::vector<int32_t>& experts, int64_t n,
                            int64_t x, int64_t k, int64_t batch, double weight) {
  const int64_t s = n / batch;
  double total = 0;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t e = 0; e < x; ++e) {
      double density = 0, prob = 0;
      for (int64_t t = b * s; t < (b + 1) * s; ++t) {
        for (int64_t j = 0; j < k; ++j) density += experts[static_cast<size_t>(t * k + j)] == e ? 1.0 : 0.0;
        double m = logits[static_cast<size_t>(t * x)], z = 0;
        for (int64_t i = 0; i < x; ++i) m = std::max(m, logits[static_cast<size_t>(t * x + i)]);
        for (int64_t i = 0; i < x; ++i) z += std::exp(logits[static_cast<size_t>(t * x + i)] - m);
        prob += std::exp(logits[static_cast<size_t>(t * x + e)] - m) / z;
      }
      total += (density / static_cast<double>(s)) * (prob / static_cast<double>(s));
    }
  return weight * static_cast<double>(x * x) * total / static_cast<double>(batch * x);
}

std::vector<int> moe_kept_ref(const std::vector<int32_t>& experts, int64_t n, int64_t x, int64_t k,
                              int64_t seq, int64_t capacity) {
  std::vector<int> kept(static_cast<size_t>(n * k), 1);
  if (capacity <= 0) return kept;
  for (int64_t b = 0; b < n / seq; ++b) {
    std::vector<int64_t> count(static_cast<size_t>(x), 0);
    for (int64_t a = b * seq * k; a < (b + 1) * seq * k; ++a) {
      const auto e = static_cast<size_t>(experts[static_cast<size_t>(a)]);
      kept[static_cast<size_t>(a)] = ++count[e] <= capacity ? 1 : 0;
    }
  }
  return kept;
}

void grouped_matmul_ref(const std::vector<double>& a, const std::vector<double>& b,
                        const std::vector<int32_t>& group_sizes, int64_t rows, int64_t k, int64_t n,
                        GroupedMatmulOptions opts, std::vector<double>& c) {
  const auto groups = static_cast<int64_t>(group_sizes.size());
  if (opts.weight_grad)
    c.resize(static_cast<size_t>(groups * k * n), 0.0);
  else
    c.resize(static_cast<size_t>(rows * n), 0.0);
  if (!opts.accumulate) std::fill(c.begin(), c.end(), 0.0);
  int64_t r0 = 0;
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t m = group_sizes[static_cast<size_t>(g)];
    for (int64_t r = r0; r < r0 + m; ++r)
      for (int64_t i = 0; i < k; ++i)
        for (int64_t j = 0; j < n; ++j) {
          if (opts.weight_grad) {
            c[static_cast<size_t>((g * k + i) * n + j)] +=
                a[static_cast<size_t>(r * k + i)] * b[static_cast<size_t>(r * n + j)];
          } else {
            const double bv = opts.trans_b ? b[static_cast<size_t>((g * n + j) * k + i)]
                                           : b[static_cast<size_t>((g * k + i) * n + j)];
            c[static_cast<size_t>(r * n + j)] += a[static_cast<size_t>(r * k + i)] * bv;
          }
        }
    r0 += m;
  }
}

}  // namespace tessera::ops
