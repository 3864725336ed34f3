// Mixture-of-experts ops (MaxText's RoutedMoE, the sparse path): route each token to its top-k
// experts, dispatch the tokens into rows grouped by expert, run the experts as grouped matmuls over
// those rows, and combine the expert outputs weighted by the routing weights. Shapes: N tokens,
// X experts, k = num_experts_per_tok, E the row width, R the dispatch buffer's rows (N * k; N * X on
// the dense path). Activations are f32 or bf16; routing weights f32; experts, rows and group sizes
// int32. Each op checks its arguments and runs the device's kernels (backends/kernels/moe.h,
// gemm.h); the references below compute in double.
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera::ops {

// Routing: weights [N, k] = softmax over each row's k largest logits (ties: the lower expert) and
// experts [N, k] in descending order of logit; equal to softmax over all X followed by
// renormalising the chosen k (Mixtral) and to GPT-OSS's top-k then softmax. logits [N, X].
void moe_route(const Tensor& logits, const Tensor& weights, const Tensor& experts);
// dlogits [N, X] (logits' dtype) from dweights [N, k]: the softmax's backward at the chosen experts.
void moe_route_backward(const Tensor& weights, const Tensor& experts, const Tensor& dweights,
                        const Tensor& dlogits);

// MaxText's load-balance loss of `batch` sequences (the N rows split evenly): weight * X^2 * mean
// over (sequence, expert) of density * mean probability, where density is the share of the
// sequence's tokens choosing the expert and the probability softmax over all X logits.
double moe_load_balance(const Tensor& logits, const Tensor& experts, int64_t batch, double weight);
// dlogits [N, X] = dloss * d(loss)/d(logits) (overwritten).
void moe_load_balance_backward(const Tensor& logits, const Tensor& experts, int64_t batch, double weight,
                               float dloss, const Tensor& dlogits);

// How tokens are dispatched: dropless (capacity 0), with at most `capacity` assignments per expert
// per sequence of `seq` tokens (later tokens, then later slots, dropped: MaxText's order), or dense
// (every token to every expert, R = N * X).
struct MoeDispatch {
  int64_t experts = 0;
  int64_t seq = 0;
  int64_t capacity = 0;
  bool dense = false;
};
// MaxText's per-sequence expert capacity: int(max(ceil(seq * k / experts) * factor, factor)).
int64_t moe_capacity(int64_t seq, int64_t k, int64_t experts, double capacity_factor);

// xs [R, E] = rows of x [N, E] grouped by expert (zero where no assignment lands); rows [N * k]
// int32, the row of each assignment (-1: dropped); group_sizes [X] int32.
void moe_dispatch(const Tensor& x, const Tensor& experts, const MoeDispatch& d, const Tensor& xs,
                  const Tensor& rows, const Tensor& group_sizes);
// dx [N, E] = the sum of each token's rows of dxs [R, E].
void moe_dispatch_backward(const Tensor& dxs, const Tensor& rows, const MoeDispatch& d, const Tensor& dx);
// y [N, E] = sum over the token's assignments of weight * ys[row] (summed in f32).
void moe_combine(const Tensor& ys, const Tensor& weights, const Tensor& rows, const MoeDispatch& d,
                 const Tensor& y);
// dys [R, E] (weight * dy at each assignment's row, 0 elsewhere) and dweights [N, k].
void moe_combine_backward(const Tensor& dy, const Tensor& ys, const Tensor& weights, const Tensor& rows,
                          const MoeDispatch& d, const Tensor& dys, const Tensor& dweights);

// Grouped matmul over the groups of consecutive rows given by group_sizes [G] (int32):
//   forward: c rows of g (+)= a rows of g · op(b[g]); a [R, K], b [G, K, N] ([G, N, K] when
//     trans_b), c [R, N]; the rows after the groups are zeroed (left as they are when accumulating);
//   weight_grad: c[g] (+)= (a rows of g)ᵀ · (b rows of g); a [R, K], b [R, N], c [G, K, N].
struct GroupedMatmulOptions {
  bool trans_b = false;
  bool weight_grad = false;
  bool accumulate = false;
};
void grouped_matmul(const Tensor& a, const Tensor& b, const Tensor& group_sizes, const Tensor& c,
                    GroupedMatmulOptions opts = {});

// The experts' biases on grouped rows (GPT-OSS): y[r] = x[r] + bias[g] for the rows of group g
// (x, y [R, C] of one dtype, bias f32 [G, C]; y may alias x); and dbias[g] += the sum of group g's
// rows of dy.
void grouped_bias_add(const Tensor& x, const Tensor& bias, const Tensor& group_sizes, const Tensor& y);
void grouped_bias_grad(const Tensor& dy, const Tensor& group_sizes, const Tensor& dbias);

// References in double (row-major, the same contracts).
void moe_route_ref(const std::vector<double>& logits, int64_t n, int64_t x, int64_t k,
                   std::vector<double>& weights, std::vector<int32_t>& experts);
double moe_load_balance_ref(const std::vector<double>& logits, const std::vector<int32_t>& experts, int64_t n,
                            int64_t x, int64_t k, int64_t batch, double weight);
// Which assignments the dispatch keeps (1) or drops (0), in MaxText's order.
std::vector<int> moe_kept_ref(const std::vector<int32_t>& experts, int64_t n, int64_t x, int64_t k,
                              int64_t seq, int64_t capacity);
void grouped_matmul_ref(const std::vector<double>& a, const std::vector<double>& b,
                        const std::vector<int32_t>& group_sizes, int64_t rows, int64_t k, int64_t n,
                        GroupedMatmulOptions opts, std::vector<double>& c);

}  // namespace tessera::ops
