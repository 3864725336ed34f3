// bf16 products on the AMX tiles for the attention kernels (attention_kernels.inc's AVX-512 build),
// compiled apart with the AMX flags (attention_amx.cc) and called only where
// core/cpu_features.h's amx_bf16_usable() holds.
#pragma once

#include <cstdint>

namespace tessera::cpu::amx {

// C (+)= A B: A bf16 [M][K] row-major (lda elements apart), B bf16 [K][N] stored as K / 2 rows of
// N pairs (B[2k][n], B[2k + 1][n]) in one 32-bit word each (ldb words apart), C f32 [M][N] (ldc
// floats apart), overwritten unless accumulate. M and N are multiples of 16, K of 32. The
// products are exact in f32 and summed in f32 (TDPBF16PS; subnormal inputs and results are 0).
// With col_max (N floats, else null) each col_max[j] is raised to the largest C[i][j] over the M
// rows, read back from L1 right after each block's tiles are stored.
void gemm_bf16(int64_t M, int64_t N, int64_t K, const uint16_t* a, int64_t lda, const uint32_t* b,
               int64_t ldb, float* c, int64_t ldc, bool accumulate, float* col_max);

}  // namespace tessera::cpu::amx
