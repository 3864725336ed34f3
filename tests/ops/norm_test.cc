// RMSNorm and LayerNorm: forward and backward against the double references on awkward sizes, in
// f32 and bf16, on both ISA builds; the references' gradients against central finite differences;
// parameter gradients accumulate and are the same run to run; shape and dtype errors.
#include "tessera/ops/norm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <vector>

#include "tessera/core/dtype.h"
#include "tessera/core/error.h"
#include "testing/op_test_util.h"

namespace tessera {
namespace {

using testing::OwnedTensor;
using testing::within;

constexpr double kU = 1.0 / (1 << 24);     // f32 unit roundoff
constexpr double kUBf16 = 1.0 / (1 << 8);  // bf16 unit roundoff (8 significant bits)

// Awkward sizes: 1, odd, prime, a C above one SIMD register only by a tail, tails of one and two
// 32-value pairs after whole 64-value steps (50, 111: the bf16 LayerNorm forward's loads), and one
// large enough (67 x 4099 > the threading grain) to run on several threads.
const std::pair<int64_t, int64_t> kSizes[] = {{1, 1},  {7, 3},   {1, 768},  {67, 130},
                                              {3, 50}, {3, 111}, {5, 4099}, {67, 4099}};

// Error growth of the f32 row sums: each of >= 8 SIMD lanes adds about C/8 terms in sequence and
// the lanes are then combined, so a row statistic carries at most (C/8 + 4) roundings relative to
// the sum of the magnitudes of its terms; the kernels' few further roundings add 8 more.
double f32_growth(int64_t c) {
  return kU * (static_cast<double>(c) / 8 + 12);
}

std::vector<double> f32_values(const Tensor& t) {
  return testing::to_vector(t);
}

// A bf16 store adds one rounding of the value.
double store_tol(double f32_tol, double want, DType dt) {
  return dt == DType::kBF16 ? f32_tol + kUBf16 * std::abs(want) : f32_tol;
}

// ---- RMSNorm ----------------------------------------------------------------------------------

TEST(RmsNorm, ForwardMatchesReference) {
  const double eps = 1e-5;
  for (DType dt : {DType::kF32, DType::kBF16}) {
    for (auto [n, c] : kSizes) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " " << n << "x" << c);
      OwnedTensor x(Shape{n, c}, dt), y(Shape{n, c}, dt), gamma(Shape{c}, DType::kF32),
          rstd(Shape{n}, DType::kF32);
      auto xv = testing::fill_uniform(x, 1 + c, -2, 2);
      auto gv = testing::fill_uniform(gamma, 2 + n, 0.5, 1.5);
      std::vector<double> want(n * c), rwant(n), tol(n * c), rtol(n);
      ops::rmsnorm_fwd_ref(xv.data(), gv.data(), eps, n, c, want.data(), rwant.data());
      // rstd = (mean(x^2) + eps)^-1/2 halves the relative error of the sum of squares (all terms
      // positive, so relative to the sum itself); y adds two products and the store.
      for (int64_t r = 0; r < n; ++r) rtol[r] = f32_growth(c) * rwant[r];
      for (int64_t i = 0; i < n * c; ++i) tol[i] = store_tol(f32_growth(c) * std::abs(want[i]), want[i], dt);
      testing::for_each_isa([&] {
        ops::rmsnorm_fwd(x, gamma, static_cast<float>(eps), y, rstd);
        EXPECT_TRUE(within(f32_values(y), want, tol));
        EXPECT_TRUE(within(f32_values(rstd), rwant, rtol));
      });
    }
  }
}

