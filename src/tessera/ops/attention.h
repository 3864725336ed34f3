// Scaled dot-product attention, FlashAttention-2 style: forward, backward, FLOP counts, and a
// reference in double. Causal by default; GQA/MQA, sliding windows, packed segments and Gemma-2
// logit soft-capping and attention sinks are options. Leaves out: dropout, ALiBi or other additive
// biases, and a KV cache for decoding (the decode path calls this with T = prompt length).
//
// Shapes (row-major, contiguous; tokens of a sequence are rows, heads are a dimension):
//   q, out, dout, dq   [B, T, H, D]
//   k, v, dk, dv       [B, T, Hkv, D]   H % Hkv == 0: query head h reads KV head h / (H / Hkv)
//   lse                f32 [B, H, T]    natural-log logsumexp of each query's logits, saved by
//                                       the forward for the backward
//   segment_ids        int32 [B, T]     optional
// q, k, v, out, dout, dq, dk, dv are all f32 or all bf16: bf16 is loaded, computed in f32 and
// stored rounded to nearest even.
//
// Visibility: the query at position i of row b sees the key at position j iff every enabled rule
// holds:
//   causal             j <= i
//   sliding_window W   i - W < j; when not causal also j < i + W (the symmetric band |i - j| < W)
//   segment_ids        seg[b, i] == seg[b, j]
// Segment id 0 is not special: padding (id 0 in Tessera's packing) attends only to padding, which
// keeps its outputs finite, and real tokens never see it; the loss masks padding out. Every query
// sees at least itself, so no softmax row is empty.
//
// Logits: s = scale * (q . k); with logits_soft_cap c > 0, s = c * tanh(s / c) (Gemma 2). The
// cap costs one more exp and a division per score: ~12% of the forward, ~7% of the backward at
// T = 1024, D = 64; nothing when off.
// out = softmax(s over visible keys) @ v,  lse = log(sum over visible keys of exp(s)).
// Sinks (GPT-OSS): sinks[h] is one more logit in every softmax of query head h, with a zero value:
// lse = log(exp(sinks[h]) + sum exp(s)) and the probabilities of the keys sum to less than 1. The
// sink is not scaled. attention_bwd needs nothing more (its probabilities come from that lse); the
// sinks' own gradient is attention_sinks_bwd.
//
// Gradients (activation gradients, so OVERWRITTEN): dq; dk and dv sum over the H / Hkv query heads
// that share each KV head. The backward recomputes the probabilities from lse and uses
// D_i = rowsum(dout * out), as FlashAttention-2 does.
//
// Work: tiles of Bq query positions (times the H / Hkv heads sharing a KV head) by Bk keys with an
// online softmax; no T x T matrix exists. Tiles that the mask hides entirely (causal, window,
// disjoint segments) are skipped, so causal costs about half of non-causal. Scratch is per-thread
// and grows once; the forward is parallel over (B, Hkv, query tiles), the backward over (B, Hkv)
// (split further over query tiles when that leaves threads idle), with no two tasks writing the
// same element, so results are deterministic for a given thread count.
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera::ops {

struct AttentionOptions {
  bool causal = true;
  float scale = 0.0f;            // 0: 1 / sqrt(D); otherwise must be > 0
  int64_t sliding_window = 0;    // 0: none; else W >= 1 as described above
  Tensor segment_ids;            // int32 [B, T]; undefined: one segment per row
  float logits_soft_cap = 0.0f;  // 0: off
  Tensor sinks;                  // f32 [H]: attention sinks (GPT-OSS), see below; undefined: none
  // Tile sizes (query positions, keys); 0 chooses them. For tests and tuning only: results do
  // not depend on them beyond float rounding.
  int64_t block_q = 0;
  int64_t block_k = 0;
};

// out, lse = attention(q, k, v).
void attention_fwd(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                   const AttentionOptions& opt = {});

// dq, dk, dv = gradients of sum(dout * out) given the forward's out and lse (all overwritten).
void attention_bwd(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                   const Tensor& lse, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                   const AttentionOptions& opt = {});

// dsinks f32 [H] += the gradient of sum(dout * out) with respect to opt.sinks, from the forward's out
// and lse: -sum over (b, t) of exp(sinks[h] - lse) * (dout · out).
void attention_sinks_bwd(const Tensor& dout, const Tensor& out, const Tensor& lse, const Tensor& dsinks,
                         const AttentionOptions& opt);

// FLOPs as MaxText counts them: the two matmuls QK^T and PV, 2*T*T*D each per (batch, query
// head) without a mask, i.e. 4*B*T^2*H*D non-causal; causal halves it to 2*B*T^2*H*D; a causal
// sliding window W < T counts its T*W - W^2/2 visible pairs: 4*B*(T*W - W^2/2)*H*D (twice that for
// the non-causal band). Softmax, exp and masking are not counted; segments do not change the count.
// window = 0 means no window.
double attention_fwd_flops(int64_t B, int64_t T, int64_t H, int64_t D, int64_t window = 0,
                           bool causal = true);
// The backward is 2.5x the forward: five tile matmuls (S recomputed, dP, dV, dK, dQ) against two.
double attention_bwd_flops(int64_t B, int64_t T, int64_t H, int64_t D, int64_t window = 0,
                           bool causal = true);

// Reference in double, materialising every score row (fine for small T). Tensors as above,
// flattened row-major; opt.segment_ids (if defined) is read as int32 [B, T]; block sizes ignored.
struct AttentionDims {
  int64_t B, T, H, Hkv, D;
};
void attention_ref(const AttentionDims& dims, const AttentionOptions& opt, const std::vector<double>& q,
                   const std::vector<double>& k, const std::vector<double>& v, std::vector<double>* out,
                   std::vector<double>* lse);
// Analytic gradients of sum(dout * out); recomputes the forward itself. dq and dk are sums of
// terms scale * p_j * (dp_j - D) * k_j (resp. q_i) that cancel where a row's probability sits on
// few keys; dq_terms / dk_terms (optional) receive the sums of those terms' magnitudes,
// scale * p_j * (|dp_j| + |D|) * |k_j|, which bound the float rounding of any implementation and
// so scale the tests' tolerances. (The soft cap's factor 1 - tanh^2 <= 1 is left out of the bound.)
void attention_bwd_ref(const AttentionDims& dims, const AttentionOptions& opt,
                       const std::vector<double>& dout, const std::vector<double>& q,
                       const std::vector<double>& k, const std::vector<double>& v, std::vector<double>* dq,
                       std::vector<double>* dk, std::vector<double>* dv,
                       std::vector<double>* dq_terms = nullptr, std::vector<double>* dk_terms = nullptr,
                       std::vector<double>* dsinks = nullptr);

}  // namespace tessera::ops
