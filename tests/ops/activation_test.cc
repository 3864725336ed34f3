// Activations: simd_math.h against std:: in double over dense sweeps with the stated bounds;
// act and glu forward/backward against the double references on awkward sizes, in f32 and bf16,
// on both ISA builds; the references' derivatives against finite differences; the strided
// (fused [N, 2F]) gated unit against the contiguous one; names and errors.
#include "tessera/ops/activation.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "tessera/backends/cpu/activation_kernels.h"
#include "tessera/core/error.h"
#include "testing/op_test_util.h"

namespace tessera {
namespace {

using ops::Activation;
using testing::OwnedTensor;
using testing::within;

constexpr double kU = 1.0 / (1 << 24);     // f32 unit roundoff 2^-24
constexpr double kUBf16 = 1.0 / (1 << 8);  // bf16 unit roundoff (8 significant bits)
const Activation kAllActs[] = {Activation::kLinear, Activation::kSilu, Activation::kGeluTanh,
                               Activation::kGeluErf, Activation::kSwish1702};

// ---- simd_math.h ------------------------------------------------------------------------------

// Every 2^11-th float bit pattern in [lo, hi] (both signs when lo < 0): 4096 points per binade,
// so every exponent and every region of each polynomial is visited.
std::vector<float> sweep(float lo, float hi) {
  std::vector<float> v;
  for (uint32_t u = 0; u < 0x7f800000u; u += 1u << 11) {
    float f = std::bit_cast<float>(u);
    if (f >= lo && f <= hi) v.push_back(f);
    if (-f >= lo && -f <= hi && f != 0) v.push_back(-f);
  }
  v.push_back(lo);
  v.push_back(hi);
  return v;
}

std::vector<float> apply(cpu::MathFn fn, const std::vector<float>& x) {
  std::vector<float> y(x.size());
  cpu::activation_kernels().math_f32(fn, x.data(), y.data(), static_cast<int64_t>(x.size()));
  return y;
}

// The points of a sweep with their exact values (computed once, shared by both ISA runs).
struct Sweep {
  std::vector<float> x;
  std::vector<double> want;
};

Sweep make_sweep(float lo, float hi, double (*ref)(double)) {
  Sweep s{sweep(lo, hi), {}};
  s.want.reserve(s.x.size());
  for (float v : s.x) s.want.push_back(ref(v));
  return s;
}

// Largest ratio of |f(x) - exact| to the stated bound rel * |exact| + 2^-149 (the second term is
// the subnormal spacing: it matters only where the result underflows). <= 1 means within.
double worst_ratio(cpu::MathFn fn, const Sweep& s, double rel) {
  std::vector<float> y = apply(fn, s.x);
  double worst = 0;
  for (size_t i = 0; i < s.x.size(); ++i) {
    double ratio = std::abs(y[i] - s.want[i]) / (rel * std::abs(s.want[i]) + std::ldexp(1.0, -149));
    if (!(ratio <= worst)) worst = std::isnan(ratio) ? INFINITY : ratio;
  }
  return worst;
}

double exp_d(double x) {
  return std::exp(x);
}
double tanh_d(double x) {
  return std::tanh(x);
}
double erf_d(double x) {
  return std::erf(x);
}
double erfc_d(double x) {
  return std::erfc(x);
}

TEST(SimdMath, ExpWithinStatedBound) {
  auto x = make_sweep(-110.0f, 88.7f, exp_d);  // normal results from -87.3 up, subnormal and 0 below
  testing::for_each_isa([&] {
    EXPECT_LE(worst_ratio(cpu::MathFn::kExp, x, 1.5e-7), 1.0);
    auto s = apply(cpu::MathFn::kExp, {INFINITY, -INFINITY, NAN, 88.73f, 0.0f, -0.0f});
    EXPECT_EQ(s[0], INFINITY);
    EXPECT_EQ(s[1], 0.0f);
    EXPECT_TRUE(std::isnan(s[2]));
    EXPECT_EQ(s[3], INFINITY);
    EXPECT_EQ(s[4], 1.0f);
    EXPECT_EQ(s[5], 1.0f);
  });
}

// The AVX builds' kExp is exp_ps on registers (simd_avx512.h, simd_avx2.h), which their bf16 and
// gated-unit loops use; it must equal exp_f32 under `omp simd` in the AVX2 build (the same fused
// multiply-adds) bit for bit.
TEST(SimdMath, ExpOnRegistersEqualsTheScalarFormulaBitForBit) {
  if (!isa_supported(Isa::kAvx2)) GTEST_SKIP() << "needs AVX2";
  const std::vector<float> x = [] {
    std::vector<float> v = sweep(-110.0f, 90.0f);
    v.insert(v.end(), {INFINITY, -INFINITY, NAN, 88.73f, 88.72f, -104.0f, -103.9f, -87.3f, 0.0f, -0.0f});
    return v;
  }();
  const Isa before = active_isa();
  set_active_isa(Isa::kAvx2);
  const std::vector<float> want = apply(cpu::MathFn::kExpFormula, x);
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    if (!isa_supported(isa)) continue;
    SCOPED_TRACE(std::string("isa=") + std::string(isa_name(isa)));
    set_active_isa(isa);
    const std::vector<float> got = apply(cpu::MathFn::kExp, x);
    int64_t differ = 0;
    for (size_t i = 0; i < x.size(); ++i)
      if (std::bit_cast<uint32_t>(got[i]) != std::bit_cast<uint32_t>(want[i])) {
        if (differ++ < 5)
          ADD_FAILURE() << "exp(" << x[i] << "): registers " << got[i] << ", formula " << want[i];
      }
    EXPECT_EQ(differ, 0) << "of " << x.size() << " points";
  }
  set_active_isa(before);
}

TEST(SimdMath, TanhWithinStatedBound) {
  auto x = make_sweep(-30.0f, 30.0f, tanh_d);
  testing::for_each_isa([&] {
    EXPECT_LE(worst_ratio(cpu::MathFn::kTanh, x, 2.5e-7), 1.0);
    auto s = apply(cpu::MathFn::kTanh, {INFINITY, -INFINITY, NAN, 1e-30f});
    EXPECT_EQ(s[0], 1.0f);
    EXPECT_EQ(s[1], -1.0f);
    EXPECT_TRUE(std::isnan(s[2]));
    EXPECT_EQ(s[3], 1e-30f);
  });
}

TEST(SimdMath, ErfWithinStatedBound) {
  auto x = make_sweep(-12.0f, 12.0f, erf_d);
  testing::for_each_isa([&] {
    EXPECT_LE(worst_ratio(cpu::MathFn::kErf, x, 3e-7), 1.0);
    auto s = apply(cpu::MathFn::kErf, {INFINITY, -INFINITY, NAN});
    EXPECT_EQ(s[0], 1.0f);
    EXPECT_EQ(s[1], -1.0f);
    EXPECT_TRUE(std::isnan(s[2]));
  });
}

TEST(SimdMath, ErfcWithinStatedBound) {
  auto x = make_sweep(-12.0f, 12.0f, erfc_d);  // erfc underflows to subnormals past 9.2 and to 0 past 10.05
  testing::for_each_isa([&] {
    EXPECT_LE(worst_ratio(cpu::MathFn::kErfc, x, 6e-7), 1.0);
    auto s = apply(cpu::MathFn::kErfc, {INFINITY, -INFINITY, NAN});
    EXPECT_EQ(s[0], 0.0f);
    EXPECT_EQ(s[1], 2.0f);
    EXPECT_TRUE(std::isnan(s[2]));
  });
}

// ---- tolerances -------------------------------------------------------------------------------
// The kernels evaluate in f32. Each activation's f32 error is a few roundings plus simd_math's
// bound (<= 10 * 2^-24 all told), amplified where the exp argument is itself rounded:
//   silu       exp(-x) with x exact: no amplification.
//   gelu tanh  u = sqrt(2/pi) (x + 0.044715 x^3) carries ~4 roundings, and sigmoid(2u) turns an
//              absolute error e in 2u into a relative one of (1 - s) e: at most 4 * 2^-24 * |2u|.
//   gelu erf   z = x / sqrt 2 carries one rounding; erfc's relative condition at z is ~2 z^2.
//   swish 1.702  a = 1.702f x carries the constant's rounding and the product's: an absolute error
//              of 2 * 2^-24 |a| in a, a relative one of at most that in sigmoid(a).
// The backward's derivative has terms that cancel (silu' crosses 0 near x = -1.28), so its bound
// is relative to the sum of the terms' magnitudes, not to the result. bf16 stores add 2^-9 of the
// value.

double gelu_u(double x) {
  return std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x);
}