TEST(RmsNorm, BackwardMatchesReferenceAndAccumulates) {
  const double eps = 1e-6;
  for (DType dt : {DType::kF32, DType::kBF16}) {
    for (const auto& size : kSizes) {  // named, not bound: clang 14 lambdas cannot capture bindings
      const int64_t n = size.first, c = size.second;
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " " << n << "x" << c);
      OwnedTensor x(Shape{n, c}, dt), y(Shape{n, c}, dt), dy(Shape{n, c}, dt), dx(Shape{n, c}, dt),
          gamma(Shape{c}, DType::kF32), rstd(Shape{n}, DType::kF32), dgamma(Shape{c}, DType::kF32);
      auto xv = testing::fill_uniform(x, 3 + c, -2, 2);
      auto dyv = testing::fill_uniform(dy, 4 + n);
      auto gv = testing::fill_uniform(gamma, 5, 0.5, 1.5);
      std::vector<double> dxw(n * c), dgw(c), tol(n * c), gtol(c), dg0(c);
      ops::rmsnorm_bwd_ref(xv.data(), gv.data(), eps, dyv.data(), n, c, dxw.data(), dgw.data());
      // dx = r (g dy - x k) cancels, so its bound is relative to |r g dy| + |r x k|; dgamma sums
      // n products of f32 values with about (C/8 + 12) roundings each, relative to sum |dy xhat|.
      std::vector<double> sum_abs(c, 0.0);
      for (int64_t r = 0; r < n; ++r) {
        double ss = 0, dot = 0;
        for (int64_t j = 0; j < c; ++j) ss += xv[r * c + j] * xv[r * c + j];
        const double rs = 1.0 / std::sqrt(ss / c + eps);
        for (int64_t j = 0; j < c; ++j) dot += std::abs(dyv[r * c + j] * gv[j] * xv[r * c + j]);
        for (int64_t j = 0; j < c; ++j) {
          const int64_t i = r * c + j;
          const double terms = rs * std::abs(gv[j] * dyv[i]) + rs * rs * rs * std::abs(xv[i]) * dot / c;
          tol[i] = store_tol(f32_growth(c) * terms, dxw[i], dt);
          sum_abs[j] += std::abs(dyv[i] * xv[i] * rs);
        }
      }
      for (int64_t j = 0; j < c; ++j) {
        dg0[j] = 0.25 * j - 1.0;  // a prior value: parameter gradients accumulate
        gtol[j] = f32_growth(c) * sum_abs[j] + kU * (std::abs(dg0[j]) + std::abs(dgw[j])) + 1e-30;
        dgw[j] += dg0[j];
      }
      testing::for_each_isa([&] {
        ops::rmsnorm_fwd(x, gamma, static_cast<float>(eps), y, rstd);
        for (int64_t j = 0; j < c; ++j) dgamma.t.ptr<float>()[j] = static_cast<float>(dg0[j]);
        ops::rmsnorm_bwd(x, gamma, rstd, dy, dx, dgamma);
        EXPECT_TRUE(within(f32_values(dx), dxw, tol));
        EXPECT_TRUE(within(f32_values(dgamma), dgw, gtol));
      });
    }
  }
}

// ---- LayerNorm --------------------------------------------------------------------------------

// x in [-1, 3] (mean ~1, so the two-pass variance matters), gamma around 1, beta around 0.
// Gemma's 1 + w: with gamma_offset = 1 the kernels compute exactly what they compute on the f32
// vector 1 + w, forward and backward, so the double references above cover them.
TEST(RmsNorm, GammaOffsetIsTheNormOfOnePlusW) {
  for (DType dt : {DType::kF32, DType::kBF16}) {
    for (auto [n, c] : kSizes) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " " << n << "x" << c);
      OwnedTensor x(Shape{n, c}, dt), dy(Shape{n, c}, dt), y0(Shape{n, c}, dt), y1(Shape{n, c}, dt),
          dx0(Shape{n, c}, dt), dx1(Shape{n, c}, dt), w(Shape{c}, DType::kF32), w1(Shape{c}, DType::kF32),
          r0(Shape{n}, DType::kF32), r1(Shape{n}, DType::kF32), dg0(Shape{c}, DType::kF32),
          dg1(Shape{c}, DType::kF32);
      testing::fill_uniform(x, 7 + c, -2, 2);
      testing::fill_uniform(dy, 8 + n);
      testing::fill_uniform(w, 9, -0.5, 0.5);
      for (int64_t j = 0; j < c; ++j) w1.t.ptr<float>()[j] = 1.0f + w.t.ptr<float>()[j];
      testing::for_each_isa([&] {
        std::memset(dg0.t.data(), 0, dg0.t.nbytes());
        std::memset(dg1.t.data(), 0, dg1.t.nbytes());
        ops::rmsnorm_fwd(x, w, 1e-6f, y0, r0, /*gamma_offset=*/1.0f);
        ops::rmsnorm_fwd(x, w1, 1e-6f, y1, r1);
        EXPECT_EQ(std::memcmp(y0.t.data(), y1.t.data(), y0.t.nbytes()), 0);
        ops::rmsnorm_bwd(x, w, r0, dy, dx0, dg0, /*gamma_offset=*/1.0f);
        ops::rmsnorm_bwd(x, w1, r1, dy, dx1, dg1);
        EXPECT_EQ(std::memcmp(dx0.t.data(), dx1.t.data(), dx0.t.nbytes()), 0);
        EXPECT_EQ(std::memcmp(dg0.t.data(), dg1.t.data(), dg0.t.nbytes()), 0);
      });
    }
  }
}

