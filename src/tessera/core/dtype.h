// Element types, chosen at run time (DESIGN.md principle 4: precision is a run-time property).
//
// bf16 is stored as the upper 16 bits of an IEEE float32. Conversion from f32 rounds to nearest,
// ties to even; NaN stays NaN (quiet), infinities and signed zeros are kept, and values that round
// past the largest finite bf16 become infinity, as IEEE rounding requires.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tessera {

// kU8: raw bytes (packed MXFP4 blocks and their exponents in Hugging Face checkpoints); read from
// safetensors files, never computed with.
enum class DType : uint8_t { kF32, kBF16, kI32, kI64, kU8 };

size_t dtype_size(DType t);
std::string_view dtype_name(DType t);          // "float32", "bfloat16", "int32", "int64", "uint8"
DType dtype_from_name(std::string_view name);  // accepts the names above and "f32"/"bf16"; throws kConfig

struct bf16 {
  uint16_t bits;
};

inline float bf16_to_f32(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

inline uint16_t f32_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
  // Round to nearest even: add 0x7fff plus the lowest kept bit, then truncate.
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float round_to_bf16(float f) {
  return bf16_to_f32(f32_to_bf16(f));
}

}  // namespace tessera