double cond(Activation a, double x) {
  switch (a) {
    case Activation::kGeluTanh:
      return 4.0 * std::abs(2.0 * gelu_u(x));
    case Activation::kGeluErf:
      return x * x;  // 2 z^2 with z = x / sqrt 2
    case Activation::kSwish1702:
      return 2.0 * std::abs(1.702 * x);
    default:
      return 0.0;
  }
}

// Sum of the magnitudes of the terms of act'(x).
double grad_terms(Activation a, double x) {
  const double pi = std::numbers::pi;
  switch (a) {
    case Activation::kLinear:
      return 1.0;
    case Activation::kSilu: {
      double s = 1.0 / (1.0 + std::exp(-x));
      return s + std::abs(x * s * (1 - s));
    }
    case Activation::kGeluTanh: {
      double s = 1.0 / (1.0 + std::exp(-2.0 * gelu_u(x)));
      return s + std::abs(2.0 * x * s * (1 - s) * std::sqrt(2.0 / pi) * (1 + 3 * 0.044715 * x * x));
    }
    case Activation::kGeluErf:
      return 0.5 * std::erfc(-x / std::sqrt(2.0)) + std::abs(x) * std::exp(-0.5 * x * x) / std::sqrt(2 * pi);
    case Activation::kSwish1702: {
      double s = 1.0 / (1.0 + std::exp(-1.702 * x));
      return s + std::abs(1.702 * x * s * (1 - s));
    }
  }
  return 0;
}

