// Softmax cross-entropy: the polynomial exp against exp in double; forward and backward against the
// double reference for f32 and bf16 logits on awkward vocabularies (1, 5, 4099, and one row of
// 32000), with ignored targets, z-loss, masked chunks, in-place backward; the reference's gradients
// against central finite differences; the two in one call (training's) against both; the mean
// helper; errors for bad targets and shapes.
#include "tessera/ops/cross_entropy.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "tessera/backends/cpu/cross_entropy_kernels.h"
#include "tessera/core/error.h"
#include "testing/op_test_util.h"

namespace tessera {
namespace {

using testing::OwnedTensor;

constexpr double kEpsF32 = 0x1p-24;     // f32 unit roundoff
constexpr double kEpsBf16 = 0x1p-8;     // bf16 unit roundoff
constexpr double kExpMaxRelErr = 1e-7;  // stated in cross_entropy_kernels.h

// Absolute error bound on lse computed by the kernel (forward in f32 whatever the logits' dtype,
// since bf16 logits are exact in f32): each exp term is off by kExpMaxRelErr relative and the
// chunk sums in f32 add at most 2048 / 8 = 256 terms per vector lane (AVX2), so the sum is off by
// at most (kExpMaxRelErr + 256 eps) relative, which is the absolute error of its log; plus the
// rounding of lse itself to f32.
double lse_atol(int64_t vocab) {
  return kExpMaxRelErr + static_cast<double>(std::min<int64_t>(vocab, 256)) * kEpsF32;
}

TEST(CrossEntropy, ExpPolynomialMaxRelativeError) {
  // A dense grid over the whole domain: 2^21 points, every ISA.
  const int64_t n = 1 << 21;
  OwnedTensor x(Shape{n}, DType::kF32), y(Shape{n}, DType::kF32);
  const double lo = -87.3, hi = 88.3;
  for (int64_t i = 0; i < n; ++i) x.t.ptr<float>()[i] = static_cast<float>(lo + (hi - lo) * i / (n - 1));
  testing::for_each_isa([&] {
    cpu::cross_entropy_kernels().exp_f32(x.t.ptr<float>(), y.t.ptr<float>(), n);
    double worst = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double want = std::exp(static_cast<double>(x.t.ptr<float>()[i]));
      worst = std::max(worst, std::abs(y.t.ptr<float>()[i] - want) / want);
    }
    EXPECT_LE(worst, kExpMaxRelErr);
    RecordProperty("exp_max_rel_err", std::to_string(worst));
  });
}

TEST(CrossEntropy, ExpPolynomialEdges) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = {0.0f, -0.0f, 1.0f, -88.0f, -1000.0f, -inf, 89.0f, inf, std::nanf("")};
  std::vector<float> y(x.size());
  testing::for_each_isa([&] {
    cpu::cross_entropy_kernels().exp_f32(x.data(), y.data(), static_cast<int64_t>(x.size()));
    EXPECT_EQ(y[0], 1.0f);
    EXPECT_EQ(y[1], 1.0f);
    EXPECT_NEAR(y[2], std::exp(1.0), kExpMaxRelErr * std::exp(1.0));
    // exp(-88) is subnormal: exp_vec flushes it to 0; the AVX-512 build's exp_ps (exp_f32 on a
    // register) keeps the subnormal, within one subnormal step.
    EXPECT_TRUE(y[3] == 0.0f || std::abs(y[3] - std::exp(-88.0)) <= std::ldexp(1.0, -149)) << y[3];
    EXPECT_EQ(y[4], 0.0f);
    EXPECT_EQ(y[5], 0.0f);
    EXPECT_EQ(y[6], inf);
    EXPECT_EQ(y[7], inf);
    EXPECT_TRUE(std::isnan(y[8]));
  });
}

struct Case {
  int64_t n, vocab;
  DType dtype;
  float z_loss;
};

// Random targets in [0, V), every fifth one ignored (-1 or -100, as PyTorch pads).
std::vector<int32_t> make_targets(const Tensor& t, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> out(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = i % 5 == 3 ? (i % 2 ? -1 : -100) : static_cast<int32_t>(rng() % vocab);
    t.ptr<int32_t>()[i] = out[i];
  }
  return out;
}

