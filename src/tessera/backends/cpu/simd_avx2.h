// AVX2 intrinsics shared by the AVX2 build's hand-written pointwise loops: f32 loads and stores on
// 8 lanes and f32 or bf16 ones on pairs of registers (a row's tail included), and simd_math.h's
// exp_f32 and the sigmoid on a register. Included only where __AVX2__ and __FMA__ are defined
// without AVX-512 (the *_avx2.cc builds); the AVX-512 build has simd_avx512.h, the scalar build
// the plain loops.
//
// Why: on a CPU without AVX-512 the plain loops' bf16 store is GCC's rendering of simd_math.h's
// f32_to_bf16_bits, about fifteen instructions a register (an unsigned compare built from a min and
// an equality, masks, and a narrowing through vpermq), and their exp under `#pragma omp simd` is
// the same straight-line code with selects; on a core whose vector units are 128 bits wide (AMD
// Zen 1, where each ymm instruction is two) the bf16 norms, RoPE and gated unit were bound by
// those instructions at 4-37 % of the memory bound. Here a register's rounding is seven integer
// instructions with no shift, and a pair of registers (16 values) loads with one load and two
// unpacks and stores with two shuffles and an or.
//
// Rounding: f32_to_bf16_bits exactly (round to nearest even, NaN kept a quiet NaN, subnormals
// rounded like any other value), so the AVX2 loops equal the plain loops' rounding bit for bit.
// Products and sums: GCC may fuse an intrinsic product with the add that follows it into one
// multiply-add (it does so in the plain loops too, by its own choice), so a loop written here and
// its plain form agree to the rounding of such a step, not always bit for bit.
#pragma once

#if !defined(__AVX2__) || !defined(__FMA__) || defined(__AVX512F__)
#error "simd_avx2.h is for the AVX2 build only"
#endif

#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace tessera::cpu::avx2v {
namespace {

constexpr int64_t kLanes = 8;

// All-ones in the first n (0..8) 32-bit lanes: the mask of vmaskmovps for a row's tail.
inline __m256i first_lanes(int64_t n) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int32_t>(n)), idx);
}

// Calls f(j, n) for the registers of a row of `cols` values: j = 0, 8, 16, ..., n = min(8, cols - j);
// whole registers first (n is the constant 8 there, which the loads and stores below test at
// compile time once f is inlined), then the tail.
template <typename F>
inline void for_each_register(int64_t cols, F&& f) {
  int64_t j = 0;
  for (; j + kLanes <= cols; j += kLanes) f(j, kLanes);
  if (j < cols) f(j, cols - j);
}

// ---- f32 --------------------------------------------------------------------------------------

inline __m256 load(const float* p) {
  return _mm256_loadu_ps(p);
}
// The first n (<= 8) values; the other lanes read as +0 and nothing past p + n is touched.
inline __m256 load(const float* p, int64_t n) {
  return n == kLanes ? load(p) : _mm256_maskload_ps(p, first_lanes(n));
}
inline void store(float* p, __m256 v) {
  _mm256_storeu_ps(p, v);
}
inline void store(float* p, __m256 v, int64_t n) {
  if (n == kLanes)
    store(p, v);
  else
    _mm256_maskstore_ps(p, first_lanes(n), v);
}

// ---- bf16 -------------------------------------------------------------------------------------

// f32_to_bf16_bits on 8 lanes, the result in the top half of each 32-bit lane: u + 0x7fff + lsb,
// where lsb is bit 16 of u (ties to even; added as the negated all-ones mask of an equality, which
// costs no shift); a NaN lane gives u | 0x00400000, its quiet bit set.
// kNoNaN: the caller knows no lane is NaN, and the NaN select is left out.
template <bool kNoNaN = false>
inline __m256i round_to_bf16_high(__m256 v) {
  const __m256i u = _mm256_castps_si256(v), bit16 = _mm256_set1_epi32(0x10000);
  const __m256i odd = _mm256_cmpeq_epi32(_mm256_and_si256(u, bit16), bit16);
  const __m256i r = _mm256_sub_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), odd);
  if constexpr (kNoNaN) return r;
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  return _mm256_blendv_epi8(r, _mm256_or_si256(u, _mm256_set1_epi32(0x00400000)), nan);
}
// vpshufb patterns that gather the top halves of a register's 32-bit lanes into the low or the
// high 8 bytes of each 128-bit lane, zeroing the rest.
inline __m256i top_halves_to_low() {
  return _mm256_setr_epi8(2, 3, 6, 7, 10, 11, 14, 15, -1, -1, -1, -1, -1, -1, -1, -1,  //
                          2, 3, 6, 7, 10, 11, 14, 15, -1, -1, -1, -1, -1, -1, -1, -1);
}
inline __m256i top_halves_to_high() {
  return _mm256_setr_epi8(-1, -1, -1, -1, -1, -1, -1, -1, 2, 3, 6, 7, 10, 11, 14, 15,  //
                          -1, -1, -1, -1, -1, -1, -1, -1, 2, 3, 6, 7, 10, 11, 14, 15);
}

