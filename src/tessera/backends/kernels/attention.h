// Flash-style attention kernels (forward and backward) for the CPU, built for AVX-512 (bf16 products
// on the AMX tiles or vdpbf16ps where backends/cpu/attention_products.h chooses them), AVX2 and the
// scalar baseline from attention_kernels.inc. The
// op entry (ops/attention.cc) checks shapes and dtypes; these take raw pointers. Layouts and the
// visibility rules are those of ops/attention.h.
// The table type is device-neutral: each backend fills one (backends/kernels.h); the CPU's are
// built per ISA in backends/cpu/.
#pragma once

#include <cstdint>

namespace tessera::backends {

struct AttentionProblem {
  int64_t B, T, H, Hkv, D;
  bool bf16;  // q, k, v, out, dout, dq, dk, dv hold bf16 (else f32)
  bool causal;
  float scale;                 // > 0
  int64_t window;              // sliding window; 0 = none
  float soft_cap;              // 0 = off
  const int32_t* segment_ids;  // [B, T], or null
  int64_t block_q, block_k;    // tile sizes; 0 = chosen by the kernel
};

struct AttentionKernels {
  // out [B, T, H, D], lse f32 [B, H, T].
  void (*forward)(const AttentionProblem& p, const void* q, const void* k, const void* v, void* out,
                  float* lse);
  // dq [B, T, H, D], dk and dv [B, T, Hkv, D], all overwritten.
  void (*backward)(const AttentionProblem& p, const void* dout, const void* q, const void* k, const void* v,
                   const void* out, const float* lse, void* dq, void* dk, void* dv);
  // y[i] = exp(x[i]) with the softmax's vectorised polynomial (exposed so tests check its error).
  void (*exp_f32)(const float* x, float* y, int64_t n);
  // Attention sinks (GPT-OSS): one more logit sinks[h] per query head, with a zero value, in every
  // softmax of head h. After forward: lse <- log(exp(lse) + exp(sinks[h])) and out scaled by
  // exp(old lse - new lse). The backward then runs as is on that out and lse.
  void (*apply_sinks)(const AttentionProblem& p, const float* sinks, void* out, float* lse);
  // dsinks[h] += -sum over (b, t) of exp(sinks[h] - lse[b, h, t]) * (dout · out)[b, t, h] (lse and
  // out with the sinks applied); summed in double, over (b, t) in order.
  void (*sinks_backward)(const AttentionProblem& p, const float* sinks, const void* dout, const void* out,
                         const float* lse, float* dsinks);
};
}  // namespace tessera::backends