// Forward then backward (out of place and in place) against the reference.
void check_case(const Case& c, uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "N=" << c.n << " V=" << c.vocab << " " << dtype_name(c.dtype)
                                    << " z=" << c.z_loss);
  OwnedTensor logits(Shape{c.n, c.vocab}, c.dtype), dlogits(Shape{c.n, c.vocab}, c.dtype);
  OwnedTensor targets(Shape{c.n}, DType::kI32), loss(Shape{c.n}, DType::kF32), lse(Shape{c.n}, DType::kF32),
      dloss(Shape{c.n}, DType::kF32);
  const auto x = testing::fill_uniform(logits, seed, -8, 8);
  const auto tg = make_targets(targets, c.vocab, seed + 1);
  const auto g = testing::fill_uniform(dloss, seed + 2, -1, 1);
  std::vector<double> loss_ref, lse_ref, dx_ref;
  ops::cross_entropy_forward_ref(x, tg, c.vocab, c.z_loss, loss_ref, lse_ref);
  ops::cross_entropy_backward_ref(x, tg, c.vocab, c.z_loss, g, dx_ref);

  // lse and loss: lse_atol, then rounding to f32 (|lse| <= 8 + log V here); the z term scales the
  // lse error by 1 + 2 z |lse|.
  const double atol = lse_atol(c.vocab) * (1 + 2 * c.z_loss * 20) + 20 * kEpsF32;
  // dlogits = dloss * (a p - onehot): p = exp(x - lse) inherits lse's absolute error as a relative
  // one, plus the exp's error and a few f32 roundings. The one-hot entry a p_t - dloss cancels, so
  // that f32 error is also allowed absolutely, relative to |dloss| <= 1. bf16 output adds its own
  // rounding, relative to the stored value only: 2^-8.
  const double d_f32 = lse_atol(c.vocab) + kExpMaxRelErr + 4 * kEpsF32;
  const double d_rtol = d_f32 + (c.dtype == DType::kBF16 ? kEpsBf16 : 0);
  testing::for_each_isa([&] {
    ops::cross_entropy_forward(logits, targets, loss, lse, c.z_loss);
    EXPECT_TRUE(testing::all_close(testing::to_vector(lse), lse_ref, 0, atol));
    EXPECT_TRUE(testing::all_close(testing::to_vector(loss), loss_ref, 0, atol));
    for (int64_t i = 0; i < c.n; ++i)
      if (tg[i] < 0) {
        EXPECT_EQ(loss.t.ptr<float>()[i], 0.0f);
      }

    ops::cross_entropy_backward(logits, targets, lse, dloss, dlogits, c.z_loss);
    const auto dx = testing::to_vector(dlogits);
    EXPECT_TRUE(testing::all_close(dx, dx_ref, d_rtol, d_f32));
    for (int64_t i = 0; i < c.n; ++i)
      if (tg[i] < 0) {
        for (int64_t v = 0; v < c.vocab; ++v) ASSERT_EQ(dx[i * c.vocab + v], 0.0) << "ignored row " << i;
      }

    // In place: dlogits written over the logits gives the same bits as out of place.
    OwnedTensor inplace(Shape{c.n, c.vocab}, c.dtype);
    std::memcpy(inplace.t.data(), logits.t.data(), logits.t.nbytes());
    ops::cross_entropy_backward(inplace, targets, lse, dloss, inplace, c.z_loss);
    EXPECT_EQ(std::memcmp(inplace.t.data(), dlogits.t.data(), dlogits.t.nbytes()), 0);

    // Both in one call: the forward's loss and lse bit for bit (same sums in the same order), the
    // gradient within the same bounds (its exp is scaled by a factor per chunk: one more rounding,
    // inside the 4 eps), and in place equal to out of place.
    OwnedTensor loss2(Shape{c.n}, DType::kF32), lse2(Shape{c.n}, DType::kF32);
    std::memcpy(inplace.t.data(), logits.t.data(), logits.t.nbytes());
    ops::cross_entropy_forward_backward(logits, targets, dloss, loss2, lse2, dlogits, c.z_loss);
    EXPECT_EQ(std::memcmp(lse2.t.data(), lse.t.data(), lse.t.nbytes()), 0);
    EXPECT_EQ(std::memcmp(loss2.t.data(), loss.t.data(), loss.t.nbytes()), 0);
    EXPECT_TRUE(testing::all_close(testing::to_vector(dlogits), dx_ref, d_rtol, d_f32));
    for (int64_t i = 0; i < c.n; ++i)
      if (tg[i] < 0) {
        for (int64_t v = 0; v < c.vocab; ++v)
          ASSERT_EQ(testing::get(dlogits, i * c.vocab + v), 0.0) << "ignored row " << i;
      }
    ops::cross_entropy_forward_backward(inplace, targets, dloss, loss2, lse2, inplace, c.z_loss);
    EXPECT_EQ(std::memcmp(inplace.t.data(), dlogits.t.data(), dlogits.t.nbytes()), 0);
  });
}

