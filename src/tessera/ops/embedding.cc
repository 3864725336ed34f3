// Embedding op entries: argument checks (every id in range), dispatch to the device's embedding kernels,
// cost counts and the double references.
#include "tessera/ops/embedding.h"

#include "tessera/backends/kernels.h"
#include "tessera/core/error.h"

namespace tessera::ops {

namespace {

bool is_float(DType d) {
  return d == DType::kF32 || d == DType::kBF16;
}

// Checks ids int32 [N] against a vocabulary of V and returns the kernel's view.
backends::EmbeddingLookup check_ids(const char* op, const Tensor& ids, int64_t n, int64_t c, int64_t vocab) {
  TESSERA_CHECK_SHAPE(ids.dtype() == DType::kI32 && ids.shape() == Shape{n} && ids.is_contiguous(),
                      "{}: ids must be int32[{}], got {}", op, n, ids.str());
  const int32_t* p = ids.ptr<int32_t>();
  for (int64_t i = 0; i < n; ++i)
    TESSERA_CHECK_SHAPE(p[i] >= 0 && p[i] < vocab, "{}: ids[{}] = {} is out of range for a vocabulary of {}",
                        op, i, p[i], vocab);
  return {p, n, c, vocab};
}

}  // namespace

void embedding_forward(const Tensor& table, const Tensor& ids, const Tensor& out) {
  TESSERA_CHECK_SHAPE(table.rank() == 2 && is_float(table.dtype()) && table.is_contiguous(),
                      "embedding_forward: table must be a contiguous float32 or bfloat16 [V, C], got {}",
                      table.str());
  const int64_t vocab = table.dim(0), c = table.dim(1);
  TESSERA_CHECK_SHAPE(out.rank() == 2 && out.dim(1) == c && is_float(out.dtype()) && out.is_contiguous(),
                      "embedding_forward: out must be a contiguous float32 or bfloat16 [N, {}], got {}", c,
                      out.str());
  const auto lk = check_ids("embedding_forward", ids, out.dim(0), c, vocab);
  backends::kernels_for(table).embedding->forward(lk, table.data(), table.dtype(), out.data(), out.dtype());
}

void embedding_backward(const Tensor& dout, const Tensor& ids, const Tensor& dtable) {
  TESSERA_CHECK_SHAPE(dtable.rank() == 2 && dtable.dtype() == DType::kF32 && dtable.is_contiguous(),
                      "embedding_backward: dtable must be a contiguous float32 [V, C], got {}", dtable.str());
  const int64_t vocab = dtable.dim(0), c = dtable.dim(1);
  TESSERA_CHECK_SHAPE(dout.rank() == 2 && dout.dim(1) == c && is_float(dout.dtype()) && dout.is_contiguous(),
                      "embedding_backward: dout must be a contiguous float32 or bfloat16 [N, {}], got {}", c,
                      dout.str());
  const auto lk = check_ids("embedding_backward", ids, dout.dim(0), c, vocab);
  backends::kernels_for(dout).embedding->backward(lk, dout.data(), dout.dtype(), dtable.ptr<float>());
}

EmbeddingCost embedding_forward_cost(int64_t n, int64_t c, DType table_dtype, DType out_dtype) {
  const double elems = static_cast<double>(n) * static_cast<double>(c);
  return {0.0, elems * static_cast<double>(dtype_size(table_dtype) + dtype_size(out_dtype)) + 4.0 * n};
}

EmbeddingCost embedding_backward_cost(int64_t n, int64_t c, DType dout_dtype) {
  const double elems = static_cast<double>(n) * static_cast<double>(c);
  return {elems, elems * static_cast<double>(dtype_size(dout_dtype) + 2 * sizeof(float)) + 4.0 * n};
}

void embedding_forward_ref(const std::vector<double>& table, const std::vector<int32_t>& ids, int64_t c,
                           std::vector<double>& out) {
  out.assign(ids.size() * c, 0.0);
  for (size_t n = 0; n < ids.size(); ++n)
    for (int64_t i = 0; i < c; ++i) out[n * c + i] = table[ids[n] * c + i];
}

void embedding_backward_ref(const std::vector<double>& dout, const std::vector<int32_t>& ids, int64_t c,
                            std::vector<double>& dtable) {
  for (size_t n = 0; n < ids.size(); ++n)
    for (int64_t i = 0; i < c; ++i) dtable[ids[n] * c + i] += dout[n * c + i];
}

}  // namespace tessera::ops
