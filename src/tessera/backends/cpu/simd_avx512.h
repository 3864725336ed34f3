// AVX-512 intrinsics shared by the AVX-512 build's hand-written bf16 loops: bf16 loads and stores
// on 16 lanes (or 32 as even and odd halves), and simd_math.h's exp_f32 and the sigmoid on a register.
// Included only where __AVX512F__ and
// __AVX512BF16__ are defined (the *_avx512.cc builds); the other builds keep the plain loops.
//
// Why: a bf16 loop written in plain C++ converts f32 to bf16 with the integer rounding of
// simd_math.h (about eight instructions per register, then a narrowing move), and GCC cannot turn
// that into the one instruction AVX512-BF16 has for it. In bf16 the pointwise ops move half the
// bytes of f32, so they must spend half the instructions per element to stay at the memory
// bound; the conversion alone decided that.
//
// Rounding: vcvtneps2bf16 rounds to nearest even and keeps NaN a quiet NaN, as f32_to_bf16_bits
// does, but it treats inputs below FLT_MIN in magnitude as zero (bf16 then holds +-0 where the
// plain loop would keep a bf16 subnormal). Activations and gradients that small are noise; the
// parameters' bf16 copies are not written here.
#pragma once

#if !defined(__AVX512F__) || !defined(__AVX512BF16__)
#error "simd_avx512.h is for the AVX-512 build only"
#endif

#include <immintrin.h>

#include <cstdint>

// GCC 12 reports the _mm512_undefined_* () inside several intrinsics as used uninitialized once
// they are inlined (GCC bug 105593); the warning is spurious. The including file is an AVX-512
// kernel build, which the other kernel files silence the same way.
#ifndef __clang__  // clang has neither the bug nor -Wmaybe-uninitialized
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace tessera::cpu::avx512v {
namespace {

// Lanes per register, and the mask of the first n (< 16) lanes for a row's tail.
constexpr int64_t kLanes = 16;
inline __mmask16 first_lanes(int64_t n) {
  return static_cast<__mmask16>((1u << n) - 1u);
}
// The lanes of the register starting at element i of an array of n that lie inside it.
inline __mmask16 lanes_from(int64_t i, int64_t n) {
  return n - i >= kLanes ? static_cast<__mmask16>(0xffff) : first_lanes(n - i);
}

// bf16 -> f32 is exact: the 16 bits become the top half of the float.
inline __m512 load_bf16(const uint16_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
// The first n lanes of p; the others read as +0 (nothing past p + n is touched).
inline __m512 load_bf16(const uint16_t* p, __mmask16 m) {
  const __m256i h = _mm256_maskz_loadu_epi16(m, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
inline __m256i to_bf16(__m512 v) {
  return reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v));
}
inline void store_bf16(uint16_t* p, __m512 v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), to_bf16(v));
}
inline void store_bf16(uint16_t* p, __m512 v, __mmask16 m) {
  _mm256_mask_storeu_epi16(p, m, to_bf16(v));
}

// 32 bf16 values as two f32 registers without a widening move: the 32-bit lane i holds elements
// 2i (low half) and 2i + 1 (high half), so a shift gives the even elements and a mask the odd
// ones. For elementwise loops, whose lanes are independent, this halves the conversion work; the
// store puts the elements back in order.
constexpr int64_t kPairLanes = 32;
struct Bf16Pair {
  __m512 even, odd;
};
inline Bf16Pair split_bf16(__m512i v) {
  return {_mm512_castsi512_ps(_mm512_slli_epi32(v, 16)),
          _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(static_cast<int32_t>(0xffff0000u))))};
}
inline Bf16Pair load_bf16_pair(const uint16_t* p) {
  return split_bf16(_mm512_loadu_si512(p));
}
// The first n (< 32) values; the others read as +0.
inline Bf16Pair load_bf16_pair(const uint16_t* p, __mmask32 m) {
  return split_bf16(_mm512_maskz_loadu_epi16(m, p));
}
inline __mmask32 first_pair_lanes(int64_t n) {
  return static_cast<__mmask32>((uint64_t{1} << n) - 1u);
}
// Rounds both halves (vcvtne2ps2bf16: the even elements land in bf16 lanes 0-15, the odd ones in
// 16-31) and interleaves them back into element order with one vpermw.
inline __m512i join_bf16(const Bf16Pair& v) {
  const __m512i packed = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(v.odd, v.even));
  const __m512i order = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7,
                                         22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  return _mm512_permutexvar_epi16(order, packed);
}
inline void store_bf16_pair(uint16_t* p, const Bf16Pair& v) {
  _mm512_storeu_si512(p, join_bf16(v));
}
inline void store_bf16_pair(uint16_t* p, const Bf16Pair& v, __mmask32 m) {
  _mm512_mask_storeu_epi16(p, m, join_bf16(v));
}

// exp_f32 of simd_math.h on 16 lanes, operation for operation: the same clamp, reduction and
// polynomial with the same fused multiply-adds, so every lane equals exp_f32 bit for bit. The
// scaling by 2^n is one vscalefps, which rounds p * 2^n once, as exp_f32's two exact-range
// factors do (the first product is exact; the second rounds once, into the subnormals if need be).
// kBelow88: the caller promises x <= 88.73 (or NaN), and the upper clamp is left out.
template <bool kBelow88 = false>
inline __m512 exp_ps(__m512 x) {
  const __m512 round = _mm512_set1_ps(12582912.0f);  // 1.5 * 2^23
  // max/min return their second operand when either is NaN: a NaN lane passes through.
  __m512 xc = _mm512_max_ps(_mm512_set1_ps(-104.0f), x);
  if constexpr (!kBelow88) xc = _mm512_min_ps(_mm512_set1_ps(88.73f), xc);
  const __m512 n = _mm512_sub_ps(_mm512_fmadd_ps(xc, _mm512_set1_ps(1.44269504088896341f), round), round);
  __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-0.693359375f), xc);
  r = _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

// sigmoid(x) = 1 / (1 + exp(-x)) as the plain loops compute it (an IEEE division).
inline __m512 sigmoid_ps(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f);
  return _mm512_div_ps(one, _mm512_add_ps(one, exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), x))));
}

}  // namespace
}  // namespace tessera::cpu::avx512v