constexpr double kFloor = 1e-37;  // tolerance floor for results that underflow

// Tolerance of act(x) * w for f32 (store rounding included) or bf16.
double fwd_tol(Activation a, double x, double want, DType dt) {
  double t = kU * (12 + cond(a, x)) * std::abs(want) + kFloor;
  return dt == DType::kBF16 ? 1.01 * t + kUBf16 * std::abs(want) : t;
}

// Tolerance of dy * act'(x) * w, |dyw| = |dy * w|.
double bwd_tol(Activation a, double x, double dyw, double want, DType dt) {
  double t = kU * (12 + cond(a, x)) * grad_terms(a, x) * std::abs(dyw) + kFloor;
  return dt == DType::kBF16 ? 1.01 * t + kUBf16 * std::abs(want) : t;
}

// ---- act --------------------------------------------------------------------------------------

TEST(Activation, ElementwiseMatchesReference) {
  for (DType dt : {DType::kF32, DType::kBF16}) {
    for (int64_t n : {1, 7, 67, 4099, 40009}) {  // 40009 > the threading grain
      OwnedTensor x(Shape{n}, dt), dy(Shape{n}, dt), y(Shape{n}, dt), dx(Shape{n}, dt);
      auto xv = testing::fill_uniform(x, 11 + n, -7, 7);
      auto dyv = testing::fill_uniform(dy, 13 + n);
      for (Activation a : kAllActs) {
        SCOPED_TRACE(::testing::Message() << ops::activation_name(a) << " " << dtype_name(dt) << " n=" << n);
        std::vector<double> want(n), dwant(n), tol(n), dtol(n);
        ops::act_fwd_ref(a, xv.data(), want.data(), n);
        ops::act_bwd_ref(a, xv.data(), dyv.data(), dwant.data(), n);
        for (int64_t i = 0; i < n; ++i) {
          tol[i] = fwd_tol(a, xv[i], want[i], dt);
          dtol[i] = bwd_tol(a, xv[i], dyv[i], dwant[i], dt);
        }
        testing::for_each_isa([&] {
          ops::act_fwd(a, x, y);
          EXPECT_TRUE(within(testing::to_vector(y), want, tol));
          ops::act_bwd(a, x, dy, dx);
          EXPECT_TRUE(within(testing::to_vector(dx), dwant, dtol));
        });
      }
    }
  }
}