TEST(CrossEntropy, MatchesReferenceF32) {
  for (int64_t v : {1, 5, 4099})
    for (int64_t n : {1, 7, 67}) check_case({n, v, DType::kF32, 0.0f}, 100 + v + n);
}

TEST(CrossEntropy, MatchesReferenceBf16) {
  for (int64_t v : {1, 5, 4099})
    for (int64_t n : {1, 7, 67}) check_case({n, v, DType::kBF16, 0.0f}, 200 + v + n);
}

TEST(CrossEntropy, OneRowOf32000) {
  check_case({1, 32000, DType::kF32, 0.0f}, 7);
  check_case({1, 32000, DType::kBF16, 0.0f}, 8);
}

TEST(CrossEntropy, ZLoss) {
  for (float z : {1e-4f, 0.1f}) {
    check_case({7, 4099, DType::kF32, z}, 11);
    check_case({7, 4099, DType::kBF16, z}, 12);
  }
}

// bf16 logits are exact in f32 and the arithmetic is f32 either way, so the bf16 backward must be
// the f32 backward of the same values rounded once to nearest even: bit for bit.
TEST(CrossEntropy, Bf16BackwardIsRoundedF32Backward) {
  const int64_t n = 67, vocab = 4099;
  OwnedTensor xb(Shape{n, vocab}, DType::kBF16), xf(Shape{n, vocab}, DType::kF32);
  OwnedTensor db(Shape{n, vocab}, DType::kBF16), df(Shape{n, vocab}, DType::kF32);
  OwnedTensor targets(Shape{n}, DType::kI32), loss(Shape{n}, DType::kF32), lse(Shape{n}, DType::kF32),
      dloss(Shape{n}, DType::kF32);
  const auto x = testing::fill_uniform(xb, 31, -8, 8);
  for (int64_t i = 0; i < n * vocab; ++i) xf.t.ptr<float>()[i] = static_cast<float>(x[i]);
  make_targets(targets, vocab, 32);
  testing::fill_uniform(dloss, 33, -1, 1);
  testing::for_each_isa([&] {
    ops::cross_entropy_forward(xf, targets, loss, lse, 0.01f);
    ops::cross_entropy_backward(xb, targets, lse, dloss, db, 0.01f);
    ops::cross_entropy_backward(xf, targets, lse, dloss, df, 0.01f);
    for (int64_t i = 0; i < n * vocab; ++i)
      ASSERT_EQ(db.t.ptr<uint16_t>()[i], f32_to_bf16(df.t.ptr<float>()[i])) << "at " << i;
    ops::cross_entropy_forward_backward(xb, targets, dloss, loss, lse, db, 0.01f);
    ops::cross_entropy_forward_backward(xf, targets, dloss, loss, lse, df, 0.01f);
    for (int64_t i = 0; i < n * vocab; ++i)
      ASSERT_EQ(db.t.ptr<uint16_t>()[i], f32_to_bf16(df.t.ptr<float>()[i])) << "fused, at " << i;
  });
}