TEST(LayerNorm, ForwardMatchesReference) {
  const double eps = 1e-5;
  for (DType dt : {DType::kF32, DType::kBF16}) {
    for (bool with_beta : {true, false}) {
      for (auto [n, c] : kSizes) {
        SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " " << n << "x" << c << " beta=" << with_beta);
        OwnedTensor x(Shape{n, c}, dt), y(Shape{n, c}, dt), gamma(Shape{c}, DType::kF32),
            beta(Shape{c}, DType::kF32), mean(Shape{n}, DType::kF32), rstd(Shape{n}, DType::kF32);
        auto xv = testing::fill_uniform(x, 6 + c, -1, 3);
        auto gv = testing::fill_uniform(gamma, 7, 0.5, 1.5);
        auto bv = testing::fill_uniform(beta, 8, -0.5, 0.5);
        std::vector<double> want(n * c), mw(n), rw(n), tol(n * c), mtol(n), rtol(n);
        ops::layernorm_fwd_ref(xv.data(), gv.data(), with_beta ? bv.data() : nullptr, eps, n, c, want.data(),
                               mw.data(), rw.data());
        // The mean's error is relative to mean|x|; it shifts every x - mean, so y's bound is
        // relative to (|x - mean| + mean|x|) * rstd * |gamma| + |beta|.
        for (int64_t r = 0; r < n; ++r) {
          double mean_abs = 0;
          for (int64_t j = 0; j < c; ++j) mean_abs += std::abs(xv[r * c + j]) / c;
          mtol[r] = f32_growth(c) * mean_abs;
          // var = mean((x - mean)^2) also sees the mean's error, relative to mean|x| / std.
          rtol[r] = f32_growth(c) * rw[r] * (1 + mean_abs * rw[r]);
          for (int64_t j = 0; j < c; ++j) {
            const int64_t i = r * c + j;
            const double scale = (std::abs(xv[i] - mw[r]) + mean_abs) * rw[r] * std::abs(gv[j]) +
                                 (with_beta ? std::abs(bv[j]) : 0.0);
            tol[i] = store_tol(f32_growth(c) * scale * (1 + mean_abs * rw[r]), want[i], dt);
          }
        }
        testing::for_each_isa([&] {
          ops::layernorm_fwd(x, gamma, with_beta ? beta.t : Tensor(), static_cast<float>(eps), y, mean, rstd);
          EXPECT_TRUE(within(f32_values(y), want, tol));
          EXPECT_TRUE(within(f32_values(mean), mw, mtol));
          EXPECT_TRUE(within(f32_values(rstd), rw, rtol));
        });
      }
    }
  }
}

