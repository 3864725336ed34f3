// Mixture-of-experts kernels: routing (top-k of the router logits, softmax over the chosen), the
// load-balance loss, the dispatch of tokens into rows grouped by expert and the weighted combine of
// the expert outputs, forward and backward. N tokens, X experts, top-k; E the row width. The op
// entries, shape checks and double references live in ops/moe.{h,cc}; the grouped matmul between
// dispatch and combine is the GEMM table's (gemm.h).
// The table type is device-neutral: each backend fills one (backends/kernels.h).
#pragma once

#include <cstdint>

namespace tessera::backends {

struct MoeRouteProblem {
  int64_t tokens = 0, experts = 0, k = 0;
  bool bf16 = false;  // the logits (and dlogits) are bf16; weights are always f32
};

// Dispatch of N tokens' k assignments into R rows grouped by expert (rows of group e are contiguous,
// groups in expert order, assignments within a group in (token, slot) order).
//   capacity > 0: at most `capacity` assignments per expert per sequence (sequences of `seq`
//   tokens); the rest are dropped (row -1), earlier tokens first and slot 0 before slot 1.
//   dense: every token goes to every expert: R = N * X, row e * N + n; `rows` still names the row of
//   each chosen assignment.
struct MoeDispatchProblem {
  int64_t tokens = 0, experts = 0, k = 0, width = 0;
  int64_t seq = 0;       // tokens per sequence (capacity is per sequence)
  int64_t capacity = 0;  // 0: dropless
  bool dense = false;
  bool bf16 = false;  // the rows' dtype
  int64_t buffer_rows() const { return dense ? tokens * experts : tokens * k; }
};

struct MoeKernels {
  // weights [N, k] = softmax over each row's k largest logits (ties: the lower expert), experts
  // [N, k] int32 in descending order of logit.
  void (*route)(const MoeRouteProblem& p, const void* logits, float* weights, int32_t* experts);
  // dlogits [N, X] = the softmax's backward at the chosen experts, 0 elsewhere.
  void (*route_backward)(const MoeRouteProblem& p, const float* weights, const int32_t* experts,
                         const float* dweights, void* dlogits);
  // MaxText's load-balance loss over `batch` sequences of N / batch tokens: with p = softmax(logits)
  // over all X and density[b, e] = the share of sequence b's tokens that chose e (summed over the k
  // slots), returns weight * X^2 * mean over (b, e) of density[b, e] * mean_s p[b, s, e].
  double (*load_balance)(const MoeRouteProblem& p, int64_t batch, double weight, const void* logits,
                         const int32_t* experts);
  // dlogits [N, X] = dloss * d(load_balance)/d(logits) (overwritten).
  void (*load_balance_backward)(const MoeRouteProblem& p, int64_t batch, double weight, float dloss,
                                const void* logits, const int32_t* experts, void* dlogits);
  // xs [R, width] = the tokens' rows x [N, width] in dispatch order (rows no assignment fills are
  // zero); rows [N * k] the row of each assignment (-1: dropped); group_sizes [X].
  void (*dispatch)(const MoeDispatchProblem& p, const void* x, const int32_t* experts, void* xs,
                   int32_t* rows, int32_t* group_sizes);
  // dx [N, width] = sum over each token's rows of dxs (dense: all X rows of the token).
  void (*dispatch_backward)(const MoeDispatchProblem& p, const void* dxs, const int32_t* rows, void* dx);
  // y [N, width] = sum_j weights[n, j] * ys[rows[n * k + j]] in f32 (dropped assignments add 0).
  void (*combine)(const MoeDispatchProblem& p, const void* ys, const float* weights, const int32_t* rows,
                  void* y);
  // dys [R, width] = weights[a] * dy[n] at each assignment's row, 0 in every other row;
  // dweights [N, k] = <dy[n], ys[rows[a]]> (0 when dropped).
  void (*combine_backward)(const MoeDispatchProblem& p, const void* dy, const void* ys, const float* weights,
                           const int32_t* rows, void* dys, float* dweights);
  // The experts' biases (GPT-OSS) on the grouped rows x [rows, cols]: y[r] = x[r] + bias[g] for the
  // rows of group g (bias f32 [groups, cols]); rows after the groups are copied. y may alias x.
  void (*grouped_bias_add)(int64_t rows, int64_t cols, int64_t groups, const int32_t* group_sizes, bool bf16,
                           const void* x, const float* bias, void* y);
  // dbias[g] += the sum of group g's rows of dy (in double, per column).
  void (*grouped_bias_grad)(int64_t rows, int64_t cols, int64_t groups, const int32_t* group_sizes, bool bf16,
                            const void* dy, float* dbias);
};

}  // namespace tessera::backends
