// Attention of one new query per sequence against its KV cache (the decode step), built for
// AVX-512, AVX2 and the scalar baseline from decode_attention_kernels.inc. The op entry
// (ops/decode_attention.h) checks shapes and dtypes and states the math; these take raw pointers.
// The table type is device-neutral: each backend fills one (backends/kernels.h); the CPU's are
// built per ISA in backends/cpu/.
#pragma once

#include <cstdint>

namespace tessera::backends {

struct DecodeAttentionProblem {
  int64_t rows;           // M: queries, one per sequence
  int64_t H, Hkv, D;      // query heads, kv heads (H % Hkv == 0), head dim
  int64_t slots, T;       // cache geometry: [slots, T, Hkv, D]
  bool bf16;              // q, caches and out hold bf16 (else f32)
  float scale;            // > 0
  int64_t window;         // sliding window W (0: none)
  const int32_t* slot;    // [rows]: the cache row of each query
  const int32_t* length;  // [rows]: keys 0 .. length-1 exist; the query sits at length - 1
  const float* sinks;     // [H]: one more logit per query head with a zero value; nullptr: none
  float soft_cap = 0;     // s = soft_cap * tanh(s / soft_cap) (Gemma 2); 0: off
};

struct DecodeAttentionKernels {
  // q, out [rows, H, D]; k, v [slots, T, Hkv, D].
  void (*forward)(const DecodeAttentionProblem& p, const void* q, const void* k, const void* v, void* out);
};
}  // namespace tessera::backends