TEST(LayerNorm, BackwardMatchesReferenceAndAccumulates) {
  const double eps = 1e-5;
  for (DType dt : {DType::kF32, DType::kBF16}) {
    for (const auto& size : kSizes) {  // named, not bound: clang 14 lambdas cannot capture bindings
      const int64_t n = size.first, c = size.second;
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " " << n << "x" << c);
      OwnedTensor x(Shape{n, c}, dt), y(Shape{n, c}, dt), dy(Shape{n, c}, dt), dx(Shape{n, c}, dt),
          gamma(Shape{c}, DType::kF32), beta(Shape{c}, DType::kF32), mean(Shape{n}, DType::kF32),
          rstd(Shape{n}, DType::kF32), dgamma(Shape{c}, DType::kF32), dbeta(Shape{c}, DType::kF32);
      auto xv = testing::fill_uniform(x, 9 + c, -1, 3);
      auto dyv = testing::fill_uniform(dy, 10 + n);
      auto gv = testing::fill_uniform(gamma, 11, 0.5, 1.5);
      testing::fill_uniform(beta, 12);
      std::vector<double> dxw(n * c), dgw(c), dbw(c), tol(n * c), gtol(c), btol(c), sum_g(c, 0.0),
          sum_b(c, 0.0);
      ops::layernorm_bwd_ref(xv.data(), gv.data(), eps, dyv.data(), n, c, dxw.data(), dgw.data(), dbw.data());
      // dx = r (g - mean(g) - xhat mean(g xhat)): bound relative to the terms' magnitudes, with the
      // statistics' error growth (as in the forward) on each.
      for (int64_t r = 0; r < n; ++r) {
        double mu = 0, ss = 0, mean_abs = 0, abs_g = 0, abs_gx = 0;
        for (int64_t j = 0; j < c; ++j) mu += xv[r * c + j] / c, mean_abs += std::abs(xv[r * c + j]) / c;
        for (int64_t j = 0; j < c; ++j) ss += (xv[r * c + j] - mu) * (xv[r * c + j] - mu);
        const double rs = 1.0 / std::sqrt(ss / c + eps), grow = f32_growth(c) * (1 + mean_abs * rs);
        for (int64_t j = 0; j < c; ++j) {
          const double g = std::abs(dyv[r * c + j] * gv[j]), xhat = (xv[r * c + j] - mu) * rs;
          abs_g += g / c;
          abs_gx += g * (std::abs(xhat) + mean_abs * rs) / c;
        }
        for (int64_t j = 0; j < c; ++j) {
          const int64_t i = r * c + j;
          const double xhat = std::abs(xv[i] - mu) * rs + mean_abs * rs;
          tol[i] = store_tol(grow * rs * (std::abs(dyv[i] * gv[j]) + abs_g + xhat * abs_gx), dxw[i], dt);
          sum_g[j] += grow * std::abs(dyv[i]) * xhat;
          // dbeta's terms are summed in f32 over blocks of 32 rows (norm_kernels.inc) before the
          // double partials: up to 32 roundings on each term.
          sum_b[j] += 32 * kU * std::abs(dyv[i]);
        }
      }
      for (int64_t j = 0; j < c; ++j) {
        gtol[j] = sum_g[j] + kU * (1 + std::abs(dgw[j])) + 1e-30;
        btol[j] = sum_b[j] + kU * (1 + std::abs(dbw[j])) + 1e-30;
        dgw[j] += 1.0;  // both accumulate onto a prior value of 1
        dbw[j] += 1.0;
      }
      testing::for_each_isa([&] {
        ops::layernorm_fwd(x, gamma, beta, static_cast<float>(eps), y, mean, rstd);
        for (int64_t j = 0; j < c; ++j) dgamma.t.ptr<float>()[j] = dbeta.t.ptr<float>()[j] = 1.0f;
        ops::layernorm_bwd(x, gamma, mean, rstd, dy, dx, dgamma, dbeta);
        EXPECT_TRUE(within(f32_values(dx), dxw, tol));
        EXPECT_TRUE(within(f32_values(dgamma), dgw, gtol));
        EXPECT_TRUE(within(f32_values(dbeta), dbw, btol));
      });
    }
  }
}

// ---- references against finite differences ---------------------------------------------------

