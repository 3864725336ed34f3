// Vocabulary-parallel kernels: the parts of the embedding and of the softmax cross-entropy that
// one shard of the vocabulary computes on its own (ops/vocab_parallel.h says how the shards
// combine). A shard holds the global vocabulary rows (table) or columns (logits)
// [offset, offset + vocab_local). ops/vocab_parallel.cc checks shapes, dtypes and id ranges
// before these run: a kernel trusts its arguments.
// Left out: the shard's log-sum-exp over its logits, which is the cross-entropy kernel's forward
// (cross_entropy_kernels.h) run with every target ignored.
// The table type is device-neutral: each backend fills one (backends/kernels.h); the CPU's are
// built per ISA in backends/cpu/.
#pragma once

#include <cstdint>

#include "tessera/core/dtype.h"

namespace tessera::backends {

// Tokens and the shard of the vocabulary a call works on.
struct VocabShard {
  const int32_t* ids;   // [N] global ids (embedding) or targets (cross-entropy; t < 0 ignored)
  int64_t n;            // N
  int64_t offset;       // first global id of the shard
  int64_t vocab_local;  // Vl: ids in [offset, offset + Vl) belong to this shard
};

struct VocabParallelKernels {
  // out[n, :] = table[ids[n] - offset, :] (converted to out_dtype, bf16 rounded to nearest even)
  // when ids[n] is in the shard, else 0. table [Vl, C] f32 or bf16; out [N, C] f32 or bf16.
  void (*embedding_forward)(const VocabShard& s, int64_t c, const void* table, DType table_dtype, void* out,
                            DType out_dtype);
  // dtable[ids[n] - offset, :] += dout[n, :] for the tokens in the shard, in token order (bitwise
  // the same for every thread count, as embedding_kernels.h). dout f32 or bf16; dtable [Vl, C] f32.
  void (*embedding_backward)(const VocabShard& s, int64_t c, const void* dout, DType dout_dtype,
                             float* dtable);
  // Per row n with target t = ids[n] >= 0:
  //   dlogits[n, v] = dloss[n] * ((1 + 2 z lse[n]) * exp(logits[n, v] - lse[n]) - [v == t - offset])
  // over the shard's columns v in [0, Vl) (the one-hot only where t is in the shard); the whole row
  // is 0 when t < 0. logits and dlogits [N, Vl] in one dtype (f32 or bf16), in place allowed.
  void (*cross_entropy_backward)(const VocabShard& s, const void* logits, bool bf16, float z_loss,
                                 const float* lse, const float* dloss, void* dlogits);
};
}  // namespace tessera::backends
