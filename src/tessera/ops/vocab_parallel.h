// Vocabulary-parallel embedding and softmax cross-entropy (Megatron-LM's VocabParallelEmbedding
// and vocab_parallel_cross_entropy): the table [V, C] is split by rows and the logits [N, V] by
// columns over the ranks of the tensor mesh axis, and each rank works on its shard, the global ids
// [offset, offset + Vl). These entries are the per-shard parts; the ranks combine them with
// all-reduces that the caller issues (ops never talk to other ranks):
//
//   embedding        out = vocab_embedding_forward(shard)            then all-reduce sum of out [N, C]
//                    backward: vocab_embedding_backward(shard)        (no communication: dout is
//                                                                      the same on every rank)
//   cross-entropy    1. vocab_cross_entropy_partials                  lse = log sum over the shard,
//                                                                      stats = [that lse; x[n, t]]
//                       all-reduce max of lse [N]                     lse = m, the max over shards
//                    2. vocab_cross_entropy_rescale                   stats[0] = exp(lse_shard - m)
//                       all-reduce sum of stats [2, N]                stats = [sum exp; x[n, t]]
//                    3. vocab_cross_entropy_finish                    lse = m + log(sum), loss
//                    backward: vocab_cross_entropy_backward(shard)    (no communication: lse is global)
//
// With every shard combined, the loss and lse equal cross_entropy_forward's on the whole logits,
// and the shards' dlogits are the columns of cross_entropy_backward's (cross_entropy.h has the
// contract: targets t < 0 are ignored, z_loss adds z * lse^2). Combining per-shard log-sum-exps
// (rather than max and sum-exp of the logits) lets the shard's pass over its [N, Vl] logits be the
// cross-entropy kernel itself; the communication is 3N floats either way.
// Shards may differ in size (the tests use 44, 44 and 43 columns); the model builder makes equal
// ones. Left out: label smoothing, as in cross_entropy.h.
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera::ops {

// The shard a rank holds: global ids [offset, offset + rows of its table / columns of its logits)
// of a vocabulary of `vocab`.
struct VocabShardRange {
  int64_t offset = 0;
  int64_t vocab = 0;  // V, the global vocabulary; every id and target must be < V
};

// out[n, :] = table[ids[n] - offset, :] when ids[n] is in the shard, else 0. table [Vl, C] f32 or
// bf16; ids int32 [N] in [0, V); out [N, C] f32 or bf16 (overwritten).
void vocab_embedding_forward(const Tensor& table, const Tensor& ids, VocabShardRange r, const Tensor& out);
// dtable[ids[n] - offset, :] += dout[n, :] for the ids in the shard (ACCUMULATED, f32 [Vl, C]).
void vocab_embedding_backward(const Tensor& dout, const Tensor& ids, VocabShardRange r, const Tensor& dtable);

// Step 1 of the forward, on this shard's logits [N, Vl] (f32 or bf16) and targets int32 [N]
// (t < V; t < 0 ignored): lse[n] = log sum_{v < Vl} exp(logits[n, v]); stats [2, N] f32 gets
// stats[0, n] = lse[n] and stats[1, n] = logits[n, t - offset] when t is in the shard, else 0.
void vocab_cross_entropy_partials(const Tensor& logits, const Tensor& targets, VocabShardRange r,
                                  const Tensor& lse, const Tensor& stats);
// Step 2, after lse holds the max over the shards: stats[0, n] = exp(stats[0, n] - lse[n]) (0 where
// the shard's lse is -inf: a fully masked shard adds nothing).
void vocab_cross_entropy_rescale(const Tensor& lse, const Tensor& stats);
// Step 3, after stats holds the sums over the shards: lse[n] = lse[n] + log(stats[0, n]) and
// loss[n] = lse[n] - stats[1, n] + z * lse[n]^2 for t >= 0, 0 for ignored targets. Formed in double.
void vocab_cross_entropy_finish(const Tensor& targets, const Tensor& stats, float z_loss, const Tensor& lse,
                                const Tensor& loss);
// Backward on this shard: dlogits[n, v] = dloss[n] * ((1 + 2 z lse[n]) * exp(logits[n, v] - lse[n])
// - [v == t - offset]), 0 on ignored rows; lse is the global one (step 3). dlogits has the logits'
// dtype and shape and may be the logits (in place).
void vocab_cross_entropy_backward(const Tensor& logits, const Tensor& targets, VocabShardRange r,
                                  const Tensor& lse, const Tensor& dloss, const Tensor& dlogits,
                                  float z_loss = 0.0f);

// Scalar references in double (for tests), on one shard: table [Vl, C] and logits [N, Vl]
// row-major, Vl = vocab_local.
void vocab_embedding_forward_ref(const std::vector<double>& table, const std::vector<int32_t>& ids, int64_t c,
                                 int64_t offset, int64_t vocab_local, std::vector<double>& out);
void vocab_embedding_backward_ref(const std::vector<double>& dout, const std::vector<int32_t>& ids, int64_t c,
                                  int64_t offset, int64_t vocab_local, std::vector<double>& dtable);
// lse_local[n] = log sum_v exp(logits[n, v]) over the shard; target_logit[n] as in step 1.
void vocab_cross_entropy_partials_ref(const std::vector<double>& logits, const std::vector<int32_t>& targets,
                                      int64_t offset, int64_t vocab_local, std::vector<double>& lse_local,
                                      std::vector<double>& target_logit);
// The shard's dlogits given the global lse.
void vocab_cross_entropy_backward_ref(const std::vector<double>& logits, const std::vector<int32_t>& targets,
                                      int64_t offset, int64_t vocab_local, double z_loss,
                                      const std::vector<double>& lse, const std::vector<double>& dloss,
                                      std::vector<double>& dlogits);

}  // namespace tessera::ops