// L = sum(w * y(x, gamma, beta)); central differences with h = 1e-6 have truncation error
// ~h^2 |y'''| and cancellation ~1e-16 / h: both below 1e-8 here.
TEST(NormReference, GradientsMatchFiniteDifferences) {
  const int64_t n = 3, c = 5;
  const double eps = 1e-5, h = 1e-6;
  std::vector<double> x(n * c), w(n * c), g(c), b(c);
  for (int64_t i = 0; i < n * c; ++i) x[i] = std::sin(1.3 * i) * 2 + 0.5, w[i] = std::cos(0.7 * i);
  for (int64_t j = 0; j < c; ++j) g[j] = 0.8 + 0.1 * j, b[j] = 0.05 * j;
  for (bool layer : {false, true}) {
    auto loss = [&](const std::vector<double>& xx, const std::vector<double>& gg,
                    const std::vector<double>& bb) {
      std::vector<double> y(n * c), m(n), r(n);
      if (layer)
        ops::layernorm_fwd_ref(xx.data(), gg.data(), bb.data(), eps, n, c, y.data(), m.data(), r.data());
      else
        ops::rmsnorm_fwd_ref(xx.data(), gg.data(), eps, n, c, y.data(), r.data());
      double s = 0;
      for (int64_t i = 0; i < n * c; ++i) s += w[i] * y[i];
      return s;
    };
    std::vector<double> dx(n * c), dg(c), db(c);
    if (layer)
      ops::layernorm_bwd_ref(x.data(), g.data(), eps, w.data(), n, c, dx.data(), dg.data(), db.data());
    else
      ops::rmsnorm_bwd_ref(x.data(), g.data(), eps, w.data(), n, c, dx.data(), dg.data());
    auto central = [&](std::vector<double>& v, int64_t i, auto&& f) {
      const double keep = v[i];
      v[i] = keep + h;
      double up = f();
      v[i] = keep - h;
      double down = f();
      v[i] = keep;
      return (up - down) / (2 * h);
    };
    auto f = [&] { return loss(x, g, b); };
    for (int64_t i = 0; i < n * c; ++i)
      EXPECT_NEAR(dx[i], central(x, i, f), 1e-8) << "dx " << i << " layer=" << layer;
    for (int64_t j = 0; j < c; ++j) EXPECT_NEAR(dg[j], central(g, j, f), 1e-8) << "dgamma " << j;
    if (layer) {
      for (int64_t j = 0; j < c; ++j) EXPECT_NEAR(db[j], central(b, j, f), 1e-8) << "dbeta " << j;
    }
  }
}

// ---- determinism, aliasing, errors ------------------------------------------------------------

// The parameter-gradient reduction is fixed-order: two runs give the same bits.
TEST(NormBackward, ParameterGradientsAreDeterministic) {
  const int64_t n = 301, c = 257;
  OwnedTensor x(Shape{n, c}, DType::kBF16), dy(Shape{n, c}, DType::kBF16), dx(Shape{n, c}, DType::kBF16),
      y(Shape{n, c}, DType::kBF16), gamma(Shape{c}, DType::kF32), mean(Shape{n}, DType::kF32),
      rstd(Shape{n}, DType::kF32), dg1(Shape{c}, DType::kF32), dg2(Shape{c}, DType::kF32),
      db1(Shape{c}, DType::kF32), db2(Shape{c}, DType::kF32);
  testing::fill_uniform(x, 1);
  testing::fill_uniform(dy, 2);
  testing::fill_uniform(gamma, 3);
  testing::for_each_isa([&] {
    ops::layernorm_fwd(x, gamma, Tensor(), 1e-5f, y, mean, rstd);
    for (const Tensor* t : {&dg1.t, &dg2.t, &db1.t, &db2.t}) std::memset(t->data(), 0, c * 4);
    ops::layernorm_bwd(x, gamma, mean, rstd, dy, dx, dg1, db1);
    ops::layernorm_bwd(x, gamma, mean, rstd, dy, dx, dg2, db2);
    EXPECT_EQ(std::memcmp(dg1.t.data(), dg2.t.data(), c * 4), 0);
    EXPECT_EQ(std::memcmp(db1.t.data(), db2.t.data(), c * 4), 0);
    ops::rmsnorm_fwd(x, gamma, 1e-5f, y, rstd);
    std::memset(dg1.t.data(), 0, c * 4);
    std::memset(dg2.t.data(), 0, c * 4);
    ops::rmsnorm_bwd(x, gamma, rstd, dy, dx, dg1);
    ops::rmsnorm_bwd(x, gamma, rstd, dy, dx, dg2);
    EXPECT_EQ(std::memcmp(dg1.t.data(), dg2.t.data(), c * 4), 0);
  });
}

