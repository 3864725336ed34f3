// Softmax cross-entropy kernels, fused with the log-softmax, over rows of logits [N, V]; and the
// vector exp they are built on. Shapes, dtypes and target ranges are checked by ops/cross_entropy.cc
// before these run: a kernel trusts its arguments.
// The table type is device-neutral: each backend fills one (backends/kernels.h); the CPU's are
// built per ISA in backends/cpu/.
#pragma once

#include <cstdint>

namespace tessera::backends {

// The rows one call works on.
struct CrossEntropyRows {
  const void* logits;  // [N, V], f32 or bf16 (logits_bf16)
  bool logits_bf16;
  const int32_t* targets;  // [N]; t < 0 is ignored, otherwise 0 <= t < V
  int64_t n;               // N
  int64_t vocab;           // V
  float z_loss;            // z: loss += z * lse^2 (0 disables)
};

struct CrossEntropyKernels {
  // y[i] = exp(x[i]) by the Cephes-style polynomial of cross_entropy_kernels.inc: maximum relative
  // error 1e-7 (1.4 ulp measured) for x in [-87.3, 88.3]; below that range (where exp(x) < FLT_MIN)
  // 0, or on the AVX-512 build the subnormal result (simd_avx512.h's exp_ps); +inf above; NaN
  // stays NaN. Exposed for tests and for ops that need a vector exp.
  void (*exp_f32)(const float* x, float* y, int64_t n);
  // Per row n: lse[n] = log sum_v exp(logits[n, v]) (always, ignored rows included);
  // loss[n] = lse[n] - logits[n, t] + z * lse[n]^2 for t = targets[n] >= 0, and 0 when t < 0.
  void (*forward)(const CrossEntropyRows& rows, float* loss, float* lse);
  // dlogits[n, v] = dloss[n] * ((1 + 2 z lse[n]) * exp(logits[n, v] - lse[n]) - [v == t]), and 0 for
  // the whole row when t < 0. dlogits has the logits' dtype and may be the logits (in place).
  void (*backward)(const CrossEntropyRows& rows, const float* lse, const float* dloss, void* dlogits);
  // forward then backward in one visit per row, for when dloss is known before the forward runs
  // (training, where it is the gradient's seed): the same loss, lse and dlogits, each logit's exp
  // computed once. dlogits may be the logits (in place).
  void (*forward_backward)(const CrossEntropyRows& rows, const float* dloss, float* loss, float* lse,
                           void* dlogits);
};
}  // namespace tessera::backends
