// Vectorisable f32 math for kernels: exp, tanh, erf, erfc, and the bf16 load/store helpers the
// pointwise kernels share. Every function is branch-free straight-line code (selects, not jumps),
// so GCC vectorises loops that call it under `#pragma omp simd`; libm's expf/tanhf/erff are calls
// that GCC does not vectorise without -ffast-math, which Tessera does not use.
//
// Accuracy: |f(x) - exact| <= rel * |exact| + 2^-149 for every float x (the second term, the
// subnormal spacing, matters only where the result underflows), with rel as stated and, in
// brackets, the largest relative error a dense sweep measured. tests/ops/activation_test.cc
// enforces the bounds on every ISA build.
//   exp_f32   rel 1.5e-7  (8.4e-8 = 1.4 * 2^-24); 0 below x = -103.9, +inf above 88.7228.
//   tanh_f32  rel 2.5e-7  (1.4e-7)
//   erf_f32   rel 3e-7    (1.9e-7)
//   erfc_f32  rel 6e-7    (4.3e-7, near x = 0.8); subnormal past x = 9.2, 0 past 10.05.
//   NaN gives NaN; +-inf give the limits.
//
// Polynomials are evaluated with explicit fused multiply-adds (mul_add) so that the AVX2 and
// AVX-512 builds round identically (both have FMA). The scalar build has no FMA instruction: there
// mul_add evaluates a*b + c in double, where the product of two floats is exact, so it differs
// from a true fma only by the double rounding of the sum (at most 2^-29 relative on top of the
// f32 rounding), which the bounds above absorb; libm's fmaf would be exact, but it is a call that
// does not vectorise and costs tens of cycles in software.
//
// Linkage: everything sits in an anonymous namespace. The header is included by translation
// units compiled with different -m flags; internal linkage keeps the linker from merging an
// AVX-512 copy of an inline function into AVX2 or scalar code (an ODR trap with plain `inline`).
//
// Checking that a kernel vectorised: its loops use zmm registers in the AVX-512 object (ymm in
// the AVX2 one, xmm in the x86-64 scalar one) and it calls no libm function. In the build tree:
//   objdump -d -C CMakeFiles/tessera_backends.dir/src/tessera/backends/cpu/norm_kernels_avx512.cc.o
//
// Left out: log, sin/cos (RoPE tables are built once in double with libm).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace tessera::cpu {
namespace {

// ---- fused multiply-add -----------------------------------------------------------------------

// a * b + c rounded once where the build has FMA; in double otherwise (exact product, see above).
inline float mul_add(float a, float b, float c) {
#if defined(__FMA__)
  return std::fma(a, b, c);
#else
  return static_cast<float>(static_cast<double>(a) * static_cast<double>(b) + static_cast<double>(c));
#endif
}

// ---- bf16 <-> f32, branch-free (match tessera::f32_to_bf16 bit for bit) ------------------------

inline float bf16_bits_to_f32(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

// Round to nearest even; NaN stays a quiet NaN (a select, so the loop vectorises).
inline uint16_t f32_to_bf16_bits(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  uint32_t nan = (u >> 16) | 0x40u;
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

// Element access for kernels templated on the storage type T (float or uint16_t holding bf16).
inline float to_f32(float v) {
  return v;
}
inline float to_f32(uint16_t v) {
  return bf16_bits_to_f32(v);
}
template <typename T>
inline T from_f32(float v);
template <>
inline float from_f32<float>(float v) {
  return v;
}
template <>
inline uint16_t from_f32<uint16_t>(float v) {
  return f32_to_bf16_bits(v);
}

// ---- exp --------------------------------------------------------------------------------------

// exp(x) = 2^n * e^r with n = round(x / ln2), r = x - n*ln2 in [-ln2/2, ln2/2].
// e^r = 1 + r + r^2 * P(r), P the degree-5 minimax polynomial of Cephes' expf (relative error
// 1.1e-9 on that interval, far below f32 rounding). ln2 is split into a 9-bit head (so n*head is
// exact) and a tail. n is found with the 1.5*2^23 rounding trick, which also yields its integer
// bits without a float-to-int conversion (undefined for NaN in C++). 2^n is applied as two
// factors 2^n1 * 2^n2 (n1 = floor(n/2)), so that n in [-150, 128] needs only normal-range scale
// factors: results underflow gradually to subnormals and overflow to +inf exactly as IEEE would.
//
// exp(x + lo) for a small correction lo (|lo| <= ulp(x)), added to r after the reduction so that
// it is not lost when x + lo would round to x. erfc uses it to keep the error of -a^2 out.
inline float exp_with_tail_f32(float x, float lo) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;     // 355/512
  constexpr float kLn2Lo = -2.12194440e-4f;  // ln2 - kLn2Hi
  constexpr float kRound = 12582912.0f;      // 1.5 * 2^23
  // Beyond [-104, 88.73] the result is 0 or +inf anyway; the clamp keeps n in range. A NaN
  // passes both comparisons unchanged and propagates through the polynomial.
  float xc = x < -104.0f ? -104.0f : x;
  xc = xc > 88.73f ? 88.73f : xc;
  float t = mul_add(xc, kLog2e, kRound);  // kRound + round(x * log2e)
  float n = t - kRound;
  float r = mul_add(n, -kLn2Hi, xc);
  r = mul_add(n, -kLn2Lo, r) + lo;
  float p = 1.9875691500e-4f;
  p = mul_add(p, r, 1.3981999507e-3f);
  p = mul_add(p, r, 8.3334519073e-3f);
  p = mul_add(p, r, 4.1665795894e-2f);
  p = mul_add(p, r, 1.6666665459e-1f);
  p = mul_add(p, r, 5.0000001201e-1f);
  p = mul_add(p, r * r, r) + 1.0f;
  // Integer n from the low mantissa bits of t (unsigned arithmetic: no overflow for NaN inputs).
  int32_t ni = static_cast<int32_t>(std::bit_cast<uint32_t>(t) - std::bit_cast<uint32_t>(kRound));
  int32_t n1 = ni >> 1;
  int32_t n2 = ni - n1;
  float s1 = std::bit_cast<float>(static_cast<uint32_t>(n1 + 127) << 23);
  float s2 = std::bit_cast<float>(static_cast<uint32_t>(n2 + 127) << 23);
  return p * s1 * s2;
}

inline float exp_f32(float x) {
  return exp_with_tail_f32(x, 0.0f);
}

// ---- tanh -------------------------------------------------------------------------------------

// |x| < 0.625: tanh(x) = x + x^3 * P(x^2), Cephes' tanhf polynomial (relative error 4.4e-9).
// Otherwise tanh(|x|) = 1 - 2 / (exp(2|x|) + 1): no cancellation there (the result is >= 0.55),
// and exp's overflow to +inf for |x| > 44 gives exactly 1. Sign restored at the end.
inline float tanh_f32(float x) {
  float ax = std::fabs(x);
  float z = x * x;
  float p = -5.70498872745e-3f;
  p = mul_add(p, z, 2.06390887954e-2f);
  p = mul_add(p, z, -5.37397155531e-2f);
  p = mul_add(p, z, 1.33314422036e-1f);
  p = mul_add(p, z, -3.33332819422e-1f);
  float small = mul_add(x * z, p, x);
  float large = 1.0f - 2.0f / (exp_f32(2.0f * ax) + 1.0f);
  large = std::copysign(large, x);
  return ax < 0.625f ? small : large;
}

// ---- erf, erfc --------------------------------------------------------------------------------

// erf(x) for |x| <= 1 from its Taylor series, 2/sqrt(pi) * sum_k (-1)^k x^(2k+1) / (k! (2k+1)),
// through k = 10; the first omitted term is below 1.2e-9 relative at |x| = 1, and the terms fall
// steadily, so Horner's rule in f32 loses no digits to cancellation.
inline float erf_small_f32(float x) {
  float z = x * x;
  float p = 1.0f / 76204800.0f;           // k = 10: 10! * 21
  p = mul_add(p, z, -1.0f / 6894720.0f);  // 9! * 19
  p = mul_add(p, z, 1.0f / 685440.0f);    // 8! * 17
  p = mul_add(p, z, -1.0f / 75600.0f);    // 7! * 15
  p = mul_add(p, z, 1.0f / 9360.0f);      // 6! * 13
  p = mul_add(p, z, -1.0f / 1320.0f);     // 5! * 11
  p = mul_add(p, z, 1.0f / 216.0f);       // 4! * 9
  p = mul_add(p, z, -1.0f / 42.0f);       // 3! * 7
  p = mul_add(p, z, 1.0f / 10.0f);        // 2! * 5
  p = mul_add(p, z, -1.0f / 3.0f);        // 1! * 3
  p = mul_add(p, z, 1.0f);
  return x * p * 1.12837916709551257f;  // 2/sqrt(pi)
}

// erfc(a) for a >= 0: the Chebyshev-fitted form of Numerical Recipes (2nd ed., 6.2, `erfcc`),
// erfc(a) = t * exp(-a^2 + Q(t)) with t = 1 / (1 + a/2); its relative error is below 1.2e-7 for
// every a >= 0 (1.05e-7 measured against mpmath). The exponent is summed in two f32 parts (a^2
// split exactly with an fma, the sum with Knuth's two-sum) so that rounding -a^2 + Q to one f32,
// an absolute error of up to a^2 * 2^-24 that exp would turn into a relative one, is avoided.
inline float erfc_nonneg_f32(float a) {
  a = a > 10.5f ? 10.5f : a;  // erfc(10.5) underflows to 0 already; keeps inf out of a^2 - a^2
  float t = 1.0f / mul_add(0.5f, a, 1.0f);
  float q = 0.17087277f;
  q = mul_add(q, t, -0.82215223f);
  q = mul_add(q, t, 1.48851587f);
  q = mul_add(q, t, -1.13520398f);
  q = mul_add(q, t, 0.27886807f);
  q = mul_add(q, t, -0.18628806f);
  q = mul_add(q, t, 0.09678418f);
  q = mul_add(q, t, 0.37409196f);
  q = mul_add(q, t, 1.00002368f);
  q = mul_add(q, t, -1.26551223f);
  float a2 = a * a;
  float a2_err = mul_add(a, a, -a2);  // a^2 = a2 + a2_err exactly (in double too: the error fits)
  float hi = q - a2;                  // two-sum: q - a2 = hi + hi_err exactly
  float v = hi - q;
  float hi_err = (q - (hi - v)) + (-a2 - v);
  return t * exp_with_tail_f32(hi, hi_err - a2_err);
}

// |x| <= 1 by the series; beyond, 1 - erfc(|x|) with erfc(1) = 0.157, so the subtraction
// magnifies erfc's error by at most 0.19.
inline float erf_f32(float x) {
  float ax = std::fabs(x);
  float tail = std::copysign(1.0f - erfc_nonneg_f32(ax), x);
  return ax <= 1.0f ? erf_small_f32(x) : tail;
}

// erfc without cancellation for large positive x (where 1 - erf(x) would lose every digit).
// The series serves only |x| <= 0.5, where erfc >= 0.48 keeps 1 - erf well conditioned.
inline float erfc_f32(float x) {
  float ax = std::fabs(x);
  float tail = erfc_nonneg_f32(ax);
  float big = x < 0.0f ? 2.0f - tail : tail;
  return ax <= 0.5f ? 1.0f - erf_small_f32(x) : big;
}

}  // namespace
}  // namespace tessera::cpu