// y may alias x: the row is read for its statistics before it is overwritten.
TEST(NormForward, InPlaceMatchesOutOfPlace) {
  const int64_t n = 9, c = 131;
  OwnedTensor x(Shape{n, c}, DType::kF32), y(Shape{n, c}, DType::kF32), gamma(Shape{c}, DType::kF32),
      rstd(Shape{n}, DType::kF32), mean(Shape{n}, DType::kF32);
  testing::fill_uniform(gamma, 4);
  testing::fill_uniform(x, 5);
  ops::rmsnorm_fwd(x, gamma, 1e-6f, y, rstd);
  ops::rmsnorm_fwd(x, gamma, 1e-6f, x, rstd);
  EXPECT_EQ(std::memcmp(x.t.data(), y.t.data(), n * c * 4), 0);
  testing::fill_uniform(x, 6);
  ops::layernorm_fwd(x, gamma, Tensor(), 1e-6f, y, mean, rstd);
  ops::layernorm_fwd(x, gamma, Tensor(), 1e-6f, x, mean, rstd);
  EXPECT_EQ(std::memcmp(x.t.data(), y.t.data(), n * c * 4), 0);
}

// A NaN in gamma (every payload bit set, which rounding without a NaN check turns into -0) gives
// NaN in its column of a bf16 output, wherever the column falls in the AVX2 build's 16-value pairs
// (the store checks a pair for NaN once and rounds without the select when there is none), and
// leaves the other columns as they were.
TEST(NormForward, NanGammaReachesTheBf16Output) {
  const int64_t n = 3, c = 45;  // two whole pairs and a tail of 13
  const int64_t nan_cols[] = {0, 5, 12, 16, 31, 44};
  OwnedTensor x(Shape{n, c}, DType::kBF16), y(Shape{n, c}, DType::kBF16), clean(Shape{n, c}, DType::kBF16),
      gamma(Shape{c}, DType::kF32), rstd(Shape{n}, DType::kF32), mean(Shape{n}, DType::kF32);
  testing::fill_uniform(x, 7);
  auto check = [&](const char* what, auto&& norm) {
    SCOPED_TRACE(what);
    testing::for_each_isa([&] {
      testing::fill_uniform(gamma, 8, 0.5, 1.5);
      norm(clean);
      for (int64_t j : nan_cols) gamma.t.ptr<uint32_t>()[j] = 0x7fffffffu;
      norm(y);
      for (int64_t r = 0; r < n; ++r)
        for (int64_t j = 0; j < c; ++j) {
          const uint16_t got = y.t.ptr<uint16_t>()[r * c + j];
          if (std::find(std::begin(nan_cols), std::end(nan_cols), j) != std::end(nan_cols)) {
            ASSERT_TRUE(std::isnan(bf16_to_f32(got))) << r << ", " << j;
          } else {
            ASSERT_EQ(got, clean.t.ptr<uint16_t>()[r * c + j]) << r << ", " << j;
          }
        }
    });
  };
  check("rmsnorm", [&](OwnedTensor& out) { ops::rmsnorm_fwd(x, gamma, 1e-6f, out, rstd); });
  check("layernorm",
        [&](OwnedTensor& out) { ops::layernorm_fwd(x, gamma, Tensor(), 1e-6f, out, mean, rstd); });
}

