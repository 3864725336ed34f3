// bf16 conversion: round to nearest even on exact ties, NaN, infinities, signed zero, overflow,
// subnormals; and the vectorised conversion kernels agree with the scalar one bit for bit.
#include "tessera/core/dtype.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>

#include "tessera/core/error.h"
#include "tessera/ops/convert.h"
#include "testing/op_test_util.h"

namespace tessera {
namespace {

uint16_t bits_of(uint32_t f32_bits) {
  return f32_to_bf16(std::bit_cast<float>(f32_bits));
}

TEST(Bf16, ExactValuesRoundTrip) {
  for (float v : {0.0f, 1.0f, -2.0f, 0.5f, 3.0f, 1024.0f, -0.15625f}) EXPECT_EQ(round_to_bf16(v), v);
}

TEST(Bf16, TiesRoundToEven) {
  // 1 + 2^-8 lies exactly between bf16 1.0 (0x3f80) and 1.0078125 (0x3f81): even is 0x3f80.
  EXPECT_EQ(bits_of(0x3f808000u), 0x3f80);
  // 1.0078125 + 2^-8 lies between 0x3f81 and 0x3f82: even is 0x3f82.
  EXPECT_EQ(bits_of(0x3f818000u), 0x3f82);
  // Just above a tie rounds up, just below rounds down.
  EXPECT_EQ(bits_of(0x3f808001u), 0x3f81);
  EXPECT_EQ(bits_of(0x3f807fffu), 0x3f80);
}

TEST(Bf16, SpecialValues) {
  EXPECT_EQ(bits_of(0x80000000u), 0x8000);  // -0 keeps its sign
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(f32_to_bf16(-std::numeric_limits<float>::infinity()), 0xff80);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  // A signalling NaN whose payload sits only in the low 16 bits must not become infinity.
  EXPECT_TRUE(std::isnan(bf16_to_f32(bits_of(0x7f800001u))));
  // The largest float rounds past the largest finite bf16 (0x7f7f) to infinity.
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7f80);
  // A subnormal keeps its upper bits.
  EXPECT_EQ(bits_of(0x00010000u), 0x0001);
}

TEST(Bf16, KernelsMatchScalarBitForBit) {
  const int64_t n = 300007;  // prime: exercises the vector tail
  testing::OwnedTensor src(Shape{n}, DType::kF32), dst(Shape{n}, DType::kBF16), back(Shape{n}, DType::kF32);
  std::mt19937 rng(7);
  for (int64_t i = 0; i < n; ++i) src.t.ptr<uint32_t>()[i] = rng();  // every bit pattern, NaNs included
  testing::for_each_isa([&] {
    ops::convert(src, dst);
    ops::convert(dst, back);
    for (int64_t i = 0; i < n; ++i) {
      float f = src.t.ptr<float>()[i];
      ASSERT_EQ(dst.t.ptr<uint16_t>()[i], f32_to_bf16(f)) << "at " << i;
      ASSERT_EQ(std::bit_cast<uint32_t>(back.t.ptr<float>()[i]), uint32_t{dst.t.ptr<uint16_t>()[i]} << 16);
    }
  });
}

TEST(DType, Names) {
  EXPECT_EQ(dtype_from_name("bfloat16"), DType::kBF16);
  EXPECT_EQ(dtype_from_name("float32"), DType::kF32);
  EXPECT_THROW(dtype_from_name("float8"), Error);
}

}  // namespace
}  // namespace tessera
