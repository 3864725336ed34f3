// AdamW and SGD against double references step by step (weight decay 0 and non-zero, grad_scale,
// bf16 copy bit for bit, threaded sizes); decoupled decay in isolation; global norm and clip scale,
// and clipping applied through grad_scale; errors for mismatched arrays and bad steps.
#include "tessera/ops/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "tessera/core/error.h"
#include "testing/op_test_util.h"

namespace tessera {
namespace {

using testing::OwnedTensor;

constexpr double kEps = 0x1p-24;  // f32 unit roundoff

// One AdamW step of the kernel against the double reference started from the kernel's own f32
// state, so that each step is checked with a one-step bound (the trajectory is checked step by
// step, not as an accumulated drift). First-order bounds per element, in units of eps = 2^-24 and
// relative to the magnitudes of the terms; every constant rounded to f32 counts one eps:
//   g' = s g                      2   (s, product)
//   m  = b1 m + (1 - b1) g'       6   on m_mag = b1 |m| + (1 - b1) |g'|  (b1 m: 2; (1-b1) g': 4; sum: 1)
//   v  = b2 v + (1 - b2) g'^2     8   on v_mag = b2 v + (1 - b2) g'^2     (g'^2: 5, then 2 and the sum)
//   denom = sqrt(v) / sqrt(bc2) + eps               8   (v / 2 + 1, constant and product 2, add 1)
//   step  = lr / bc1 * m / denom                   17   (m 6, denom 8, divide 1, constant and product 2)
//   p  = decay p - step           3 on |p| (decay, product, subtraction) + 18 on lr m_mag / bc1 / denom.
void check_adamw_case(int64_t n, double wd, bool copy, int steps) {
  SCOPED_TRACE(::testing::Message() << "n=" << n << " wd=" << wd << " copy=" << copy);
  OwnedTensor p(Shape{n}, DType::kF32), g(Shape{n}, DType::kF32), m(Shape{n}, DType::kF32),
      v(Shape{n}, DType::kF32), pb(Shape{n}, DType::kBF16);
  ops::AdamWHyperparams hp;
  hp.lr = 1e-2;
  hp.b2 = 0.95;
  hp.weight_decay = wd;
  hp.grad_scale = 0.3;
  testing::for_each_isa([&] {
    testing::fill_uniform(p, 1);
    std::memset(m.t.data(), 0, m.t.nbytes());  // torch starts both moments at 0
    std::memset(v.t.data(), 0, v.t.nbytes());
    for (int step = 1; step <= steps; ++step) {
      SCOPED_TRACE(::testing::Message() << "step " << step);
      hp.step = step;
      const auto gv = testing::fill_uniform(g, 100 + step, -2, 2);
      auto pr = testing::to_vector(p), mr = testing::to_vector(m), vr = testing::to_vector(v);
      const auto p0 = pr, m0 = mr, v0 = vr;
      ops::adamw_update_ref(pr, gv, mr, vr, hp);
      ops::adamw_update(p, g, m, v, hp, copy ? pb.t : Tensor());
      const double bc1 = 1 - std::pow(hp.b1, step), bc2 = 1 - std::pow(hp.b2, step);
      for (int64_t i = 0; i < n; ++i) {
        const double gs = std::abs(hp.grad_scale * gv[i]);
        const double m_mag = hp.b1 * std::abs(m0[i]) + (1 - hp.b1) * gs;
        const double v_mag = hp.b2 * v0[i] + (1 - hp.b2) * gs * gs;
        const double u_mag = m_mag / bc1 / (std::sqrt(vr[i] / bc2) + hp.eps);
        ASSERT_NEAR(testing::get(m, i), mr[i], 6 * kEps * m_mag) << "m at " << i;
        ASSERT_NEAR(testing::get(v, i), vr[i], 8 * kEps * v_mag) << "v at " << i;
        ASSERT_NEAR(testing::get(p, i), pr[i], 3 * kEps * std::abs(p0[i]) + 18 * kEps * hp.lr * u_mag)
            << "p at " << i;
        if (copy) {
          ASSERT_EQ(pb.t.ptr<uint16_t>()[i], f32_to_bf16(p.t.ptr<float>()[i])) << "bf16 copy at " << i;
        }
      }
    }
  });
}

TEST(AdamW, MatchesReferenceOverSeveralSteps) {
  for (int64_t n : {1, 67, 4099})
    for (double wd : {0.0, 0.1})
      for (bool copy : {false, true}) check_adamw_case(n, wd, copy, 5);
}

TEST(AdamW, MatchesReferenceThreaded) {
  check_adamw_case(300007, 0.1, true, 2);
}  // > 4 chunks of 65536

// With g = 0 and m = v = 0 the Adam direction is 0/(0 + eps) = 0, so only the decoupled decay acts:
// p <- (1 - lr wd) p exactly in f32, and the moments stay 0 (the decay never enters m or v).
TEST(AdamW, WeightDecayIsDecoupled) {
  const int64_t n = 67;
  OwnedTensor p(Shape{n}, DType::kF32), g(Shape{n}, DType::kF32), m(Shape{n}, DType::kF32),
      v(Shape{n}, DType::kF32);
  for (double wd : {0.0, 0.1}) {
    const auto p0 = testing::fill_uniform(p, 3);
    std::memset(g.t.data(), 0, g.t.nbytes());
    std::memset(m.t.data(), 0, m.t.nbytes());
    std::memset(v.t.data(), 0, v.t.nbytes());
    ops::AdamWHyperparams hp;
    hp.lr = 1e-2;
    hp.weight_decay = wd;
    ops::adamw_update(p, g, m, v, hp);
    const float decay = static_cast<float>(1.0 - hp.lr * wd);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(p.t.ptr<float>()[i], decay * static_cast<float>(p0[i])) << "wd=" << wd << " at " << i;
      ASSERT_EQ(m.t.ptr<float>()[i], 0.0f);
      ASSERT_EQ(v.t.ptr<float>()[i], 0.0f);
    }
  }
}

// A NaN gradient (here with every payload bit set, which naive rounding would turn into -0) must
// reach the parameters and their bf16 copy as NaN, so that a diverged step cannot pass unseen.
TEST(AdamW, NanGradientReachesTheBf16Copy) {
  const int64_t n = 19;
  OwnedTensor p(Shape{n}, DType::kF32), g(Shape{n}, DType::kF32), m(Shape{n}, DType::kF32),
      v(Shape{n}, DType::kF32), pb(Shape{n}, DType::kBF16);
  testing::for_each_isa([&] {
    testing::fill_uniform(p, 1);
    std::memset(m.t.data(), 0, m.t.nbytes());
    std::memset(v.t.data(), 0, v.t.nbytes());
    for (int64_t i = 0; i < n; ++i) g.t.ptr<uint32_t>()[i] = 0x7fffffffu;
    ops::adamw_update(p, g, m, v, {}, pb);
    for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(std::isnan(bf16_to_f32(pb.t.ptr<uint16_t>()[i]))) << i;
    testing::fill_uniform(p, 1);
    ops::sgd_update(p, g, {}, pb);
    for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(std::isnan(bf16_to_f32(pb.t.ptr<uint16_t>()[i]))) << i;
  });
}

// SGD: p - lr * (s g): constants s and lr and two products (4 eps on lr |s g|), then the
// subtraction (1 eps on |p| + lr |s g|).
TEST(Sgd, MatchesReference) {
  for (int64_t n : {1, 67, 300007})
    for (bool copy : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "n=" << n << " copy=" << copy);
      OwnedTensor p(Shape{n}, DType::kF32), g(Shape{n}, DType::kF32), pb(Shape{n}, DType::kBF16);
      const ops::SgdHyperparams hp{0.1, 0.3};
      testing::for_each_isa([&] {
        auto pr = testing::fill_uniform(p, 5);
        const auto gv = testing::fill_uniform(g, 6);
        const auto p0 = pr;
        ops::sgd_update_ref(pr, gv, hp);
        ops::sgd_update(p, g, hp, copy ? pb.t : Tensor());
        for (int64_t i = 0; i < n; ++i) {
          const double tol = kEps * std::abs(p0[i]) + 5 * kEps * hp.lr * std::abs(hp.grad_scale * gv[i]);
          ASSERT_NEAR(testing::get(p, i), pr[i], tol) << "at " << i;
          if (copy) {
            ASSERT_EQ(pb.t.ptr<uint16_t>()[i], f32_to_bf16(p.t.ptr<float>()[i])) << "bf16 copy at " << i;
          }
        }
      });
    }
}

