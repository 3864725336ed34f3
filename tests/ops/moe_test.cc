// The MoE ops (ops/moe.h) against their double references: routing and its backward (also against
// central differences of the double reference), the load-balance loss and its backward, dispatch
// (dropless, capacity dropping in MaxText's order, dense), combine, and the grouped matmul forward,
// input gradient and per-expert weight gradient on ragged groups (empty groups included); then a
// whole MoE layer with capacity dropping against a double evaluation of the same layer.
//
// Tolerances: float32 results of sums of R terms 1e-5 relative (R <= 64 here), bfloat16 inputs and
// outputs 2e-2 relative; finite differences of the double reference with h = 1e-6 agree with the
// analytic gradient to 1e-7, so the float32 kernels are held to 1e-5 of the gradient's scale.
#include "tessera/ops/moe.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "tessera/ops/activation.h"
#include "tessera/ops/attention.h"
#include "testing/op_test_util.h"

namespace tessera {
namespace {

using testing::all_close;
using testing::fill_uniform;
using testing::OwnedTensor;
using testing::to_vector;

std::vector<int32_t> ints(const Tensor& t) {
  return std::vector<int32_t>(t.ptr<int32_t>(), t.ptr<int32_t>() + t.numel());
}

TEST(MoeRoute, TopKSoftmaxMatchesReference) {
  for (DType dt : {DType::kF32, DType::kBF16}) {
    const int64_t N = 37, X = 16, k = 3;
    OwnedTensor logits(Shape{N, X}, dt), w(Shape{N, k}, DType::kF32), e(Shape{N, k}, DType::kI32);
    const std::vector<double> l = fill_uniform(logits, 1, -3, 3);
    ops::moe_route(logits, w, e);
    std::vector<double> rw;
    std::vector<int32_t> re;
    ops::moe_route_ref(l, N, X, k, rw, re);
    EXPECT_EQ(ints(e), re);
    EXPECT_TRUE(all_close(to_vector(w), rw, 1e-6, 1e-7));
  }
}

TEST(MoeRoute, TiesGoToTheLowerExpert) {
  OwnedTensor logits(Shape{1, 4}, DType::kF32), w(Shape{1, 2}, DType::kF32), e(Shape{1, 2}, DType::kI32);
  const float row[4] = {0.5f, 1.0f, 1.0f, 1.0f};
  std::copy(row, row + 4, logits.t.ptr<float>());
  ops::moe_route(logits, w, e);
  EXPECT_EQ(ints(e), (std::vector<int32_t>{1, 2}));
  EXPECT_FLOAT_EQ(w.t.ptr<float>()[0], 0.5f);
}

// sum_j c[n, j] * weights[n, j] as a function of the logits, in double.
double route_objective(const std::vector<double>& l, const std::vector<double>& c, int64_t N, int64_t X,
                       int64_t k) {
  std::vector<double> w;
  std::vector<int32_t> e;
  ops::moe_route_ref(l, N, X, k, w, e);
  return std::inner_product(w.begin(), w.end(), c.begin(), 0.0);
}

TEST(MoeRoute, BackwardMatchesFiniteDifferences) {
  const int64_t N = 9, X = 8, k = 2;
  OwnedTensor logits(Shape{N, X}, DType::kF32), w(Shape{N, k}, DType::kF32), e(Shape{N, k}, DType::kI32);
  OwnedTensor dw(Shape{N, k}, DType::kF32), dl(Shape{N, X}, DType::kF32);
  const std::vector<double> l = fill_uniform(logits, 2, -2, 2);
  const std::vector<double> c = fill_uniform(dw, 3);
  ops::moe_route(logits, w, e);
  ops::moe_route_backward(w, e, dw, dl);
  std::vector<double> fd(l.size());
  for (size_t i = 0; i < l.size(); ++i) {  // the top-k set does not change under h (margins >> h)
    std::vector<double> p = l, m = l;
    p[i] += 1e-6;
    m[i] -= 1e-6;
    fd[i] = (route_objective(p, c, N, X, k) - route_objective(m, c, N, X, k)) / 2e-6;
  }
  EXPECT_TRUE(all_close(to_vector(dl), fd, 1e-5, 1e-6));
}

TEST(MoeLoadBalance, ValueAndBackwardMatchReferenceAndFiniteDifferences) {
  const int64_t B = 3, S = 11, N = B * S, X = 6, k = 2;
  const double weight = 0.01;
  OwnedTensor logits(Shape{N, X}, DType::kF32), w(Shape{N, k}, DType::kF32), e(Shape{N, k}, DType::kI32);
  OwnedTensor dl(Shape{N, X}, DType::kF32);
  const std::vector<double> l = fill_uniform(logits, 4, -2, 2);
  ops::moe_route(logits, w, e);
  const std::vector<int32_t> experts = ints(e);
  const double want = ops::moe_load_balance_ref(l, experts, N, X, k, B, weight);
  EXPECT_NEAR(ops::moe_load_balance(logits, e, B, weight), want, 1e-7 * want);
  // Balanced routing scores k * weight (MaxText's normalisation).
  std::vector<int32_t> balanced(static_cast<size_t>(N * k));
  for (int64_t a = 0; a < N * k; ++a) balanced[static_cast<size_t>(a)] = static_cast<int32_t>(a % X);
  EXPECT_NEAR(ops::moe_load_balance_ref(std::vector<double>(l.size(), 0.0), balanced, N, X, k, 1, weight),
              k * weight, 1e-12);
  ops::moe_load_balance_backward(logits, e, B, weight, 2.0f, dl);
  std::vector<double> fd(l.size());
  for (size_t i = 0; i < l.size(); ++i) {  // the density (top-k counts) is held: it has no gradient
    std::vector<double> p = l, m = l;
    p[i] += 1e-6;
    m[i] -= 1e-6;
    fd[i] = 2.0 *
            (ops::moe_load_balance_ref(p, experts, N, X, k, B, weight) -
             ops::moe_load_balance_ref(m, experts, N, X, k, B, weight)) /
            2e-6;
  }
  EXPECT_TRUE(all_close(to_vector(dl), fd, 1e-4, 1e-8));
}

// Experts chosen by a fixed pattern so that some experts overflow a small capacity.
std::vector<int32_t> skewed_experts(int64_t N, int64_t X, int64_t k) {
  std::vector<int32_t> e(static_cast<size_t>(N * k));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < k; ++j)
      e[static_cast<size_t>(n * k + j)] = static_cast<int32_t>((n * n + 3 * j) % X);
  return e;
}

TEST(MoeDispatch, RowsGroupedByExpertInTokenOrderAndMaxTextsDropOrder) {
  const int64_t B = 2, S = 10, N = B * S, X = 4, k = 2, W = 5;
  for (int64_t capacity : {0, 3}) {
    SCOPED_TRACE(capacity);
    OwnedTensor x(Shape{N, W}, DType::kF32), e(Shape{N, k}, DType::kI32), xs(Shape{N * k, W}, DType::kF32);
    OwnedTensor rows(Shape{N * k}, DType::kI32), sizes(Shape{X}, DType::kI32);
    const std::vector<double> xv = fill_uniform(x, 5);
    const std::vector<int32_t> ev = skewed_experts(N, X, k);
    std::copy(ev.begin(), ev.end(), e.t.ptr<int32_t>());
    const ops::MoeDispatch d{.experts = X, .seq = S, .capacity = capacity};
    ops::moe_dispatch(x, e, d, xs, rows, sizes);
    const std::vector<int> kept = ops::moe_kept_ref(ev, N, X, k, S, capacity);
    // Expected layout: group by expert, (token, slot) order within a group.
    std::vector<int32_t> want_rows(static_cast<size_t>(N * k), -1), want_sizes(static_cast<size_t>(X), 0);
    int32_t next = 0;
    for (int64_t g = 0; g < X; ++g)
      for (int64_t a = 0; a < N * k; ++a)
        if (kept[static_cast<size_t>(a)] && ev[static_cast<size_t>(a)] == g) {
          want_rows[static_cast<size_t>(a)] = next++;
          ++want_sizes[static_cast<size_t>(g)];
        }
    EXPECT_EQ(ints(rows), want_rows);
    EXPECT_EQ(ints(sizes), want_sizes);
    if (capacity > 0) {
      EXPECT_LT(next, N * k);  // the pattern overflows capacity 3
    }
    std::vector<double> want_xs(static_cast<size_t>(N * k * W), 0.0);
    for (int64_t a = 0; a < N * k; ++a)
      if (want_rows[static_cast<size_t>(a)] >= 0)
        for (int64_t i = 0; i < W; ++i)
          want_xs[static_cast<size_t>(want_rows[static_cast<size_t>(a)] * W + i)] =
              xv[static_cast<size_t>((a / k) * W + i)];
    EXPECT_EQ(to_vector(xs), want_xs);
  }
}

TEST(MoeCapacity, MaxTextsFormula) {
  EXPECT_EQ(ops::moe_capacity(2048, 2, 16, 1.0), 256);
  EXPECT_EQ(ops::moe_capacity(13, 2, 4, 1.25), 8);  // ceil(6.5) = 7, x 1.25 = 8.75
  EXPECT_EQ(ops::moe_capacity(1, 1, 64, 0.5), 0);   // max(ceil(1/64) * 0.5, 0.5) = 0.5
}

TEST(GroupedMatmul, ForwardInputAndWeightGradientsOnRaggedGroups) {
  const int64_t G = 5, K = 19, Nn = 23;
  const std::vector<int32_t> group_sizes = {7, 0, 33, 1, 12};  // 53 rows, then 6 past the groups
  const int64_t R = 59;
  for (DType dt : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(dt));
    const double tol = dt == DType::kF32 ? 1e-5 : 2e-2;
    OwnedTensor sizes(Shape{G}, DType::kI32), a(Shape{R, K}, dt), b(Shape{G, K, Nn}, dt), c(Shape{R, Nn}, dt);
    std::copy(group_sizes.begin(), group_sizes.end(), sizes.t.ptr<int32_t>());
    const std::vector<double> av = fill_uniform(a, 6), bv = fill_uniform(b, 7);
    fill_uniform(c, 8);  // garbage: the rows past the groups must come out zero
    ops::grouped_matmul(a, b, sizes, c);
    std::vector<double> want;
    ops::grouped_matmul_ref(av, bv, group_sizes, R, K, Nn, {}, want);
    EXPECT_TRUE(all_close(to_vector(c), want, tol, tol));
    // da = dc · b[g]ᵀ: the same b [G, K, N] read as [G, out = K, in = N].
    OwnedTensor dc(Shape{R, Nn}, dt), da(Shape{R, K}, dt);
    const std::vector<double> dcv = fill_uniform(dc, 9);
    ops::grouped_matmul(dc, b, sizes, da, {.trans_b = true});
    ops::grouped_matmul_ref(dcv, bv, group_sizes, R, Nn, K, {.trans_b = true}, want);  // b is [G, out, in]
    EXPECT_TRUE(all_close(to_vector(da), want, tol, tol));
    // db[g] += a_gᵀ · dc_g, accumulated onto what is there; the empty group keeps its value.
    OwnedTensor db(Shape{G, K, Nn}, DType::kF32);
    std::vector<double> base = fill_uniform(db, 10);
    ops::grouped_matmul(a, dc, sizes, db, {.weight_grad = true, .accumulate = true});
    ops::grouped_matmul_ref(av, dcv, group_sizes, R, K, Nn, {.weight_grad = true, .accumulate = true}, base);
    EXPECT_TRUE(all_close(to_vector(db), base, tol, tol));
  }
}

