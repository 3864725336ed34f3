// Optimizer update kernels over flat f32 arrays: AdamW and SGD, each one fused pass that also
// writes an optional bf16 copy of the updated parameters. ops/optimizer.cc derives the per-call
// scalars (bias corrections, decay factor) in double and checks the arrays.
// The table type is device-neutral: each backend fills one (backends/kernels.h); the CPU's are
// built per ISA in backends/cpu/.
#pragma once

#include <cstdint>

namespace tessera::backends {

// AdamW's per-call constants, already rounded to f32 (see ops::adamw_update for the math).
struct AdamWScalars {
  float grad_scale;  // g <- grad_scale * g
  float decay;       // 1 - lr * weight_decay
  float b1, one_minus_b1;
  float b2, one_minus_b2;
  float inv_sqrt_bc2;  // 1 / sqrt(1 - b2^t)
  float eps;
  float step_size;  // lr / (1 - b1^t)
};

struct OptimizerKernels {
  // For each i: g = grad_scale * grad[i]; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
  // p = decay * p - step_size * m / (sqrt(v) * inv_sqrt_bc2 + eps); p_bf16[i] = bf16(p) unless
  // p_bf16 is null.
  void (*adamw)(const AdamWScalars& s, float* p, const float* grad, float* m, float* v, uint16_t* p_bf16,
                int64_t n);
  // For each i: p = p - lr * (grad_scale * grad[i]); p_bf16[i] = bf16(p) unless p_bf16 is null.
  void (*sgd)(float lr, float grad_scale, float* p, const float* grad, uint16_t* p_bf16, int64_t n);
};
}  // namespace tessera::backends