// Each square of a float is exact in double and the squares are summed in double: 300,075 of them
// err by at most n x 2^-53 = 3.3e-11 relative on the sum (half that on its square root), whatever
// the order, so one rank and N ranks summing other pieces agree to that.
TEST(GlobalNorm, MatchesReference) {
  OwnedTensor a(Shape{1}, DType::kF32), b(Shape{67}, DType::kF32), c(Shape{300007}, DType::kF32),
      empty(Shape{0}, DType::kF32);
  const std::vector<std::vector<double>> ref = {
      testing::fill_uniform(a, 1), testing::fill_uniform(b, 2, -3, 3), testing::fill_uniform(c, 3), {}};
  const std::vector<Tensor> grads = {a, b, c, empty};
  const double want = ops::global_norm_ref(ref);
  testing::for_each_isa([&] { EXPECT_NEAR(ops::global_norm(grads), want, 2e-11 * want); });
  EXPECT_EQ(ops::global_norm({}), 0.0);
  OwnedTensor bf(Shape{3}, DType::kBF16);
  const std::vector<Tensor> bad = {a, bf};
  EXPECT_THROW(ops::global_norm(bad), Error);
}

TEST(GlobalNorm, ClipScaleFollowsOptax) {
  EXPECT_EQ(ops::clip_scale(2.0, 1.0), 0.5f);
  EXPECT_EQ(ops::clip_scale(0.5, 1.0), 1.0f);
  EXPECT_EQ(ops::clip_scale(1.0, 1.0), 1.0f);
  EXPECT_EQ(ops::clip_scale(5.0, 0.0), 1.0f);  // threshold <= 0: clipping off
  EXPECT_EQ(ops::clip_scale(5.0, -1.0), 1.0f);
  // optax.clip_by_global_norm: g * threshold / max(norm, threshold).
  for (double norm : {0.1, 0.9, 1.0, 1.1, 37.5})
    EXPECT_FLOAT_EQ(ops::clip_scale(norm, 1.0), 1.0 / std::max(norm, 1.0)) << norm;
}