// ---- pairs: 16 values as two registers, for loops whose lanes are independent -------------------
// bf16 -> f32 is exact (the 16 bits become the top half of the float): one 32-byte load,
// interleaved with zeros (vpunpck{l,h}wd, which work within 128-bit lanes): `lo` holds elements
// 0-3 and 8-11, `hi` elements 4-7 and 12-15, and the store puts them back in order with two
// vpshufb and an or. Against two widening loads and a narrowing store this saves the shifts and
// the cross-lane moves, a quarter of the time of a bf16 copy on Zen 1. An f32 operand of such a
// loop (a norm's gamma, RoPE's tables) is read in the same order with load_pair_order; f32 rows
// alone are two plain registers (elements 0-7, 8-15).
constexpr int64_t kPairLanes = 16;
struct Pair {
  __m256 lo, hi;
};
inline Pair load_pair(const uint16_t* p) {
  const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)), z = _mm256_setzero_si256();
  return {_mm256_castsi256_ps(_mm256_unpacklo_epi16(z, x)), _mm256_castsi256_ps(_mm256_unpackhi_epi16(z, x))};
}
// One compare finds whether either register holds a NaN (lo and hi unordered); where neither does,
// which is every pair but a diverged run's, the rounding leaves its NaN select out.
inline void store_pair(uint16_t* p, const Pair& v) {
  __m256i lo, hi;
  if (_mm256_movemask_ps(_mm256_cmp_ps(v.lo, v.hi, _CMP_UNORD_Q)) == 0) [[likely]] {
    lo = round_to_bf16_high<true>(v.lo);
    hi = round_to_bf16_high<true>(v.hi);
  } else {
    lo = round_to_bf16_high(v.lo);
    hi = round_to_bf16_high(v.hi);
  }
  lo = _mm256_shuffle_epi8(lo, top_halves_to_low());
  hi = _mm256_shuffle_epi8(hi, top_halves_to_high());
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm256_or_si256(lo, hi));
}
inline Pair load_pair(const float* p) {
  return {load(p), load(p + kLanes)};
}
inline void store_pair(float* p, const Pair& v) {
  store(p, v.lo);
  store(p + kLanes, v.hi);
}
// 16 f32 values in the lane order of a bf16 pair.
inline Pair load_pair_order(const float* p) {
  return {_mm256_loadu2_m128(p + 8, p), _mm256_loadu2_m128(p + 12, p + 4)};
}
inline void store_pair_order(float* p, const Pair& v) {
  _mm256_storeu2_m128(p + 8, p, v.lo);
  _mm256_storeu2_m128(p + 12, p + 4, v.hi);
}
// The first n (<= 16) values of a row, those of a tail through a buffer: lanes past n read as +0
// and are not written.
template <typename T>
inline Pair load_pair(const T* p, int64_t n) {
  if (n == kPairLanes) return load_pair(p);
  alignas(32) T buf[kPairLanes] = {};
  std::memcpy(buf, p, static_cast<size_t>(n) * sizeof(T));
  return load_pair(buf);
}
template <typename T>
inline void store_pair(T* p, const Pair& v, int64_t n) {
  if (n == kPairLanes) return store_pair(p, v);
  alignas(32) T buf[kPairLanes];
  store_pair(buf, v);
  std::memcpy(p, buf, static_cast<size_t>(n) * sizeof(T));
}
inline Pair load_pair_order(const float* p, int64_t n) {
  if (n == kPairLanes) return load_pair_order(p);
  alignas(32) float buf[kPairLanes] = {};
  std::memcpy(buf, p, static_cast<size_t>(n) * sizeof(float));
  return load_pair_order(buf);
}
inline void store_pair_order(float* p, const Pair& v, int64_t n) {
  if (n == kPairLanes) return store_pair_order(p, v);
  alignas(32) float buf[kPairLanes];
  store_pair_order(buf, v);
  std::memcpy(p, buf, static_cast<size_t>(n) * sizeof(float));
}

// An f32 operand of a loop over rows of T (float or uint16_t holding bf16), read and written in
// the lane order of T's pairs: plain for f32 rows, load_pair_order's for bf16 ones.
template <typename T>
inline Pair load_pair_like(const float* p, int64_t n) {
  if constexpr (std::is_same_v<T, uint16_t>)
    return load_pair_order(p, n);
  else
    return load_pair(p, n);
}
template <typename T>
inline void store_pair_like(float* p, const Pair& v, int64_t n) {
  if constexpr (std::is_same_v<T, uint16_t>)
    store_pair_order(p, v, n);
  else
    store_pair(p, v, n);
}