TEST(GroupedMatmul, MoreRowsInTheGroupsThanTheBufferIsAnError) {
  OwnedTensor sizes(Shape{2}, DType::kI32), a(Shape{4, 3}, DType::kF32), b(Shape{2, 3, 5}, DType::kF32),
      c(Shape{4, 5}, DType::kF32);
  sizes.t.ptr<int32_t>()[0] = 3;
  sizes.t.ptr<int32_t>()[1] = 2;
  EXPECT_THROW(ops::grouped_matmul(a, b, sizes, c), Error);
}

// One MoE layer through the ops, with capacity dropping, against the same layer evaluated in
// double from its definition: y[n] = sum over n's kept choices of w * wo[e]ᵀ(silu(wi0[e]ᵀx) * wi1[e]ᵀx).
TEST(MoeLayer, CapacityDroppingMatchesADoubleEvaluation) {
  const int64_t B = 2, S = 12, N = B * S, X = 4, k = 2, E = 8, F = 6;
  for (bool dense : {false, true}) {
    SCOPED_TRACE(dense ? "dense" : "capacity 4");
    const int64_t capacity = dense ? 0 : 4, R = dense ? N * X : N * k;
    OwnedTensor x(Shape{N, E}, DType::kF32), logits(Shape{N, X}, DType::kF32);
    OwnedTensor w(Shape{N, k}, DType::kF32), e(Shape{N, k}, DType::kI32);
    OwnedTensor wi0(Shape{X, E, F}, DType::kF32), wi1(Shape{X, E, F}, DType::kF32),
        wo(Shape{X, F, E}, DType::kF32);
    OwnedTensor xs(Shape{R, E}, DType::kF32), rows(Shape{N * k}, DType::kI32), sizes(Shape{X}, DType::kI32);
    OwnedTensor h0(Shape{R, F}, DType::kF32), h1(Shape{R, F}, DType::kF32), h(Shape{R, F}, DType::kF32);
    OwnedTensor ys(Shape{R, E}, DType::kF32), y(Shape{N, E}, DType::kF32);
    const std::vector<double> xv = fill_uniform(x, 11), lv = fill_uniform(logits, 12, -2, 2);
    const std::vector<double> v0 = fill_uniform(wi0, 13), v1 = fill_uniform(wi1, 14),
                              vo = fill_uniform(wo, 15);
    ops::moe_route(logits, w, e);
    const ops::MoeDispatch d{.experts = X, .seq = S, .capacity = capacity, .dense = dense};
    ops::moe_dispatch(x, e, d, xs, rows, sizes);
    ops::grouped_matmul(xs, wi0, sizes, h0);
    ops::grouped_matmul(xs, wi1, sizes, h1);
    ops::glu_fwd(ops::Activation::kSilu, h0, h1, h);
    ops::grouped_matmul(h, wo, sizes, ys);
    ops::moe_combine(ys, w, rows, d, y);
    std::vector<double> rw;
    std::vector<int32_t> re;
    ops::moe_route_ref(lv, N, X, k, rw, re);
    const std::vector<int> kept = ops::moe_kept_ref(re, N, X, k, S, capacity);
    if (!dense) {
      EXPECT_LT(std::accumulate(kept.begin(), kept.end(), 0), N * k);
    }
    std::vector<double> want(static_cast<size_t>(N * E), 0.0);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t j = 0; j < k; ++j) {
        const int64_t a = n * k + j, ex = re[static_cast<size_t>(a)];
        if (!kept[static_cast<size_t>(a)]) continue;
        std::vector<double> act(static_cast<size_t>(F));
        for (int64_t f = 0; f < F; ++f) {
          double g = 0, u = 0;
          for (int64_t i = 0; i < E; ++i) {
            g += xv[static_cast<size_t>(n * E + i)] * v0[static_cast<size_t>((ex * E + i) * F + f)];
            u += xv[static_cast<size_t>(n * E + i)] * v1[static_cast<size_t>((ex * E + i) * F + f)];
          }
          act[static_cast<size_t>(f)] = g / (1 + std::exp(-g)) * u;
        }
        for (int64_t i = 0; i < E; ++i) {
          double o = 0;
          for (int64_t f = 0; f < F; ++f)
            o += act[static_cast<size_t>(f)] * vo[static_cast<size_t>((ex * F + f) * E + i)];
          want[static_cast<size_t>(n * E + i)] += rw[static_cast<size_t>(a)] * o;
        }
      }
    EXPECT_TRUE(all_close(to_vector(y), want, 1e-5, 1e-6));
  }
}