// The logit soft cap c tanh(x / c) and its backward, and the scale a x, against double: tanh_f32
// is within 2.5e-7 relative, and the few products around it add a rounding each; the backward's
// 1 - t^2 loses relative accuracy where t -> 1 (|x| >> c), bounded by 2 t^2 times t's error.
TEST(Activation, SoftCapAndScaleMatchReference) {
  const double cap = 3.0, a = static_cast<float>(-6.92820323);  // the kernel's f32 factor
  for (DType dt : {DType::kF32, DType::kBF16}) {
    for (int64_t n : {1, 7, 4099, 40009}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " n=" << n);
      OwnedTensor x(Shape{n}, dt), dy(Shape{n}, dt), y(Shape{n}, dt), dx(Shape{n}, dt);
      auto xv = testing::fill_uniform(x, 17 + n, -12, 12);
      auto dyv = testing::fill_uniform(dy, 19 + n);
      std::vector<double> want(n), dwant(n), swant(n), tol(n), dtol(n), stol(n);
      const double store = dt == DType::kBF16 ? kUBf16 : 0;
      for (int64_t i = 0; i < n; ++i) {
        want[i] = ops::soft_cap_ref(xv[i], cap);
        dwant[i] = dyv[i] * ops::soft_cap_grad_ref(xv[i], cap);
        swant[i] = a * xv[i];
        const double t = std::tanh(xv[i] / cap);
        tol[i] = (8 * kU + store) * std::abs(want[i]) + 1e-30;
        dtol[i] = (8 * kU + 2 * t * t * 4e-7) * std::abs(dyv[i]) + store * std::abs(dwant[i]) + 1e-30;
        stol[i] = (kU + store) * std::abs(swant[i]);
      }
      testing::for_each_isa([&] {
        ops::soft_cap_fwd(x, static_cast<float>(cap), y);
        EXPECT_TRUE(within(testing::to_vector(y), want, tol));
        ops::soft_cap_bwd(x, dy, static_cast<float>(cap), dx);
        EXPECT_TRUE(within(testing::to_vector(dx), dwant, dtol));
        ops::scale(x, static_cast<float>(a), y);
        EXPECT_TRUE(within(testing::to_vector(y), swant, stol));
      });
    }
  }
  for (double x = -9.0; x <= 9.0; x += 0.41) {  // the reference's derivative, by central differences
    const double h = 1e-5;
    const double fd = (ops::soft_cap_ref(x + h, cap) - ops::soft_cap_ref(x - h, cap)) / (2 * h);
    EXPECT_NEAR(ops::soft_cap_grad_ref(x, cap), fd, 1e-9) << x;
  }
  OwnedTensor x(Shape{4}, DType::kF32), y(Shape{4}, DType::kF32);
  EXPECT_THROW(ops::soft_cap_fwd(x, 0.0f, y), Error);
}

TEST(Activation, TailsAndLargeInputs) {
  // Far tails: silu and gelu go to 0 (from below) on the left and to x on the right without NaN.
  std::vector<float> v = {-1000.f, -100.f, -30.f, -12.f, 12.f, 30.f, 100.f, 1000.f};
  const int64_t n = static_cast<int64_t>(v.size());
  OwnedTensor x(Shape{n}, DType::kF32), y(Shape{n}, DType::kF32), dy(Shape{n}, DType::kF32),
      dx(Shape{n}, DType::kF32);
  for (int64_t i = 0; i < n; ++i) x.t.ptr<float>()[i] = v[i], dy.t.ptr<float>()[i] = 1.0f;
  for (Activation a : {Activation::kSilu, Activation::kGeluTanh, Activation::kGeluErf}) {
    testing::for_each_isa([&] {
      ops::act_fwd(a, x, y);
      ops::act_bwd(a, x, dy, dx);
      for (int64_t i = 0; i < n; ++i) {
        double want = ops::act_ref(a, v[i]), dwant = ops::act_grad_ref(a, v[i]);
        EXPECT_NEAR(y.t.ptr<float>()[i], want, 1e-6 * std::abs(want) + 1e-30)
            << ops::activation_name(a) << v[i];
        EXPECT_NEAR(dx.t.ptr<float>()[i], dwant, 1e-6 * std::abs(dwant) + 1e-30)
            << ops::activation_name(a) << v[i];
      }
    });
  }
}

// The references' derivatives against central differences (h = 1e-5: truncation ~h^2 f''' and
// cancellation ~1e-16 / h, both below 1e-9).
TEST(Activation, ReferenceGradientsMatchFiniteDifferences) {
  for (Activation a : kAllActs) {
    for (double x = -6.0; x <= 6.0; x += 0.37) {
      const double h = 1e-5;
      double fd = (ops::act_ref(a, x + h) - ops::act_ref(a, x - h)) / (2 * h);
      EXPECT_NEAR(ops::act_grad_ref(a, x), fd, 1e-8) << ops::activation_name(a) << " at " << x;
    }
  }
}