// accumulate_dx: dx's prior value plus the row gradient, added in f32 and rounded once. In f32 that
// is bitwise the plain gradient plus the prior (the sum autodiff's add node computed); in bf16 the
// plain gradient is rounded first, so the two differ by at most a bf16 rounding of each. dgamma and
// dbeta do not depend on it.
TEST(Norm, AccumulatingDxAddsToThePriorValue) {
  for (DType dt : {DType::kF32, DType::kBF16}) {
    for (const auto& size : kSizes) {  // named, not bound: clang 14 lambdas cannot capture bindings
      const int64_t n = size.first, c = size.second;
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " " << n << "x" << c);
      OwnedTensor x(Shape{n, c}, dt), dy(Shape{n, c}, dt), y(Shape{n, c}, dt), plain(Shape{n, c}, dt),
          acc(Shape{n, c}, dt), prior(Shape{n, c}, dt), gamma(Shape{c}, DType::kF32),
          beta(Shape{c}, DType::kF32), mean(Shape{n}, DType::kF32), rstd(Shape{n}, DType::kF32),
          dg0(Shape{c}, DType::kF32), dg1(Shape{c}, DType::kF32), db0(Shape{c}, DType::kF32),
          db1(Shape{c}, DType::kF32);
      testing::fill_uniform(x, 11 + c, -1, 3);
      testing::fill_uniform(dy, 12 + n);
      testing::fill_uniform(gamma, 13, 0.5, 1.5);
      testing::fill_uniform(beta, 14, -0.5, 0.5);
      testing::fill_uniform(prior, 15 + n, -2, 2);
      const std::vector<double> pv = f32_values(prior);  // as stored (rounded to bf16)
      for (const bool layer : {false, true}) {
        SCOPED_TRACE(layer ? "layernorm" : "rmsnorm");
        testing::for_each_isa([&] {
          for (OwnedTensor* t : {&dg0, &dg1, &db0, &db1}) std::memset(t->t.data(), 0, t->t.nbytes());
          std::memcpy(acc.t.data(), prior.t.data(), prior.t.nbytes());
          if (layer) {
            ops::layernorm_fwd(x, gamma, beta, 1e-5f, y, mean, rstd);
            ops::layernorm_bwd(x, gamma, mean, rstd, dy, plain, dg0, db0);
            ops::layernorm_bwd(x, gamma, mean, rstd, dy, acc, dg1, db1, /*accumulate_dx=*/true);
          } else {
            ops::rmsnorm_fwd(x, gamma, 1e-6f, y, rstd, 0.25f);
            ops::rmsnorm_bwd(x, gamma, rstd, dy, plain, dg0, 0.25f);
            ops::rmsnorm_bwd(x, gamma, rstd, dy, acc, dg1, 0.25f, /*accumulate_dx=*/true);
          }
          EXPECT_EQ(std::memcmp(dg0.t.data(), dg1.t.data(), dg0.t.nbytes()), 0);
          EXPECT_EQ(std::memcmp(db0.t.data(), db1.t.data(), db0.t.nbytes()), 0);
          const std::vector<double> got = f32_values(acc), dx = f32_values(plain);
          for (int64_t i = 0; i < n * c; ++i) {
            if (dt == DType::kF32) {
              const float want = static_cast<float>(pv[i]) + static_cast<float>(dx[i]);
              ASSERT_EQ(static_cast<float>(got[i]), want) << i;
            } else {
              // Half a bf16 ulp of the plain gradient (rounded before the add) and of the sum.
              ASSERT_NEAR(got[i], pv[i] + dx[i], 0x1p-8 * (std::abs(dx[i]) + std::abs(got[i]))) << i;
            }
          }
        });
      }
    }
  }
}

TEST(Norm, RejectsBadShapesAndDtypes) {
  OwnedTensor x(Shape{4, 8}, DType::kF32), y(Shape{4, 8}, DType::kF32), yb(Shape{4, 8}, DType::kBF16),
      g(Shape{8}, DType::kF32), g7(Shape{7}, DType::kF32), gb(Shape{8}, DType::kBF16),
      r(Shape{4}, DType::kF32), r3(Shape{3}, DType::kF32);
  auto expect_shape_error = [](auto&& f, const char* needle) {
    try {
      f();
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kShape);
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_shape_error([&] { ops::rmsnorm_fwd(x, g7, 1e-5f, y, r); }, "gamma");
  expect_shape_error([&] { ops::rmsnorm_fwd(x, gb, 1e-5f, y, r); }, "gamma");
  expect_shape_error([&] { ops::rmsnorm_fwd(x, g, 1e-5f, yb, r); }, "y");
  expect_shape_error([&] { ops::rmsnorm_fwd(x, g, 1e-5f, y, r3); }, "rstd");
  expect_shape_error([&] { ops::layernorm_fwd(x, g, g7, 1e-5f, y, r, r); }, "beta");
  expect_shape_error([&] { ops::layernorm_bwd(x, g, r, r, y, yb, g, g); }, "dx");
}

}  // namespace
}  // namespace tessera