// The reference's analytic gradient against central differences of its own loss,
// d/dx sum_n dloss[n] * loss[n], with and without z-loss.
TEST(CrossEntropy, ReferenceGradientMatchesFiniteDifferences) {
  const int64_t n = 3, vocab = 5;
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> u(-3, 3);
  std::vector<double> x(n * vocab), g = {0.7, -1.3, 0.4};
  for (auto& e : x) e = u(rng);
  const std::vector<int32_t> tg = {2, -1, 4};
  for (double z : {0.0, 0.05}) {
    std::vector<double> dx, loss, lse;
    ops::cross_entropy_backward_ref(x, tg, vocab, z, g, dx);
    std::vector<double> fd(x.size());
    const double h = 1e-5;
    for (size_t i = 0; i < x.size(); ++i) {
      double f[2];
      for (int s = 0; s < 2; ++s) {
        auto xp = x;
        xp[i] += s ? -h : h;
        ops::cross_entropy_forward_ref(xp, tg, vocab, z, loss, lse);
        f[s] = 0;
        for (int64_t r = 0; r < n; ++r) f[s] += g[r] * loss[r];
      }
      fd[i] = (f[0] - f[1]) / (2 * h);
    }
    // Central differences: truncation O(h^2) ~ 1e-10, cancellation ~ 1e-16 / h ~ 1e-11.
    EXPECT_TRUE(testing::all_close(dx, fd, 1e-7, 1e-8)) << "z=" << z;
  }
}

// The running max must survive chunks that raise it (rescaling) and chunks that are all -inf.
TEST(CrossEntropy, OnlineMaxAcrossChunks) {
  const int64_t vocab = 3 * 2048 + 17;
  OwnedTensor logits(Shape{2, vocab}, DType::kF32), targets(Shape{2}, DType::kI32);
  OwnedTensor loss(Shape{2}, DType::kF32), lse(Shape{2}, DType::kF32);
  std::vector<double> x(2 * vocab);
  for (int64_t v = 0; v < vocab; ++v) {
    x[v] = 30.0 * v / vocab;                                                             // rising
    x[vocab + v] = v < 2048 ? -std::numeric_limits<double>::infinity() : (v % 7) - 3.0;  // masked chunk
  }
  for (size_t i = 0; i < x.size(); ++i) logits.t.ptr<float>()[i] = static_cast<float>(x[i]);
  for (auto& e : x) e = logits.t.ptr<float>()[&e - x.data()];  // exactly as stored
  const std::vector<int32_t> tg = {vocab - 1, 4000};
  targets.t.ptr<int32_t>()[0] = tg[0];
  targets.t.ptr<int32_t>()[1] = tg[1];
  std::vector<double> loss_ref, lse_ref;
  ops::cross_entropy_forward_ref(x, tg, vocab, 0.0, loss_ref, lse_ref);
  const std::vector<double> g = {1.0, 0.5};
  std::vector<double> dx_ref;
  ops::cross_entropy_backward_ref(x, tg, vocab, 0.0, g, dx_ref);
  OwnedTensor dloss(Shape{2}, DType::kF32), dlogits(Shape{2, vocab}, DType::kF32);
  dloss.t.ptr<float>()[0] = 1.0f;
  dloss.t.ptr<float>()[1] = 0.5f;
  testing::for_each_isa([&] {
    ops::cross_entropy_forward(logits, targets, loss, lse);
    EXPECT_TRUE(testing::all_close(testing::to_vector(lse), lse_ref, 2 * kEpsF32, lse_atol(vocab)));
    EXPECT_TRUE(testing::all_close(testing::to_vector(loss), loss_ref, 0, lse_atol(vocab) + 40 * kEpsF32));
    // In one call, the chunks' exps are scaled by factors that change as the max rises, and the
    // masked chunk's gradient is 0.
    ops::cross_entropy_forward_backward(logits, targets, dloss, loss, lse, dlogits);
    EXPECT_TRUE(testing::all_close(testing::to_vector(loss), loss_ref, 0, lse_atol(vocab) + 40 * kEpsF32));
    const double d = lse_atol(vocab) + kExpMaxRelErr + 40 * kEpsF32;
    EXPECT_TRUE(testing::all_close(testing::to_vector(dlogits), dx_ref, d, d));
    for (int64_t v = 0; v < 2048; ++v) ASSERT_EQ(dlogits.t.ptr<float>()[vocab + v], 0.0f) << v;
  });
}

