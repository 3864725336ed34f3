// Embedding kernels: gather rows of a table by token id, and the scatter-add of the gradient.
// ops/embedding.cc checks shapes, dtypes and that every id is in [0, V) before these run.
// The table type is device-neutral: each backend fills one (backends/kernels.h); the CPU's are
// built per ISA in backends/cpu/.
#pragma once

#include <cstdint>

#include "tessera/core/dtype.h"

namespace tessera::backends {

struct EmbeddingLookup {
  const int32_t* ids;  // [N], each in [0, vocab)
  int64_t n;           // N
  int64_t c;           // C, the row width
  int64_t vocab;       // V
};

struct EmbeddingKernels {
  // out[n, :] = table[ids[n], :], converted from table_dtype to out_dtype (f32 or bf16; bf16 is
  // rounded to nearest even).
  void (*forward)(const EmbeddingLookup& lk, const void* table, DType table_dtype, void* out,
                  DType out_dtype);
  // dtable[ids[n], :] += dout[n, :] for n = 0, 1, ..., N-1 in that order (dout f32 or bf16). Bitwise
  // the same for every thread count: see embedding_kernels.inc.
  void (*backward)(const EmbeddingLookup& lk, const void* dout, DType dout_dtype, float* dtable);
};
}  // namespace tessera::backends