// GPT-OSS's clamped SwiGLU: out = (clamp(u, -L, L) + 1) * g' sigmoid(1.702 g'), g' = min(g, L);
// forward against that formula in double, backward against its central differences (inputs kept
// 1e-3 away from the clamps' kinks).
void put(const Tensor& t, int64_t i, double v) {
  if (t.dtype() == DType::kBF16)
    t.ptr<uint16_t>()[i] = f32_to_bf16(static_cast<float>(v));
  else
    t.ptr<float>()[i] = static_cast<float>(v);
}

double gpt_oss_glu(double g, double u, double lim) {
  const double gc = std::min(g, lim), uc = std::clamp(u, -lim, lim);
  return (uc + 1.0) * gc / (1.0 + std::exp(-1.702 * gc));
}

TEST(GluClamp, GptOssSwigluMatchesItsFormulaAndFiniteDifferences) {
  const int64_t N = 7, F = 37;
  const float lim = 7.0f;
  for (DType dt : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(dt));
    OwnedTensor g(Shape{N, F}, dt), u(Shape{N, F}, dt), out(Shape{N, F}, dt), d(Shape{N, F}, dt);
    OwnedTensor dg(Shape{N, F}, dt), du(Shape{N, F}, dt);
    std::vector<double> gv = fill_uniform(g, 21, -10, 10), uv = fill_uniform(u, 22, -10, 10);
    const std::vector<double> dv = fill_uniform(d, 23);
    for (size_t i = 0; i < gv.size(); ++i)  // off the kinks at +-7
      if (std::abs(std::abs(gv[i]) - lim) < 1e-2 || std::abs(std::abs(uv[i]) - lim) < 1e-2) {
        gv[i] = uv[i] = 0.5;
        put(g, static_cast<int64_t>(i), 0.5);
        put(u, static_cast<int64_t>(i), 0.5);
      }
    const ops::GluOptions opt{.limit = lim, .up_offset = 1.0f};
    ops::glu_fwd(ops::Activation::kSwish1702, g, u, out, opt);
    ops::glu_bwd(ops::Activation::kSwish1702, g, u, d, dg, du, opt);
    std::vector<double> want(gv.size()), wg(gv.size()), wu(gv.size());
    for (size_t i = 0; i < gv.size(); ++i) {
      want[i] = gpt_oss_glu(gv[i], uv[i], lim);
      const double h = 1e-6;
      wg[i] = dv[i] * (gpt_oss_glu(gv[i] + h, uv[i], lim) - gpt_oss_glu(gv[i] - h, uv[i], lim)) / (2 * h);
      wu[i] = dv[i] * (gpt_oss_glu(gv[i], uv[i] + h, lim) - gpt_oss_glu(gv[i], uv[i] - h, lim)) / (2 * h);
    }
    const double tol = dt == DType::kF32 ? 1e-5 : 1e-2;
    EXPECT_TRUE(all_close(to_vector(out), want, tol, tol));
    EXPECT_TRUE(all_close(to_vector(dg), wg, tol, tol));
    EXPECT_TRUE(all_close(to_vector(du), wu, tol, tol));
  }
}

