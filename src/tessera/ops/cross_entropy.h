// Softmax cross-entropy fused with the log-softmax: the loss of next-token prediction.
//
//   logits  [N, V]  f32 or bf16      (N = B*T tokens, V = vocabulary)
//   targets [N]     int32            t < 0 is ignored (loss 0, no gradient): this is how padding is
//                                    masked; 0 <= t < V otherwise, anything else is an error
//   loss    [N]     f32              lse - logits[n, t] + z * lse^2
//   lse     [N]     f32              log sum_v exp(logits[n, v]), saved for the backward pass
//
// z is MaxText's z_loss_multiplier (0 disables it): it pulls log Z towards 0 and costs one multiply.
// The forward pass reads each row once (online max and sum-exp over chunks of 2048 columns); the
// backward pass rebuilds the softmax from lse and may overwrite the logits (in place). Training
// runs the two as one call (cross_entropy_forward_backward), which keeps each row's exps. A row whose
// logits are all -inf has no softmax: its lse is -inf and its loss NaN.
// Left out: label smoothing, per-token weights other than the ignore mask, and the reduction to a
// mean, which cross_entropy_mean does on the host in double.
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera::ops {

// Forward. loss and lse are overwritten.
void cross_entropy_forward(const Tensor& logits, const Tensor& targets, const Tensor& loss, const Tensor& lse,
                           float z_loss = 0.0f);

// Backward: dlogits[n, v] = dloss[n] * ((1 + 2 z lse[n]) * softmax(n, v) - [v == targets[n]]), and 0 on
// ignored rows. dloss f32 [N] (for a mean over the counted tokens: 1 / count). dlogits [N, V] has the
// logits' dtype and is overwritten; it may be the same tensor as logits.
void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                            const Tensor& dloss, const Tensor& dlogits, float z_loss = 0.0f);

// Forward and backward in one call, for when dloss is known before the forward runs (in training it
// is the gradient's seed): the same loss, lse and dlogits as the two calls above (dlogits may be the
// logits), with each logit's exp computed once instead of twice and the row read from memory once.
void cross_entropy_forward_backward(const Tensor& logits, const Tensor& targets, const Tensor& dloss,
                                    const Tensor& loss, const Tensor& lse, const Tensor& dlogits,
                                    float z_loss = 0.0f);

// Throws (kShape, naming op) unless dlogits is contiguous with the logits' shape and dtype, and is
// either the logits themselves (in place) or apart from them. Shared with ops/vocab_parallel.h.
void check_dlogits(const char* op, const Tensor& logits, const Tensor& dlogits);

// Mean of loss over the tokens whose target is not ignored, summed in double; mean is 0 when every
// target is ignored (count 0).
struct MeanLoss {
  double mean;
  int64_t count;
};
MeanLoss cross_entropy_mean(const Tensor& loss, const Tensor& targets);

// Work of one call. The exp is counted as one FLOP (it costs ~12 vector operations); bytes are
// the compulsory traffic (logits read once per pass, dlogits written once).
struct CrossEntropyCost {
  double flops;
  double bytes;
};
CrossEntropyCost cross_entropy_forward_cost(int64_t n, int64_t vocab, DType logits_dtype);
CrossEntropyCost cross_entropy_backward_cost(int64_t n, int64_t vocab, DType logits_dtype);
CrossEntropyCost cross_entropy_forward_backward_cost(int64_t n, int64_t vocab, DType logits_dtype);

// Scalar references in double (for tests): same contract as the ops above, all arrays row-major.
void cross_entropy_forward_ref(const std::vector<double>& logits, const std::vector<int32_t>& targets,
                               int64_t vocab, double z_loss, std::vector<double>& loss,
                               std::vector<double>& lse);
void cross_entropy_backward_ref(const std::vector<double>& logits, const std::vector<int32_t>& targets,
                                int64_t vocab, double z_loss, const std::vector<double>& dloss,
                                std::vector<double>& dlogits);

}  // namespace tessera::ops
