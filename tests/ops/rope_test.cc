// RoPE: Llama 3.1 inverse frequencies against values derived by hand from the formula; the table
// against double cos/sin; forward and backward against the independent double reference in both
// pair layouts, f32 and bf16, with packed per-segment positions, on both ISA builds; the backward
// as inverse and adjoint of the forward; in place; errors for positions beyond the table.
#include "tessera/ops/rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "tessera/core/error.h"
#include "testing/op_test_util.h"

namespace tessera {
namespace {

using ops::RopeConfig;
using ops::RopeLayout;
using ops::RopeScaling;
using ops::RopeTable;
using testing::OwnedTensor;
using testing::within;

constexpr double kU = 1.0 / (1 << 24);     // f32 unit roundoff
constexpr double kUBf16 = 1.0 / (1 << 8);  // bf16 unit roundoff (8 significant bits)

RopeConfig llama31_config(int64_t max_positions) {
  RopeConfig c;
  c.max_timescale = 500000.0;
  c.head_dim = 128;
  c.max_positions = max_positions;
  c.scaling = RopeScaling::kLlama3;  // defaults: factor 8, low 1, high 4, original 8192
  return c;
}

// Llama 3.1 (theta = 5e5, D = 128): f_i = 5e5^(-i/64), wavelen_i = 2 pi / f_i. With original
// context 8192, high_freq_factor 4 and low_freq_factor 1, wavelengths below 8192/4 = 2048 keep f,
// above 8192/1 = 8192 get f/8, and between them smooth = (8192/wavelen - 1) / (4 - 1) and
// f' = (1 - smooth) f/8 + smooth f. By hand:
//   i = 0:  f = 1, wavelen 6.283 < 2048: kept, 1.
//   i = 20: f = 5e5^(-0.3125) = 1.65604401e-2, wavelen 379.41: kept.
//   i = 28: f = 5e5^(-0.4375) = 3.21144599e-3, wavelen 1956.50 < 2048: kept (the last one).
//   i = 29: f = 2.61609925e-3, wavelen 2401.74: smooth = (3.410857 - 1)/3 = 0.8036210,
//           f' = f (0.1963790/8 + 0.8036210) = f * 0.8281684 = 2.16657076e-3.
//   i = 32: f = 5e5^(-1/2) = 1.41421356e-3, wavelen 4442.88: smooth = (1.843848 - 1)/3 = 0.2812826,
//           f' = f (0.7187174/8 + 0.2812826) = f * 0.3711223 = 5.24846161e-4.
//   i = 34: f = 9.38473870e-4, wavelen 6695.11: smooth = 0.0745266, f' = 1.78507813e-4.
//   i = 35: f = 7.64496988e-4, wavelen 8218.72 > 8192: f/8 = 9.55621235e-5 (the first one).
//   i = 63: f = 2.45514079e-6: f/8 = 3.06892599e-7.
TEST(Rope, Llama31InverseFrequenciesByHand) {
  const std::pair<int, double> want[] = {{0, 1.0},
                                         {20, 1.65604400809944e-2},
                                         {28, 3.21144599475259e-3},
                                         {29, 2.16657076350336e-3},
                                         {32, 5.24846160992955e-4},
                                         {34, 1.78507812767996e-4},
                                         {35, 9.55621235396468e-5},
                                         {63, 3.06892598891451e-7}};
  RopeTable table(llama31_config(4));
  std::vector<double> ref = ops::rope_inv_freq_ref(table.config());
  for (auto [i, f] : want) {
    EXPECT_NEAR(table.inv_freq(i), f, 1e-12 * f) << "i = " << i;
    EXPECT_NEAR(ref[i], f, 1e-12 * f) << "i = " << i;
  }
  // Every frequency agrees between the table and the reference (written apart).
  for (int i = 0; i < 64; ++i) EXPECT_NEAR(table.inv_freq(i), ref[i], 1e-15 * ref[i]) << i;
}

// Linear scaling divides every frequency by the factor; a local companion (Gemma 3) is the plain
// table of its own theta, and the scaled table keeps its scaling.
TEST(Rope, LinearScalingAndTheLocalCompanion) {
  RopeConfig c{.max_timescale = 1e6, .head_dim = 16, .max_positions = 40};
  c.scaling = RopeScaling::kLinear;
  c.linear_factor = 8;
  c.local_max_timescale = 1e4;
  RopeTable table(c);
  const std::vector<double> ref = ops::rope_inv_freq_ref(c);
  for (int64_t i = 0; i < 8; ++i) {
    const double f = std::pow(1e6, -2.0 * static_cast<double>(i) / 16) / 8;
    EXPECT_NEAR(table.inv_freq(i), f, 1e-15 * f) << i;
    EXPECT_NEAR(ref[i], f, 1e-15 * f) << i;
  }
  ASSERT_NE(table.local(), nullptr);
  EXPECT_EQ(table.local()->local(), nullptr);
  for (int64_t i = 0; i < 8; ++i) {
    const double f = std::pow(1e4, -2.0 * static_cast<double>(i) / 16);
    EXPECT_NEAR(table.local()->inv_freq(i), f, 1e-15 * f) << i;
  }
  EXPECT_EQ(table.local()->max_positions(), 40);
  EXPECT_EQ(RopeTable(RopeConfig{.head_dim = 16, .max_positions = 4}).local(), nullptr);
  RopeConfig bad = c;
  bad.linear_factor = 0;
  EXPECT_THROW(RopeTable{bad}, Error);
}

// Entries are cos/sin of p * f computed in double and rounded once to f32.
TEST(Rope, TableHoldsCorrectlyRoundedValues) {
  RopeConfig c;
  c.head_dim = 16;
  c.max_positions = 70000;  // at p ~ 7e4 an f32 angle p * f would be off by ~4e-3 rad
  RopeTable table(c);
  std::vector<double> f = ops::rope_inv_freq_ref(c);
  for (int64_t p : {0, 1, 7, 4095, 69999}) {
    for (int64_t i = 0; i < 8; ++i) {
      const double a = static_cast<double>(p) * f[i];
      EXPECT_NEAR(table.cos()[p * 8 + i], std::cos(a), kU * std::abs(std::cos(a)) + 1e-45) << p << " " << i;
      EXPECT_NEAR(table.sin()[p * 8 + i], std::sin(a), kU * std::abs(std::sin(a)) + 1e-45) << p << " " << i;
    }
  }
}

// Packed positions: each batch row is cut into segments of random length, each restarting at 0;
// the last token of row 0 sits at the table's last position.
std::vector<int32_t> packed_positions(int64_t b, int64_t t, int64_t max_positions, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> pos(static_cast<size_t>(b * t));
  for (int64_t r = 0; r < b; ++r) {
    int32_t p = 0;
    for (int64_t j = 0; j < t; ++j) {
      if (rng() % 5 == 0) p = 0;  // a new segment
      pos[r * t + j] = static_cast<int32_t>(std::min<int64_t>(p++, max_positions - 1));
    }
  }
  pos[t - 1] = static_cast<int32_t>(max_positions - 1);
  return pos;
}

// Per-element bound: cos and sin are each within 2^-24 relative; x1 c - x2 s adds three
// roundings: |err| <= 4 * 2^-24 (|x1| + |x2|). A bf16 store adds 2^-8 |y|.
std::vector<double> rope_tol(const std::vector<double>& x, const std::vector<double>& want, int64_t d,
                             RopeLayout layout, DType dt) {
  std::vector<double> tol(x.size());
  const int64_t half = d / 2;
  for (size_t h = 0; h < x.size() / d; ++h) {
    for (int64_t i = 0; i < half; ++i) {
      const int64_t i1 = h * d + (layout == RopeLayout::kRotateHalf ? i : 2 * i);
      const int64_t i2 = h * d + (layout == RopeLayout::kRotateHalf ? i + half : 2 * i + 1);
      const double base = 4 * kU * (std::abs(x[i1]) + std::abs(x[i2])) + 1e-30;
      tol[i1] = base + (dt == DType::kBF16 ? kUBf16 * std::abs(want[i1]) : 0.0);
      tol[i2] = base + (dt == DType::kBF16 ? kUBf16 * std::abs(want[i2]) : 0.0);
    }
  }
  return tol;
}

TEST(Rope, ForwardAndBackwardMatchReference) {
  RopeConfig plain;
  plain.head_dim = 64;
  plain.max_positions = 300;
  RopeConfig tiny;  // one pair per head
  tiny.head_dim = 2;
  tiny.max_positions = 50;
  RopeConfig partial;  // 20 pairs: a whole register pair (16 values) and a tail of 4
  partial.head_dim = 40;
  partial.max_positions = 100;
  const RopeConfig configs[] = {plain, tiny, partial, llama31_config(9000)};
  const int64_t shapes[][3] = {{1, 1, 1}, {2, 7, 3}, {2, 67, 5}};  // B, T, H; the last runs threaded
  for (const RopeConfig& cfg : configs) {
    RopeTable table(cfg);
    const int64_t d = cfg.head_dim;
    for (auto [b, t, h] : shapes) {
      auto pos = packed_positions(b, t, cfg.max_positions, 17 + t);
      OwnedTensor positions(Shape{b, t}, DType::kI32);
      std::memcpy(positions.t.data(), pos.data(), pos.size() * 4);
      for (DType dt : {DType::kF32, DType::kBF16}) {
        OwnedTensor x(Shape{b, t, h, d}, dt), y(Shape{b, t, h, d}, dt);
        auto xv = testing::fill_uniform(x, 3 + h);
        for (RopeLayout layout : {RopeLayout::kRotateHalf, RopeLayout::kInterleaved}) {
          for (bool inverse : {false, true}) {
            SCOPED_TRACE(::testing::Message()
                         << "D=" << d << " " << b << "x" << t << "x" << h << " " << dtype_name(dt)
                         << " interleaved=" << (layout == RopeLayout::kInterleaved)
                         << " inverse=" << inverse);
            std::vector<double> want(xv.size());
            ops::rope_ref(cfg, layout, inverse, xv.data(), pos.data(), b * t, h, want.data());
            auto tol = rope_tol(xv, want, d, layout, dt);
            testing::for_each_isa([&] {
              if (inverse)
                ops::rope_bwd(x, positions, table, layout, y);
              else
                ops::rope_fwd(x, positions, table, layout, y);
              EXPECT_TRUE(within(testing::to_vector(y), want, tol));
            });
          }
        }
      }
    }
  }
}

// The backward is the transpose of the forward: <rope(x), dy> = <x, rope_bwd(dy)>, and, the
// rotation being orthogonal, rope_bwd(rope(x)) = x.
TEST(Rope, BackwardIsAdjointAndInverse) {
  RopeTable table(llama31_config(64));
  const int64_t b = 2, t = 31, h = 3, d = 128, n = b * t * h * d;
  OwnedTensor x(Shape{b, t, h, d}, DType::kF32), dy(Shape{b, t, h, d}, DType::kF32),
      y(Shape{b, t, h, d}, DType::kF32), dx(Shape{b, t, h, d}, DType::kF32),
      back(Shape{b, t, h, d}, DType::kF32), positions(Shape{b, t}, DType::kI32);
  auto pos = packed_positions(b, t, 64, 5);
  std::memcpy(positions.t.data(), pos.data(), pos.size() * 4);
  auto xv = testing::fill_uniform(x, 1);
  auto dyv = testing::fill_uniform(dy, 2);
  for (RopeLayout layout : {RopeLayout::kRotateHalf, RopeLayout::kInterleaved}) {
    testing::for_each_isa([&] {
      ops::rope_fwd(x, positions, table, layout, y);
      ops::rope_bwd(dy, positions, table, layout, dx);
      ops::rope_bwd(y, positions, table, layout, back);
      double lhs = 0, rhs = 0, mag = 0;
      for (int64_t i = 0; i < n; ++i) {
        lhs += y.t.ptr<float>()[i] * dyv[i];
        rhs += xv[i] * dx.t.ptr<float>()[i];
        mag += std::abs(xv[i] * dyv[i]);
        ASSERT_NEAR(back.t.ptr<float>()[i], xv[i], 16 * kU) << i;  // |x| <= 1: two rotations
      }
      EXPECT_NEAR(lhs, rhs, 16 * kU * mag);
    });
  }
}

// Packing: tokens with the same content at the same position in different segments come out the
// same, whatever their index in the batch.
TEST(Rope, PerSegmentPositionsRestartTheRotation) {
  RopeConfig c;
  c.head_dim = 16;
  c.max_positions = 8;
  RopeTable table(c);
  const int64_t t = 6, h = 2;
  const int32_t pos[t] = {0, 1, 2, 0, 1, 0};
  OwnedTensor x(Shape{1, t, h, 16}, DType::kF32), y(Shape{1, t, h, 16}, DType::kF32),
      positions(Shape{1, t}, DType::kI32);
  std::memcpy(positions.t.data(), pos, sizeof(pos));
  for (int64_t j = 0; j < t; ++j)
    for (int64_t i = 0; i < h * 16; ++i)
      x.t.ptr<float>()[j * h * 16 + i] = 0.1f * static_cast<float>(i) - 1.0f;
  ops::rope_fwd(x, positions, table, RopeLayout::kRotateHalf, y);
  const float* out = y.t.ptr<float>();
  auto token = [&](int64_t j) { return std::vector<float>(out + j * h * 16, out + (j + 1) * h * 16); };
  EXPECT_EQ(token(3), token(0));
  EXPECT_EQ(token(5), token(0));
  EXPECT_EQ(token(4), token(1));
  EXPECT_NE(token(1), token(0));
  EXPECT_EQ(token(0),
            std::vector<float>(x.t.ptr<float>(), x.t.ptr<float>() + h * 16));  // position 0: identity
}

TEST(Rope, InPlaceMatchesOutOfPlace) {
  RopeTable table(llama31_config(40));
  for (DType dt : {DType::kF32, DType::kBF16}) {
    for (RopeLayout layout : {RopeLayout::kRotateHalf, RopeLayout::kInterleaved}) {
      OwnedTensor x(Shape{3, 13, 2, 128}, dt), y(Shape{3, 13, 2, 128}, dt),
          positions(Shape{3, 13}, DType::kI32);
      auto pos = packed_positions(3, 13, 40, 9);
      std::memcpy(positions.t.data(), pos.data(), pos.size() * 4);
      testing::fill_uniform(x, 4);
      ops::rope_fwd(x, positions, table, layout, y);
      ops::rope_fwd(x, positions, table, layout, x);
      EXPECT_EQ(std::memcmp(x.t.data(), y.t.data(), x.t.nbytes()), 0);
    }
  }
}

TEST(Rope, ClearErrors) {
  RopeConfig c;
  c.head_dim = 8;
  c.max_positions = 16;
  RopeTable table(c);
  OwnedTensor x(Shape{1, 3, 2, 8}, DType::kF32), positions(Shape{1, 3}, DType::kI32),
      wrong_d(Shape{1, 3, 2, 6}, DType::kF32), pos64(Shape{1, 3}, DType::kI64);
  auto expect_error = [](auto&& f, ErrorKind kind, const char* needle) {
    try {
      f();
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), kind);
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  int32_t* p = positions.t.ptr<int32_t>();
  p[0] = 0, p[1] = 16, p[2] = 1;  // 16 is one past the table
  expect_error([&] { ops::rope_fwd(x, positions, table, RopeLayout::kRotateHalf, x); }, ErrorKind::kShape,
               "position 16 of token 1");
  p[1] = -1;
  expect_error([&] { ops::rope_bwd(x, positions, table, RopeLayout::kRotateHalf, x); }, ErrorKind::kShape,
               "positions must be >= 0");
  p[1] = 1;
  expect_error([&] { ops::rope_fwd(wrong_d, positions, table, RopeLayout::kRotateHalf, wrong_d); },
               ErrorKind::kShape, "head dim");
  expect_error([&] { ops::rope_fwd(x, pos64, table, RopeLayout::kRotateHalf, x); }, ErrorKind::kShape,
               "int32");
  RopeConfig odd = c;
  odd.head_dim = 7;
  expect_error([&] { RopeTable t(odd); }, ErrorKind::kConfig, "head_dim");
  RopeConfig bad_scaling = llama31_config(8);
  bad_scaling.llama3.high_freq_factor = 0.5;
  expect_error([&] { RopeTable t(bad_scaling); }, ErrorKind::kConfig, "llama3");
}

}  // namespace
}  // namespace tessera