TEST(GroupedBias, AddsEachGroupsBiasAndSumsItsGradient) {
  const int64_t G = 3, C = 5, R = 12;
  const std::vector<int32_t> gs = {4, 0, 6};  // 10 rows, 2 after the groups
  OwnedTensor sizes(Shape{G}, DType::kI32), x(Shape{R, C}, DType::kF32), b(Shape{G, C}, DType::kF32),
      y(Shape{R, C}, DType::kF32), db(Shape{G, C}, DType::kF32);
  std::copy(gs.begin(), gs.end(), sizes.t.ptr<int32_t>());
  const std::vector<double> xv = fill_uniform(x, 31), bv = fill_uniform(b, 32);
  std::fill(db.t.ptr<float>(), db.t.ptr<float>() + G * C, 0.0f);
  ops::grouped_bias_add(x, b, sizes, y);
  ops::grouped_bias_grad(x, sizes, db);
  std::vector<double> want = xv, wdb(static_cast<size_t>(G * C), 0.0);
  int64_t r0 = 0;
  for (int64_t g = 0; g < G; ++g) {
    for (int64_t r = r0; r < r0 + gs[static_cast<size_t>(g)]; ++r)
      for (int64_t c = 0; c < C; ++c) {
        want[static_cast<size_t>(r * C + c)] += bv[static_cast<size_t>(g * C + c)];
        wdb[static_cast<size_t>(g * C + c)] += xv[static_cast<size_t>(r * C + c)];
      }
    r0 += gs[static_cast<size_t>(g)];
  }
  EXPECT_TRUE(all_close(to_vector(y), want, 1e-6, 1e-7));
  EXPECT_TRUE(all_close(to_vector(db), wdb, 1e-6, 1e-7));
}

