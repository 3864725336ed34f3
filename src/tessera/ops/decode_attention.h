// Decode attention: one new query per sequence against the keys and values its earlier steps left
// in a KV cache. The cache has a row per sequence slot: k_cache, v_cache [S, T, Hkv, D], where
// position j of slot s holds that sequence's key and value at position j. Query row b belongs to
// slot slot[b] and sits at position i = length[b] - 1 (its own key and value are already written
// there), and sees the keys j of its slot with
//   j <= i                      (causal: positions 0 .. length - 1)
//   i - W < j                   (with a sliding window W > 0)
// which are ops/attention.h's rules for the last row of a causal sequence. GQA: query head h
// reads kv head h / (H / Hkv).
//
//   out[b, h] = sum_j softmax_j(s_j) v[slot_b, j, h'],  s_j = scale * q[b, h] . k[slot_b, j, h']
//   (with logits_soft_cap c > 0: s_j = c * tanh(s_j / c), Gemma 2, as ops/attention.h)
//
// Shapes: q, out [M, H, D]; slot, length int32 [M] (slots may repeat only in tests of the math:
// the op reads the cache and never writes it); q, caches and out all f32 or all bf16 (bf16 is
// widened, computed in f32, and out rounded to nearest even once). D <= 256.
// FLOPs: the two products, 4 * D per (query head, visible key), as MaxText counts attention.
// Left out: the backward (decoding only), segments, and writing the cache (the
// caller stores the new key and value before calling).
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera::ops {

struct DecodeAttentionOptions {
  float scale = 0.0f;          // 0: 1 / sqrt(D); otherwise must be > 0
  int64_t sliding_window = 0;  // 0: none
  float logits_soft_cap = 0;   // 0: off
  // f32 [H]: attention sinks (GPT-OSS; ops/attention.h): sinks[h] is one more logit in every
  // softmax of query head h, with a zero value. Undefined: none.
  Tensor sinks;
};

// Throws kShape naming the argument for bad shapes or dtypes, a slot outside [0, S), or a length
// outside [1, T].
void decode_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& slot,
                      const Tensor& length, const Tensor& out, const DecodeAttentionOptions& opt = {});

// 4 * H * D per visible key, summed over the rows.
double decode_attention_flops(const std::vector<int64_t>& visible_keys, int64_t H, int64_t D);

// Reference in double: q [M, H, D], caches [S, T, Hkv, D] flattened row-major; out resized to
// [M, H, D].
struct DecodeAttentionDims {
  int64_t M, H, Hkv, D, S, T;
};
// `sinks` [H] (empty: none) stands for opt.sinks.
void decode_attention_ref(const DecodeAttentionDims& dims, const DecodeAttentionOptions& opt,
                          const std::vector<double>& q, const std::vector<double>& k_cache,
                          const std::vector<double>& v_cache, const std::vector<int32_t>& slot,
                          const std::vector<int32_t>& length, std::vector<double>* out,
                          const std::vector<double>& sinks = {});

}  // namespace tessera::ops