// Calls f(j, n) for the pairs of a row of `cols` values, as for_each_register: n = 16 for the
// whole pairs, then the tail (n < 16) once.
template <typename F>
inline void for_each_pair(int64_t cols, F&& f) {
  int64_t j = 0;
  for (; j + kPairLanes <= cols; j += kPairLanes) f(j, kPairLanes);
  if (j < cols) f(j, cols - j);
}

// ---- math -------------------------------------------------------------------------------------

// The sum of the lanes as a tree (halves added lane by lane), as simd_vec.h's sum_lanes.
inline float sum_lanes(__m256 v) {
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

// exp_f32 of simd_math.h on 8 lanes, operation for operation: the same clamp, reduction,
// polynomial and fused multiply-adds, and the same scaling by 2^n as two exact-range factors
// 2^(n/2 rounded down) and 2^(rest), so every lane equals exp_f32 bit for bit.
// exp_ps_n: U registers in place, their operations interleaved step by step. One register's exp
// is a chain of some twenty dependent operations; on Zen 1 a loop of single exps runs at the pace
// of how far the out-of-order window reaches into the next iteration (GCC does not reorder on
// x86), and four chains in program order run 1.4x faster (simd_vec.h's exp_vec_n, measured).
template <int U>
inline void exp_ps_n(__m256 (&x)[U]) {
  const __m256 round = _mm256_set1_ps(12582912.0f);  // 1.5 * 2^23
  __m256 t[U], r[U], p[U];
  for (int u = 0; u < U; ++u) {
    // max/min return their second operand when either is NaN: a NaN lane passes through.
    const __m256 xc = _mm256_min_ps(_mm256_set1_ps(88.73f), _mm256_max_ps(_mm256_set1_ps(-104.0f), x[u]));
    t[u] = _mm256_fmadd_ps(xc, _mm256_set1_ps(1.44269504088896341f), round);
    r[u] = xc;
  }
  for (int u = 0; u < U; ++u) {
    const __m256 n = _mm256_sub_ps(t[u], round);
    r[u] = _mm256_fmadd_ps(n, _mm256_set1_ps(-0.693359375f), r[u]);
    r[u] = _mm256_fmadd_ps(n, _mm256_set1_ps(2.12194440e-4f), r[u]);
  }
  for (int u = 0; u < U; ++u)
    p[u] = _mm256_fmadd_ps(_mm256_set1_ps(1.9875691500e-4f), r[u], _mm256_set1_ps(1.3981999507e-3f));
  for (int u = 0; u < U; ++u) p[u] = _mm256_fmadd_ps(p[u], r[u], _mm256_set1_ps(8.3334519073e-3f));
  for (int u = 0; u < U; ++u) p[u] = _mm256_fmadd_ps(p[u], r[u], _mm256_set1_ps(4.1665795894e-2f));
  for (int u = 0; u < U; ++u) p[u] = _mm256_fmadd_ps(p[u], r[u], _mm256_set1_ps(1.6666665459e-1f));
  for (int u = 0; u < U; ++u) p[u] = _mm256_fmadd_ps(p[u], r[u], _mm256_set1_ps(5.0000001201e-1f));
  for (int u = 0; u < U; ++u)
    p[u] = _mm256_add_ps(_mm256_fmadd_ps(p[u], _mm256_mul_ps(r[u], r[u]), r[u]), _mm256_set1_ps(1.0f));
  for (int u = 0; u < U; ++u) {
    const __m256i ni = _mm256_sub_epi32(_mm256_castps_si256(t[u]), _mm256_castps_si256(round));
    const __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
    const __m256i bias = _mm256_set1_epi32(127);
    const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
    x[u] = _mm256_mul_ps(_mm256_mul_ps(p[u], s1), s2);
  }
}
inline __m256 exp_ps(__m256 x) {
  __m256 v[1] = {x};
  exp_ps_n(v);
  return v[0];
}

// sigmoid(x) = 1 / (1 + exp(-x)) as the plain loops compute it (an IEEE division; see the file
// comment on the add after exp's last product); U registers in place, as exp_ps_n.
template <int U>
inline void sigmoid_ps_n(__m256 (&x)[U]) {
  const __m256 one = _mm256_set1_ps(1.0f);
  for (int u = 0; u < U; ++u) x[u] = _mm256_sub_ps(_mm256_setzero_ps(), x[u]);
  exp_ps_n(x);
  for (int u = 0; u < U; ++u) x[u] = _mm256_div_ps(one, _mm256_add_ps(one, x[u]));
}
inline __m256 sigmoid_ps(__m256 x) {
  __m256 v[1] = {x};
  sigmoid_ps_n(v);
  return v[0];
}

}  // namespace
}  // namespace tessera::cpu::avx2v
