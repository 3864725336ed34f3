// Token embedding: the lookup of one row of a table per token id, and its gradient.
//
//   table  [V, C]  f32 or bf16        (V = vocabulary, C = model width)
//   ids    [N]     int32              each in [0, V): an id outside is an error naming it
//   out    [N, C]  f32 or bf16        may differ from the table's dtype: rows are converted
//   dtable [V, C]  f32                ACCUMULATED (+=), as parameter gradients are
//
// The backward pass is a scatter-add that is parallel, race-free and deterministic: each thread
// owns tiles of dtable (a range of vocabulary rows by a block of columns) and scans the ids in
// order, so the result is bitwise the same whatever the thread count (embedding_kernels.inc gives
// the cost: every task rereads the N ids, a few percent of the gradient traffic).
// Left out: padding_idx (mask with the loss's ignored targets instead), max_norm renormalisation,
// and the tied output projection, which is a matmul elsewhere.
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera::ops {

// out[n, :] = table[ids[n], :] in out's dtype.
void embedding_forward(const Tensor& table, const Tensor& ids, const Tensor& out);

// dtable[ids[n], :] += dout[n, :]; dout [N, C] f32 or bf16.
void embedding_backward(const Tensor& dout, const Tensor& ids, const Tensor& dtable);

// Work of one call: no arithmetic forward; one add per element backward. Bytes are the compulsory
// traffic: ids, the rows gathered and written (forward); dout read and the touched dtable rows read
// and written, counted once per token (backward).
struct EmbeddingCost {
  double flops;
  double bytes;
};
EmbeddingCost embedding_forward_cost(int64_t n, int64_t c, DType table_dtype, DType out_dtype);
EmbeddingCost embedding_backward_cost(int64_t n, int64_t c, DType dout_dtype);

// Scalar references in double (for tests): table [V, C] row-major; out is resized to [N, C];
// dtable [V, C] is accumulated.
void embedding_forward_ref(const std::vector<double>& table, const std::vector<int32_t>& ids, int64_t c,
                           std::vector<double>& out);
void embedding_backward_ref(const std::vector<double>& dout, const std::vector<int32_t>& ids, int64_t c,
                            std::vector<double>& dtable);

}  // namespace tessera::ops