// Hand values: gelu_tanh(1) = 0.5 (1 + tanh(sqrt(2/pi) * 1.044715)) = 0.841191990...;
// gelu_erf(1) = Phi(1) = 0.841344746...; silu(1) = 1 / (1 + e^-1) = 0.731058578...
TEST(Activation, NamedValuesAtOne) {
  EXPECT_NEAR(ops::act_ref(Activation::kGeluTanh, 1.0), 0.8411919906, 1e-9);
  EXPECT_NEAR(ops::act_ref(Activation::kGeluErf, 1.0), 0.8413447461, 1e-9);
  EXPECT_NEAR(ops::act_ref(Activation::kSilu, 1.0), 0.7310585786, 1e-9);
}

// The reference's sigmoid form of the tanh gelu equals the textbook 0.5 x (1 + tanh u) where the
// latter does not cancel.
TEST(Activation, TanhGeluReferenceIsTheTextbookFormula) {
  for (double x = -3.0; x <= 3.0; x += 0.01) {
    double u = std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x);
    EXPECT_NEAR(ops::act_ref(Activation::kGeluTanh, x), 0.5 * x * (1.0 + std::tanh(u)), 1e-14) << x;
  }
}

// ---- gated unit -------------------------------------------------------------------------------

TEST(Glu, MatchesReference) {
  for (DType dt : {DType::kF32, DType::kBF16}) {
    // Widths whose last vector is partial, shorter and longer than 16 lanes (29, 50).
    for (auto [n, f] :
         {std::pair<int64_t, int64_t>{1, 1}, {7, 3}, {67, 130}, {3, 4099}, {67, 521}, {5, 29}, {9, 50}}) {
      OwnedTensor gate(Shape{n, f}, dt), up(Shape{n, f}, dt), dout(Shape{n, f}, dt), out(Shape{n, f}, dt),
          dgate(Shape{n, f}, dt), dup(Shape{n, f}, dt);
      auto g = testing::fill_uniform(gate, 21 + n, -6, 6);
      auto u = testing::fill_uniform(up, 22 + f, -2, 2);
      auto d = testing::fill_uniform(dout, 23 + n * f);
      const int64_t m = n * f;
      for (Activation a : kAllActs) {
        SCOPED_TRACE(::testing::Message()
                     << ops::activation_name(a) << " " << dtype_name(dt) << " " << n << "x" << f);
        std::vector<double> want(m), dg(m), du(m), tol(m), tol_dg(m), tol_du(m);
        ops::glu_fwd_ref(a, g.data(), u.data(), want.data(), m);
        ops::glu_bwd_ref(a, g.data(), u.data(), d.data(), dg.data(), du.data(), m);
        for (int64_t i = 0; i < m; ++i) {
          tol[i] = fwd_tol(a, g[i], want[i], dt);
          tol_dg[i] = bwd_tol(a, g[i], d[i] * u[i], dg[i], dt);
          tol_du[i] = fwd_tol(a, g[i], du[i], dt);
        }
        testing::for_each_isa([&] {
          ops::glu_fwd(a, gate, up, out);
          EXPECT_TRUE(within(testing::to_vector(out), want, tol));
          ops::glu_bwd(a, gate, up, dout, dgate, dup);
          EXPECT_TRUE(within(testing::to_vector(dgate), dg, tol_dg));
          EXPECT_TRUE(within(testing::to_vector(dup), du, tol_du));
        });
      }
    }
  }
}

// glu_bwd_ref against central differences of L = sum(dout * glu_fwd_ref(gate, up)).
TEST(Glu, ReferenceGradientsMatchFiniteDifferences) {
  const int64_t m = 9;
  std::vector<double> g(m), u(m), d(m), dg(m), du(m);
  for (int64_t i = 0; i < m; ++i) g[i] = -4.0 + i, u[i] = 0.3 * i - 1.1, d[i] = 0.7 - 0.2 * i;
  auto loss = [&](const std::vector<double>& gg, const std::vector<double>& uu) {
    std::vector<double> o(m);
    double s = 0;
    ops::glu_fwd_ref(Activation::kSilu, gg.data(), uu.data(), o.data(), m);
    for (int64_t i = 0; i < m; ++i) s += d[i] * o[i];
    return s;
  };
  ops::glu_bwd_ref(Activation::kSilu, g.data(), u.data(), d.data(), dg.data(), du.data(), m);
  const double h = 1e-6;
  for (int64_t i = 0; i < m; ++i) {
    auto gp = g, gm = g, up = u, um = u;
    gp[i] += h, gm[i] -= h, up[i] += h, um[i] -= h;
    EXPECT_NEAR(dg[i], (loss(gp, u) - loss(gm, u)) / (2 * h), 1e-8);
    EXPECT_NEAR(du[i], (loss(g, up) - loss(g, um)) / (2 * h), 1e-8);
  }
}