// Logits of magnitude 1000, each row's maximum in a different vector lane: the subtraction of the
// true row maximum is what keeps exp finite. Errors: lse_atol plus rounding of |lse| <= 1500 to f32,
// and loss = lse - x_t cancels, so both carry 2 * 1504 * eps absolutely.
TEST(CrossEntropy, LargeLogitsStayFinite) {
  const int64_t n = 16, vocab = 4099;
  for (DType dt : {DType::kF32, DType::kBF16}) {
    OwnedTensor logits(Shape{n, vocab}, dt), targets(Shape{n}, DType::kI32);
    OwnedTensor loss(Shape{n}, DType::kF32), lse(Shape{n}, DType::kF32);
    auto x = testing::fill_uniform(logits, 41, -1000, 1000);
    for (int64_t r = 0; r < n; ++r) {  // the maximum of row r sits in lane r of a vector
      const int64_t i = r * vocab + 2048 + 16 * r + r;
      if (dt == DType::kBF16) {
        logits.t.ptr<uint16_t>()[i] = f32_to_bf16(1500.0f);  // 1504: bf16 spacing is 8 here
      } else {
        logits.t.ptr<float>()[i] = 1500.0f;
      }
      x[i] = testing::get(logits, i);  // the reference sees the stored value
    }
    const auto tg = make_targets(targets, vocab, 42);
    std::vector<double> loss_ref, lse_ref;
    ops::cross_entropy_forward_ref(x, tg, vocab, 0.0, loss_ref, lse_ref);
    testing::for_each_isa([&] {
      ops::cross_entropy_forward(logits, targets, loss, lse);
      const double atol = lse_atol(vocab) + 2 * 1504 * kEpsF32;
      EXPECT_TRUE(testing::all_close(testing::to_vector(lse), lse_ref, 0, atol)) << dtype_name(dt);
      EXPECT_TRUE(testing::all_close(testing::to_vector(loss), loss_ref, 0, atol)) << dtype_name(dt);
    });
  }
}

// NaN is never hidden: a NaN logit makes its row's lse and loss NaN (also when a whole chunk is
// NaN, which must not pass for a masked one), and a NaN dloss makes the row's gradient NaN, in
// bf16 too (a NaN whose payload would round to -0 or infinity stays NaN).
TEST(CrossEntropy, NanPropagates) {
  const int64_t n = 3, vocab = 4099;
  const float nan = std::bit_cast<float>(0x7fffffffu);  // NaN with every payload bit set
  for (DType dt : {DType::kF32, DType::kBF16}) {
    OwnedTensor logits(Shape{n, vocab}, dt), dlogits(Shape{n, vocab}, dt), targets(Shape{n}, DType::kI32);
    OwnedTensor loss(Shape{n}, DType::kF32), lse(Shape{n}, DType::kF32), dloss(Shape{n}, DType::kF32);
    testing::fill_uniform(logits, 51, -4, 4);
    auto set = [&](int64_t i, float v) {
      if (dt == DType::kBF16) {
        logits.t.ptr<uint16_t>()[i] = f32_to_bf16(v);
      } else {
        logits.t.ptr<float>()[i] = v;
      }
    };
    set(5, nan);                                              // row 0: one NaN
    for (int64_t v = 0; v < vocab; ++v) set(vocab + v, nan);  // row 1: all NaN
    const int32_t t[3] = {1, 2, 3};
    std::memcpy(targets.t.data(), t, sizeof t);
    const float g[3] = {1.0f, 1.0f, nan};  // row 2: NaN upstream gradient
    std::memcpy(dloss.t.data(), g, sizeof g);
    testing::for_each_isa([&] {
      ops::cross_entropy_forward(logits, targets, loss, lse);
      for (int64_t r = 0; r < 2; ++r) {
        EXPECT_TRUE(std::isnan(lse.t.ptr<float>()[r])) << dtype_name(dt) << " row " << r;
        EXPECT_TRUE(std::isnan(loss.t.ptr<float>()[r])) << dtype_name(dt) << " row " << r;
      }
      EXPECT_TRUE(std::isfinite(lse.t.ptr<float>()[2]));
      ops::cross_entropy_backward(logits, targets, lse, dloss, dlogits);
      for (int64_t v = 0; v < vocab; ++v)
        ASSERT_TRUE(std::isnan(testing::get(dlogits, 2 * vocab + v))) << dtype_name(dt) << " at " << v;
      // In one call: the same NaN rows, and NaN gradients for every row that has one.
      ops::cross_entropy_forward_backward(logits, targets, dloss, loss, lse, dlogits);
      for (int64_t r = 0; r < 2; ++r) {
        EXPECT_TRUE(std::isnan(lse.t.ptr<float>()[r])) << dtype_name(dt) << " fused row " << r;
        EXPECT_TRUE(std::isnan(loss.t.ptr<float>()[r])) << dtype_name(dt) << " fused row " << r;
      }
      for (int64_t r = 1; r < 3; ++r)
        for (int64_t v = 0; v < vocab; ++v)
          ASSERT_TRUE(std::isnan(testing::get(dlogits, r * vocab + v))) << dtype_name(dt) << " row " << r;
    });
  }
}

