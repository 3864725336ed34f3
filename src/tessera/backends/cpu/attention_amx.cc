// The AMX tile products of attention_amx.h. Four accumulator tiles hold a 32 x 32 block of C
// (tiles 0-3), two hold A's 16-row strips (4, 5) and two B's 16-column strips (6, 7), so each
// step of 32 in K loads four tiles for four TDPBF16PS; edge blocks of 16 use fewer. Built with the
// AVX-512 flags besides AMX's (every CPU with the tiles has AVX-512), for the column maxima.
#include "tessera/backends/cpu/attention_amx.h"

#include <immintrin.h>

// GCC 12 reports the _mm512_undefined_ps() inside _mm512_max_ps as "may be used uninitialized" once
// it is inlined (GCC bug 105593); the warning is spurious.
#ifndef __clang__
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace tessera::cpu::amx {
namespace {

struct alignas(64) TileConfig {  // the LDTILECFG operand: palette 1
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};

}  // namespace

void gemm_bf16(int64_t M, int64_t N, int64_t K, const uint16_t* a, int64_t lda, const uint32_t* b,
               int64_t ldb, float* c, int64_t ldc, bool accumulate, float* col_max) {
  // Every tile 16 rows of 64 bytes. Loaded on every call: other code on this thread (oneDNN's
  // matmuls) configures the tiles its own way between calls.
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.bytes_per_row[t] = 64;
    cfg.rows[t] = 16;
  }
  _tile_loadconfig(&cfg);
  const int64_t sa = lda * 2, sb = ldb * 4, sc = ldc * 4;  // strides in bytes
  for (int64_t i = 0; i < M; i += 32) {
    const bool two_i = i + 16 < M;
    for (int64_t j = 0; j < N; j += 32) {
      const bool two_j = j + 16 < N;
      float* c00 = c + i * ldc + j;
      float* c10 = c00 + 16 * ldc;
      if (accumulate) {
        _tile_loadd(0, c00, sc);
        if (two_j) _tile_loadd(1, c00 + 16, sc);
        if (two_i) _tile_loadd(2, c10, sc);
        if (two_i && two_j) _tile_loadd(3, c10 + 16, sc);
      } else {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
      }
      for (int64_t k = 0; k < K; k += 32) {
        _tile_loadd(4, a + i * lda + k, sa);
        if (two_i) _tile_loadd(5, a + (i + 16) * lda + k, sa);
        _tile_loadd(6, b + (k / 2) * ldb + j, sb);
        if (two_j) _tile_loadd(7, b + (k / 2) * ldb + j + 16, sb);
        _tile_dpbf16ps(0, 4, 6);
        if (two_j) _tile_dpbf16ps(1, 4, 7);
        if (two_i) _tile_dpbf16ps(2, 5, 6);
        if (two_i && two_j) _tile_dpbf16ps(3, 5, 7);
      }
      _tile_stored(0, c00, sc);
      if (two_j) _tile_stored(1, c00 + 16, sc);
      if (two_i) _tile_stored(2, c10, sc);
      if (two_i && two_j) _tile_stored(3, c10 + 16, sc);
      if (col_max) {  // the block's rows, still in L1
        __m512 m0 = _mm512_loadu_ps(col_max + j), m1 = two_j ? _mm512_loadu_ps(col_max + j + 16) : m0;
        for (int64_t r = 0; r < (two_i ? 32 : 16); ++r) {
          m0 = _mm512_max_ps(m0, _mm512_loadu_ps(c00 + r * ldc));
          if (two_j) m1 = _mm512_max_ps(m1, _mm512_loadu_ps(c00 + r * ldc + 16));
        }
        _mm512_storeu_ps(col_max + j, m0);
        if (two_j) _mm512_storeu_ps(col_max + j + 16, m1);
      }
    }
  }
  _tile_release();
}

}  // namespace tessera::cpu::amx