// gate and up as the two halves of one [N, 2F] buffer (row stride 2F), gradients written into
// another fused buffer: bit-identical to the contiguous computation.
TEST(Glu, StridedHalvesOfFusedProjection) {
  const int64_t n = 19, f = 37;
  for (DType dt : {DType::kF32, DType::kBF16}) {
    const size_t es = dtype_size(dt);
    OwnedTensor fused(Shape{n, 2 * f}, dt), dfused(Shape{n, 2 * f}, dt), gate(Shape{n, f}, dt),
        up(Shape{n, f}, dt), dout(Shape{n, f}, dt), out(Shape{n, f}, dt), out2(Shape{n, f}, dt),
        dgate(Shape{n, f}, dt), dup(Shape{n, f}, dt);
    testing::fill_uniform(fused, 5, -4, 4);
    testing::fill_uniform(dout, 6);
    auto* base = static_cast<char*>(fused.t.data());
    for (int64_t r = 0; r < n; ++r) {
      std::memcpy(static_cast<char*>(gate.t.data()) + r * f * es, base + r * 2 * f * es, f * es);
      std::memcpy(static_cast<char*>(up.t.data()) + r * f * es, base + (r * 2 + 1) * f * es, f * es);
    }
    auto* dbase = static_cast<char*>(dfused.t.data());
    testing::for_each_isa([&] {
      const auto& k = cpu::activation_kernels();
      const bool f32 = dt == DType::kF32;
      cpu::GluFwdArgs fa{Activation::kSilu, n, f, {base, 2 * f}, {base + f * es, 2 * f}, {out2.t.data(), f}};
      (f32 ? k.glu_fwd_f32 : k.glu_fwd_bf16)(fa);
      ops::glu_fwd(Activation::kSilu, gate, up, out);
      EXPECT_EQ(std::memcmp(out.t.data(), out2.t.data(), n * f * es), 0);
      cpu::GluBwdArgs ba{Activation::kSilu,
                         n,
                         f,
                         {base, 2 * f},
                         {base + f * es, 2 * f},
                         {dout.t.data(), f},
                         {dbase, 2 * f},
                         {dbase + f * es, 2 * f}};
      (f32 ? k.glu_bwd_f32 : k.glu_bwd_bf16)(ba);
      ops::glu_bwd(Activation::kSilu, gate, up, dout, dgate, dup);
      for (int64_t r = 0; r < n; ++r) {
        EXPECT_EQ(
            std::memcmp(dbase + r * 2 * f * es, static_cast<char*>(dgate.t.data()) + r * f * es, f * es), 0);
        EXPECT_EQ(
            std::memcmp(dbase + (r * 2 + 1) * f * es, static_cast<char*>(dup.t.data()) + r * f * es, f * es),
            0);
      }
    });
  }
}

// ---- names and errors -------------------------------------------------------------------------

TEST(Activation, NamesFollowMaxText) {
  EXPECT_EQ(ops::activation_from_name("silu"), Activation::kSilu);
  EXPECT_EQ(ops::activation_from_name("gelu"), Activation::kGeluTanh);  // jax.nn.gelu: approximate=True
  EXPECT_EQ(ops::activation_from_name("gelu_exact"), Activation::kGeluErf);
  EXPECT_EQ(ops::activation_from_name("linear"), Activation::kLinear);
  for (Activation a : kAllActs) EXPECT_EQ(ops::activation_from_name(ops::activation_name(a)), a);
  try {
    ops::activation_from_name("relu6");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_NE(std::string(e.what()).find("relu6"), std::string::npos);
  }
}

TEST(Activation, RejectsMismatchedOperands) {
  OwnedTensor a(Shape{4, 8}, DType::kF32), b(Shape{4, 7}, DType::kF32), c(Shape{4, 8}, DType::kBF16),
      i(Shape{4, 8}, DType::kI32);
  EXPECT_THROW(ops::act_fwd(Activation::kSilu, a, b), Error);
  EXPECT_THROW(ops::act_fwd(Activation::kSilu, a, c), Error);
  EXPECT_THROW(ops::act_fwd(Activation::kSilu, i, i), Error);
  EXPECT_THROW(ops::glu_fwd(Activation::kSilu, a, b, a), Error);
  EXPECT_THROW(ops::glu_bwd(Activation::kSilu, a, a, a, a, c), Error);
}

}  // namespace
}  // namespace tessera
