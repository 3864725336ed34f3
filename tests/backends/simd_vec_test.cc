// simd_vec.h's exp in its three modes above kExpHi (ExpAboveHi): at or below kExpHi each is
// exp_vec bit for bit, whatever the number of interleaved registers; kNone flushes everything below
// kExpLo (-inf included) to 0 and keeps NaN, which is all a softmax over masked logits needs.
// Compiled for the test binary's baseline ISA (the scalar build's 8-lane vectors): the kernels'
// AVX2 and AVX-512 copies are the same source, exercised through the attention and loss tests.
#include "tessera/backends/cpu/simd_vec.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace tessera::cpu::vec {
namespace {

// exp of xs, kLanes at a time in groups of U registers.
template <int U, ExpAboveHi kAbove>
std::vector<float> exp_n(const std::vector<float>& xs) {
  std::vector<float> out(xs.size());
  const int64_t step = U * kLanes;
  for (size_t i = 0; i < xs.size(); i += step) {
    VF v[U];
    for (int u = 0; u < U; ++u)
      for (int64_t l = 0; l < kLanes; ++l) {
        const size_t at = i + u * kLanes + l;
        v[u][l] = at < xs.size() ? xs[at] : 0.0f;
      }
    exp_vec_n<U, kAbove>(v);
    for (int u = 0; u < U; ++u)
      for (int64_t l = 0; l < kLanes; ++l)
        if (i + u * kLanes + l < xs.size()) out[i + u * kLanes + l] = v[u][l];
  }
  return out;
}

std::vector<float> exp_one_by_one(const std::vector<float>& xs) {
  std::vector<float> out(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) out[i] = exp_vec(splat(xs[i]))[0];
  return out;
}

void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  int64_t differ = 0;
  for (size_t i = 0; i < got.size(); ++i)
    differ += std::bit_cast<uint32_t>(got[i]) != std::bit_cast<uint32_t>(want[i]);
  EXPECT_EQ(differ, 0) << what;
}

TEST(SimdVecExp, EveryModeIsExpVecAtOrBelowHi) {
  // A dense grid over [kExpLo - 20, kExpHi], the range's ends, and the exact values either side.
  std::vector<float> xs;
  const float lo = kExpLo - 20.0f;
  for (int i = 0; i <= 200000; ++i) xs.push_back(lo + (kExpHi - lo) * static_cast<float>(i) / 200000.0f);
  for (float e : {kExpLo, kExpHi, 0.0f, -0.0f}) {
    xs.push_back(e);
    xs.push_back(std::nextafter(e, -1e30f));
    if (e < kExpHi) xs.push_back(std::nextafter(e, 1e30f));
  }
  const std::vector<float> want = exp_one_by_one(xs);
  expect_same_bits(exp_n<1, ExpAboveHi::kInf>(xs), want, "kInf, U 1");
  expect_same_bits(exp_n<4, ExpAboveHi::kInf>(xs), want, "kInf, U 4");
  expect_same_bits(exp_n<4, ExpAboveHi::kCapped>(xs), want, "kCapped, U 4");
  expect_same_bits(exp_n<1, ExpAboveHi::kNone>(xs), want, "kNone, U 1");
  expect_same_bits(exp_n<4, ExpAboveHi::kNone>(xs), want, "kNone, U 4");
}

TEST(SimdVecExp, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> below = {
      -inf, -1e30f, -3e9f, -1000.0f, -104.0f, -88.0f, std::nextafter(kExpLo, -1e30f)};
  for (const auto& got : {exp_n<4, ExpAboveHi::kInf>(below), exp_n<4, ExpAboveHi::kCapped>(below),
                          exp_n<4, ExpAboveHi::kNone>(below)})
    for (size_t i = 0; i < below.size(); ++i) EXPECT_EQ(std::bit_cast<uint32_t>(got[i]), 0u) << below[i];
  for (const auto& got : {exp_n<2, ExpAboveHi::kInf>({nan, -nan}), exp_n<2, ExpAboveHi::kCapped>({nan, -nan}),
                          exp_n<2, ExpAboveHi::kNone>({nan, -nan})})
    for (float y : got) EXPECT_TRUE(std::isnan(y));
  const std::vector<float> above = {std::nextafter(kExpHi, 1e30f), 89.0f, 1000.0f, inf};
  for (float y : exp_n<1, ExpAboveHi::kInf>(above)) EXPECT_EQ(y, inf);
  const float capped = exp_vec(splat(kExpHi))[0];
  for (float y : exp_n<1, ExpAboveHi::kCapped>(above)) EXPECT_EQ(y, capped);
}

}  // namespace
}  // namespace tessera::cpu::vec
