// Normalisation kernels over rows: RMSNorm and LayerNorm, forward and backward, f32 and bf16
// activations (gamma, beta, statistics and parameter gradients are always f32). The op entries,
// shape checks and double references live in ops/norm.{h,cc}.
// The table type is device-neutral: each backend fills one (backends/kernels.h); the CPU's are
// built per ISA in backends/cpu/.
#pragma once

#include <cstdint>

namespace tessera::backends {

// x, y: [rows, cols] contiguous, in the dtype the kernel is named for. gamma, beta: [cols].
// mean, rstd: [rows]. RMSNorm ignores beta and mean; LayerNorm's beta may be null (no bias).
struct NormFwdArgs {
  const void* x;
  const float* gamma;
  const float* beta;
  float eps;
  void* y;
  float* mean;
  float* rstd;
  int64_t rows, cols;
  float gamma_offset = 0;  // RMSNorm scales by gamma + gamma_offset (Gemma's 1 + w); LayerNorm: 0
};

// dx: [rows, cols] overwritten, or with accumulate_dx added to (dx += the row's gradient, summed in
// f32 and rounded once); dgamma, dbeta: [cols] accumulated (+=), dbeta may be null. mean and rstd
// are what the forward saved (RMSNorm ignores mean and dbeta).
struct NormBwdArgs {
  const void* x;
  const float* gamma;
  const float* mean;
  const float* rstd;
  const void* dy;
  void* dx;
  float* dgamma;
  float* dbeta;
  int64_t rows, cols;
  float gamma_offset = 0;  // as NormFwdArgs (dgamma is unchanged: d(gamma + c) / dgamma = 1)
  bool accumulate_dx = false;
};

struct NormKernels {
  void (*rmsnorm_fwd_f32)(const NormFwdArgs& a);
  void (*rmsnorm_fwd_bf16)(const NormFwdArgs& a);
  void (*rmsnorm_bwd_f32)(const NormBwdArgs& a);
  void (*rmsnorm_bwd_bf16)(const NormBwdArgs& a);
  void (*layernorm_fwd_f32)(const NormFwdArgs& a);
  void (*layernorm_fwd_bf16)(const NormFwdArgs& a);
  void (*layernorm_bwd_f32)(const NormBwdArgs& a);
  void (*layernorm_bwd_bf16)(const NormBwdArgs& a);
};
}  // namespace tessera::backends