// Sinks: attention with one extra logit per head against the double reference, and the sinks'
// gradient against central differences of the reference.
TEST(AttentionSinks, ForwardAndSinkGradientMatchTheReference) {
  const int64_t B = 2, T = 9, H = 4, Hkv = 2, D = 8;
  OwnedTensor q(Shape{B, T, H, D}, DType::kF32), k(Shape{B, T, Hkv, D}, DType::kF32),
      v(Shape{B, T, Hkv, D}, DType::kF32);
  OwnedTensor out(Shape{B, T, H, D}, DType::kF32), lse(Shape{B, H, T}, DType::kF32),
      sinks(Shape{H}, DType::kF32);
  OwnedTensor dout(Shape{B, T, H, D}, DType::kF32), dsinks(Shape{H}, DType::kF32);
  OwnedTensor dq(Shape{B, T, H, D}, DType::kF32), dk(Shape{B, T, Hkv, D}, DType::kF32),
      dv(Shape{B, T, Hkv, D}, DType::kF32);
  const std::vector<double> qv = fill_uniform(q, 41), kv = fill_uniform(k, 42), vv = fill_uniform(v, 43);
  const std::vector<double> sv = fill_uniform(sinks, 44, -1, 2), dov = fill_uniform(dout, 45);
  ops::AttentionOptions opt;
  opt.sliding_window = 4;
  opt.sinks = sinks;
  ops::attention_fwd(q, k, v, out, lse, opt);
  const ops::AttentionDims dims{B, T, H, Hkv, D};
  std::vector<double> ro, rl;
  ops::attention_ref(dims, opt, qv, kv, vv, &ro, &rl);
  EXPECT_TRUE(all_close(to_vector(out), ro, 1e-5, 1e-6));
  EXPECT_TRUE(all_close(to_vector(lse), rl, 1e-5, 1e-6));
  ops::attention_bwd(dout, q, k, v, out, lse, dq, dk, dv, opt);
  std::fill(dsinks.t.ptr<float>(), dsinks.t.ptr<float>() + H, 0.0f);
  ops::attention_sinks_bwd(dout, out, lse, dsinks, opt);
  std::vector<double> rdq, rdk, rdv, rds;
  ops::attention_bwd_ref(dims, opt, dov, qv, kv, vv, &rdq, &rdk, &rdv, nullptr, nullptr, &rds);
  EXPECT_TRUE(all_close(to_vector(dq), rdq, 1e-4, 1e-6));
  EXPECT_TRUE(all_close(to_vector(dk), rdk, 1e-4, 1e-6));
  EXPECT_TRUE(all_close(to_vector(dv), rdv, 1e-4, 1e-6));
  EXPECT_TRUE(all_close(to_vector(dsinks), rds, 1e-4, 1e-6));
  // The reference's sink gradient against central differences of sum(dout * out).
  std::vector<double> fd(static_cast<size_t>(H));
  for (int64_t h = 0; h < H; ++h) {
    double f[2];
    for (int side = 0; side < 2; ++side) {
      OwnedTensor s2(Shape{H}, DType::kF32);
      std::copy(sinks.t.ptr<float>(), sinks.t.ptr<float>() + H, s2.t.ptr<float>());
      s2.t.ptr<float>()[h] += side ? 1e-3f : -1e-3f;
      ops::AttentionOptions o2 = opt;
      o2.sinks = s2;
      std::vector<double> o, l;
      ops::attention_ref(dims, o2, qv, kv, vv, &o, &l);
      f[side] = std::inner_product(o.begin(), o.end(), dov.begin(), 0.0);
    }
    const double step = (static_cast<double>(sinks.t.ptr<float>()[h] + 1e-3f) -
                         static_cast<double>(sinks.t.ptr<float>()[h] - 1e-3f));
    fd[static_cast<size_t>(h)] = (f[1] - f[0]) / step;
  }
  EXPECT_TRUE(all_close(rds, fd, 1e-5, 1e-7));
}

}  // namespace
}  // namespace tessera
