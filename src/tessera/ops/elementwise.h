// Elementwise arithmetic on whole tensors: the residual add of a decoder block and the sum of
// gradient contributions. f32 or bf16 (bf16 adds in f32 and rounds once).
#pragma once

#include "tessera/core/tensor.h"

namespace tessera::ops {

// out = a + b; all the same shape and dtype, contiguous; out may alias a or b.
void add(const Tensor& a, const Tensor& b, const Tensor& out);

// Reference in double.
void add_ref(const double* a, const double* b, double* out, int64_t n);

}  // namespace tessera::ops
