// AMX calibration: C[t] += A[i] · B[j] over tiles kept in the tile registers, four accumulators
// (C0 = A0·B0, C1 = A0·B1, C2 = A1·B0, C3 = A1·B1) so that consecutive TDPBF16PS do not wait on one
// another. One TDPBF16PS multiplies a 16 x 32 bf16 tile by a 32 x 16 one (stored as 16 rows of 16
// bf16 pairs) into 16 x 16 f32: 16 x 16 x 32 multiply-adds, 16384 FLOPs.
#include <immintrin.h>

#include <cstdint>

#include "tessera/backends/cpu/peak_kernels.h"

namespace tessera::cpu::amx {
namespace {

// The LDTILECFG operand: palette 1, every tile 16 rows of 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};

constexpr double kFlopsPerTile = 16.0 * 16.0 * 32.0 * 2.0;

}  // namespace

double dot_bf16(int64_t iters, float* sink) {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.bytes_per_row[t] = 64;
    cfg.rows[t] = 16;
  }
  alignas(64) uint16_t operand[16 * 32];
  for (uint16_t& x : operand) x = 0x3380;  // bf16 ~6e-8: the sums stay far from overflow
  alignas(64) float out[16 * 16];
  _tile_loadconfig(&cfg);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, operand, 64);
  _tile_loadd(5, operand, 64);
  _tile_loadd(6, operand, 64);
  _tile_loadd(7, operand, 64);
  for (int64_t i = 0; i < iters; ++i) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  float s = 0;
  _tile_stored(0, out, 64);
  for (float x : out) s += x;
  _tile_stored(3, out, 64);
  for (float x : out) s += x;
  _tile_release();
  *sink = s;
  return static_cast<double>(iters) * 4 * kFlopsPerTile;
}

}  // namespace tessera::cpu::amx