// Clipping goes through grad_scale: the update with grad_scale = clip_scale(norm, threshold) is bit
// for bit the update of the gradients clipped beforehand in f32.
TEST(GlobalNorm, ClippingThroughGradScale) {
  const int64_t n = 4099;
  OwnedTensor p(Shape{n}, DType::kF32), g(Shape{n}, DType::kF32), m(Shape{n}, DType::kF32),
      v(Shape{n}, DType::kF32);
  OwnedTensor p2(Shape{n}, DType::kF32), g2(Shape{n}, DType::kF32), m2(Shape{n}, DType::kF32),
      v2(Shape{n}, DType::kF32);
  const auto gv = testing::fill_uniform(g, 7);
  const std::vector<Tensor> grads = {g};
  const double norm = ops::global_norm(grads);
  const float scale = ops::clip_scale(norm, 1.0);
  ASSERT_LT(scale, 1.0f);
  EXPECT_NEAR(scale, 1.0 / ops::global_norm_ref({gv}), 4096 * kEps);
  for (int64_t i = 0; i < n; ++i) g2.t.ptr<float>()[i] = scale * g.t.ptr<float>()[i];
  testing::fill_uniform(p, 8);
  testing::fill_uniform(m, 9);
  testing::fill_uniform(v, 10, 0, 1);
  std::memcpy(p2.t.data(), p.t.data(), p.t.nbytes());
  std::memcpy(m2.t.data(), m.t.data(), m.t.nbytes());
  std::memcpy(v2.t.data(), v.t.data(), v.t.nbytes());
  ops::AdamWHyperparams hp;
  hp.step = 3;
  hp.grad_scale = scale;
  ops::adamw_update(p, g, m, v, hp);
  hp.grad_scale = 1.0;
  ops::adamw_update(p2, g2, m2, v2, hp);
  EXPECT_EQ(std::memcmp(p.t.data(), p2.t.data(), p.t.nbytes()), 0);
  EXPECT_EQ(std::memcmp(m.t.data(), m2.t.data(), m.t.nbytes()), 0);
  EXPECT_EQ(std::memcmp(v.t.data(), v2.t.data(), v.t.nbytes()), 0);
}

TEST(AdamW, EmptyArrays) {
  OwnedTensor e(Shape{0}, DType::kF32), eb(Shape{0}, DType::kBF16);
  ops::adamw_update(e, e, e, e, {}, eb);
  ops::sgd_update(e, e, {}, eb);
  const std::vector<Tensor> grads = {e};
  EXPECT_EQ(ops::global_norm(grads), 0.0);
}

TEST(AdamW, RejectsBadArguments) {
  OwnedTensor p(Shape{8}, DType::kF32), g(Shape{8}, DType::kF32), m(Shape{8}, DType::kF32),
      v(Shape{7}, DType::kF32), pb(Shape{8}, DType::kF32);
  ops::AdamWHyperparams hp;
  EXPECT_THROW(ops::adamw_update(p, g, m, v, hp), Error);      // v has 7 elements
  EXPECT_THROW(ops::adamw_update(p, g, m, m, hp, pb), Error);  // the copy must be bf16
  hp.step = 0;
  try {
    ops::adamw_update(p, g, m, m, hp);
    FAIL() << "step 0 accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
  }
  EXPECT_THROW(ops::sgd_update(p, v, {}), Error);
  EXPECT_EQ(ops::adamw_cost(10, true).bytes, 300.0);
}

}  // namespace
}  // namespace tessera
