// Optimizer updates and global-norm gradient clipping, over flat f32 arrays (parameters, their
// gradients and the optimizer state are views of arenas; any shapes with equal element counts).
//
// AdamW follows torch.optim.AdamW exactly (decoupled weight decay, bias correction by step t >= 1):
//   g <- grad_scale * g
//   p <- p - lr * wd * p
//   m <- b1 m + (1 - b1) g                      (torch writes m.lerp_(g, 1 - b1): equal to rounding)
//   v <- b2 v + (1 - b2) g^2
//   p <- p - lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
// which equals optax.adamw up to rounding: optax adds wd * p to the Adam direction before scaling
// by -lr (the same p - lr wd p - lr u), takes sqrt(v_hat) where torch takes sqrt(v) / sqrt(bc2),
// and counts steps from 0 but bias-corrects with count + 1 (our t). Their defaults differ (torch
// weight_decay 1e-2, optax 1e-4; MaxText uses b2 = 0.95, weight_decay = 0.1): the struct below
// takes torch's, and the config sets the rest.
// SGD is plain p <- p - lr * grad_scale * g (optax.sgd without momentum).
//
// Clipping (optax.clip_by_global_norm: g <- g * threshold / max(norm, threshold)) costs no pass of
// its own: global_norm reads the gradients once, clip_scale turns the norm into a factor, and the
// factor goes into grad_scale, which the update applies as it reads each gradient. grad_scale is
// also where 1 / (micro-batches) or a loss-scale inverse go.
//
// Both updates optionally write a bf16 copy of the new parameters in the same pass (the compute
// copy of bf16 training); the f32 parameters stay the master copy.
// Left out: momentum SGD, AMSGrad, Adafactor, and the learning-rate schedule (train/ owns it and
// passes this step's lr).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera::ops {

// Hyper-parameters are doubles, as configs hold them; the kernels use them rounded to f32.
struct AdamWHyperparams {
  double lr = 1e-3;
  double b1 = 0.9;
  double b2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
  int64_t step = 1;         // t >= 1: the number of this update, for bias correction
  double grad_scale = 1.0;  // applied to the gradient first: clip_scale(...) / micro-batches
};

// One AdamW step, in place on param, m, v (f32, equal numel, contiguous); grad f32 is read only.
// param_bf16: a bf16 tensor of the same numel to receive bf16(param), or an undefined Tensor.
void adamw_update(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                  const AdamWHyperparams& hp, const Tensor& param_bf16 = Tensor());

struct SgdHyperparams {
  double lr = 1e-2;
  double grad_scale = 1.0;
};

// One SGD step in place on param; same conventions as adamw_update.
void sgd_update(const Tensor& param, const Tensor& grad, const SgdHyperparams& hp,
                const Tensor& param_bf16 = Tensor());

// sqrt(sum over all tensors of sum g^2), f32 tensors; squares are summed in f32 within chunks of
// 65536 and in double across chunks and tensors. The chunk order across threads is OpenMP's, so
// the last bits may change with the thread count.
double global_norm(std::span<const Tensor> grads);

// The factor clipping applies: threshold / norm when threshold > 0 and norm > threshold, else 1.
// Pass it as grad_scale. A non-finite norm gives a non-finite update: the caller checks
// std::isfinite(norm) first and skips the step.
float clip_scale(double norm, double threshold);

// Work of one update over n parameters. Bytes: AdamW reads p, g, m, v and writes p, m, v (28 B),
// SGD reads p, g and writes p (12 B); + 2 B each for the bf16 copy.
struct OptimizerCost {
  double flops;
  double bytes;
};
OptimizerCost adamw_cost(int64_t n, bool bf16_copy);
OptimizerCost sgd_cost(int64_t n, bool bf16_copy);

// Scalar references in double (for tests): one step, in place on the vectors.
void adamw_update_ref(std::vector<double>& param, const std::vector<double>& grad, std::vector<double>& m,
                      std::vector<double>& v, const AdamWHyperparams& hp);
void sgd_update_ref(std::vector<double>& param, const std::vector<double>& grad, const SgdHyperparams& hp);
double global_norm_ref(const std::vector<std::vector<double>>& grads);

}  // namespace tessera::ops