TEST(CrossEntropy, MeanOverCountedTokens) {
  OwnedTensor loss(Shape{4}, DType::kF32), targets(Shape{4}, DType::kI32);
  const float l[4] = {1.5f, 0.0f, 2.5f, 4.0f};
  const int32_t t[4] = {3, -1, 0, 9};
  std::memcpy(loss.t.data(), l, sizeof l);
  std::memcpy(targets.t.data(), t, sizeof t);
  auto m = ops::cross_entropy_mean(loss, targets);
  EXPECT_EQ(m.count, 3);
  EXPECT_DOUBLE_EQ(m.mean, 8.0 / 3.0);
  for (auto& e : t) targets.t.ptr<int32_t>()[&e - t] = -1;
  m = ops::cross_entropy_mean(loss, targets);
  EXPECT_EQ(m.count, 0);
  EXPECT_EQ(m.mean, 0.0);
}

TEST(CrossEntropy, NoRows) {
  OwnedTensor logits(Shape{0, 7}, DType::kBF16), targets(Shape{0}, DType::kI32), loss(Shape{0}, DType::kF32),
      lse(Shape{0}, DType::kF32);
  ops::cross_entropy_forward(logits, targets, loss, lse);
  ops::cross_entropy_backward(logits, targets, lse, loss, logits);
  ops::cross_entropy_forward_backward(logits, targets, loss, loss, lse, logits);
  EXPECT_EQ(ops::cross_entropy_mean(loss, targets).count, 0);
}

TEST(CrossEntropy, RejectsBadArguments) {
  OwnedTensor logits(Shape{3, 10}, DType::kF32), targets(Shape{3}, DType::kI32);
  OwnedTensor loss(Shape{3}, DType::kF32), lse(Shape{3}, DType::kF32), bad(Shape{4}, DType::kF32);
  testing::fill_uniform(logits, 1);
  const int32_t t[3] = {1, 10, 2};
  std::memcpy(targets.t.data(), t, sizeof t);
  try {
    ops::cross_entropy_forward(logits, targets, loss, lse);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kShape);
    EXPECT_NE(std::string(e.what()).find("targets[1] = 10"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("vocabulary of 10"), std::string::npos) << e.what();
  }
  targets.t.ptr<int32_t>()[1] = 0;
  EXPECT_THROW(ops::cross_entropy_forward(logits, targets, bad, lse), Error);
  OwnedTensor bf(Shape{3, 10}, DType::kBF16), dloss(Shape{3}, DType::kF32);
  EXPECT_THROW(ops::cross_entropy_backward(logits, targets, lse, dloss, bf), Error);  // dtype differs
  EXPECT_THROW(ops::cross_entropy_forward_backward(logits, targets, dloss, loss, lse, bf), Error);
  EXPECT_THROW(ops::cross_entropy_forward_backward(logits, targets, bad, loss, lse, logits), Error);
}

}  // namespace
}  // namespace tessera
