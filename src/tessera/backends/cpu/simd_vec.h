// Vector math on GCC vector types: kLanes floats, the widest register of the ISA this translation
// unit is compiled for (16 with AVX-512, 8 with AVX2), and the vectorised exp that the attention
// and cross-entropy kernels share. The scalar build keeps 8: the tests' error bounds assume lane
// sums of at most n/8 terms, and GCC lowers an 8-float vector to two 128-bit registers on baseline
// x86-64 (SSE2) and AArch64, or to scalar code on a target without vector registers.
// Everything has internal linkage, so each ISA build of a kernel family gets its own copy and none
// leaks into another.
//
// Why vector types and not scalar loops under `#pragma omp simd` (as simd_math.h offers): the
// exp's range checks are selects, and in a scalar loop GCC threads them into branches whose
// arithmetic, under the default -ftrapping-math, it may not then compute unconditionally; AVX-512
// masks its way around that but AVX2 stayed scalar (5x slower). On vector types a select is always
// an elementwise blend. Intrinsic code converts with std::bit_cast (__m512 <-> VF, same bits).
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

#if defined(__AVX__)
#include <immintrin.h>
#endif
// GCC 12 reports the _mm512_undefined_ps() inside _mm512_max_ps as used uninitialized once it is
// inlined (GCC bug 105593), as simd_avx512.h explains.
#if defined(__AVX512F__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace tessera::cpu::vec {
namespace {

#if defined(__AVX512F__)
constexpr int64_t kLanes = 16;
#elif defined(__AVX2__)
constexpr int64_t kLanes = 8;
#else
constexpr int64_t kLanes = 8;
// GCC warns that passing a 32-byte vector without AVX differs from the AVX calling convention;
// every function here and in the kernels that use it has internal linkage, so no call crosses builds.
#pragma GCC diagnostic ignored "-Wpsabi"
#endif
using VF = float __attribute__((vector_size(kLanes * 4)));
using VI = int32_t __attribute__((vector_size(kLanes * 4)));
using VU = uint32_t __attribute__((vector_size(kLanes * 4)));
using VH = uint16_t __attribute__((vector_size(kLanes * 2)));

inline VF splat(float v) {
  return VF{} + v;
}

// The sum of the lanes as a tree: halves added lane by lane, log2(kLanes) levels, as the AVX
// builds' horizontal sums do (so a sum's error grows with the levels, not with kLanes).
inline float sum_lanes(VF v) {
  float h[kLanes];
  std::memcpy(h, &v, sizeof v);
  for (int64_t w = kLanes / 2; w > 0; w /= 2)
    for (int64_t i = 0; i < w; ++i) h[i] += h[i + w];
  return h[0];
}

// ---- exp(x), Cephes expf style ----------------------------------------------------------------
// Scalar math per lane: exp(x) = 2^n * exp(r) with n = round(x * log2(e)) and r = x - n ln2,
// |r| <= ln2/2; exp(r) = 1 + r + r^2 P(r) with Cephes' degree-5 minimax P; 2^n is written into the
// exponent bits. Maximum relative error against exp in double: 8.4e-8 (1.4 ulp), measured over
// every third float in [-87.3, 88.3]; tests hold it to 1e-7 on a dense grid.
constexpr float kExpLo = -87.3f;  // exp(-87.3) = 1.26e-38, just above FLT_MIN: 2^n stays normal
constexpr float kExpHi = 88.3f;   // n <= 127 here; exp(88.3) = 2.2e38 < FLT_MAX
constexpr float kLog2e = 1.44269504088896341f;
// ln2 = kLn2Hi + kLn2Lo; kLn2Hi has 9 significant bits, so n * kLn2Hi is exact for |n| <= 2^15
// and r keeps its low bits (Cody-Waite reduction).
constexpr float kLn2Hi = 0.693359375f;
constexpr float kLn2Lo = -2.12194440e-4f;
// 1.5 * 2^23: adding it rounds a float of magnitude < 2^22 to the nearest integer (ties to even),
// which then sits in the low mantissa bits; subtracting it back gives that integer as a float.
constexpr float kRoundMagic = 12582912.0f;
constexpr float kP0 = 1.9875691500e-4f, kP1 = 1.3981999507e-3f, kP2 = 8.3334519073e-3f,
                kP3 = 4.1665795894e-2f, kP4 = 1.6666665459e-1f, kP5 = 5.0000001201e-1f;

// min(hi, max(lo, x)) per lane, a NaN x kept: on AVX the max/min instructions return their second
// operand where either is NaN, one instruction each where the select costs a compare and a blend.
inline VF clamp_keep_nan(VF x, float lo, float hi) {
#if defined(__AVX512F__)
  const __m512 v = _mm512_max_ps(_mm512_set1_ps(lo), std::bit_cast<__m512>(x));
  return std::bit_cast<VF>(_mm512_min_ps(_mm512_set1_ps(hi), v));
#elif defined(__AVX__)
  const __m256 v = _mm256_max_ps(_mm256_set1_ps(lo), std::bit_cast<__m256>(x));
  return std::bit_cast<VF>(_mm256_min_ps(_mm256_set1_ps(hi), v));
#else
  x = x < lo ? splat(lo) : x;  // comparisons with NaN are false
  return x > hi ? splat(hi) : x;
#endif
}

// exp of U registers in place, their operations interleaved step by step. One register's exp is a
// chain of about twenty dependent operations (some 80 cycles); a loop of single exps keeps the
// units busy only as far as the out-of-order window reaches into the next iterations, and GCC does
// not reorder them on x86. U independent chains in program order do: on Zen 1 (AVX2) a sweep of
// exps runs 1.4x faster with U = 4 than with U = 1 (U = 8 spills registers). Each lane's result is
// exp_vec's, bit for bit, whatever U.
//
// What exp gives above kExpHi, where a caller may trade it for fewer instructions:
//   kInf     +inf, as exp in double would round to;
//   kCapped  exp(kExpHi) = 2.2e38: one select fewer, for callers whose x <= kExpHi or who treat
//            anything that large as +inf (the cross-entropy sweeps' sum bound);
//   kNone    no result defined: for callers whose x never exceeds kExpHi (x - max in a softmax).
//            No clamp at all (two instructions fewer than kCapped); below kExpLo the result
//            itself is replaced by 0 (-inf included), NaN stays NaN.
// At or below kExpHi each gives exp_vec's result bit for bit.
enum class ExpAboveHi { kInf, kCapped, kNone };
template <int U, ExpAboveHi kAbove = ExpAboveHi::kInf>
inline void exp_vec_n(VF (&x)[U]) {
  VF t[U], r[U], p[U];
#pragma GCC unroll 16
  for (int u = 0; u < U; ++u) {
    // NaN flows through; without the clamp, n and r below are garbage for x < kExpLo (NaN for
    // -inf), which the final select discards.
    const VF xc = kAbove == ExpAboveHi::kNone ? x[u] : clamp_keep_nan(x[u], kExpLo, kExpHi);
    t[u] = xc * kLog2e + kRoundMagic;
    r[u] = xc;
  }
#pragma GCC unroll 16
  for (int u = 0; u < U; ++u) {
    const VF n = t[u] - kRoundMagic;
    r[u] = r[u] - n * kLn2Hi;
    r[u] = r[u] - n * kLn2Lo;
  }
  // Horner; GCC contracts each step into an FMA where the build has one.
#pragma GCC unroll 16
  for (int u = 0; u < U; ++u) p[u] = kP0 * r[u] + kP1;
#pragma GCC unroll 16
  for (int u = 0; u < U; ++u) p[u] = p[u] * r[u] + kP2;
#pragma GCC unroll 16
  for (int u = 0; u < U; ++u) p[u] = p[u] * r[u] + kP3;
#pragma GCC unroll 16
  for (int u = 0; u < U; ++u) p[u] = p[u] * r[u] + kP4;
#pragma GCC unroll 16
  for (int u = 0; u < U; ++u) p[u] = p[u] * r[u] + kP5;
#pragma GCC unroll 16
  for (int u = 0; u < U; ++u) p[u] = p[u] * (r[u] * r[u]) + r[u] + 1.0f;  // exp(r), in [0.7, 1.42]
#pragma GCC unroll 16
  for (int u = 0; u < U; ++u) {
    // 2^n, n in [-126, 127], from the integer in t's low mantissa bits.
    VI scale = (reinterpret_cast<VI>(t[u]) - (std::bit_cast<int32_t>(kRoundMagic) - 127)) << 23;
    if constexpr (kAbove == ExpAboveHi::kNone) {
      x[u] = x[u] < kExpLo ? VF{} : p[u] * reinterpret_cast<VF>(scale);  // exp(x) < FLT_MIN: 0
      continue;
    }
    scale = x[u] < kExpLo ? VI{} : scale;  // exp(x) < FLT_MIN: flush to 0 (-inf included)
    if constexpr (kAbove == ExpAboveHi::kInf) scale = x[u] > kExpHi ? VI{} + 0x7f800000 : scale;  // +inf
    x[u] = p[u] * reinterpret_cast<VF>(scale);
  }
}

inline VF exp_vec(VF x) {
  VF v[1] = {x};
  exp_vec_n<1>(v);
  return v[0];
}

}  // namespace
}  // namespace tessera::cpu::vec
