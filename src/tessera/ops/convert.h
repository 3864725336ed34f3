// Dtype conversion between tensors of equal shape (f32 <-> bf16, or a copy when dtypes match).
#pragma once

#include "tessera/core/tensor.h"

namespace tessera::ops {

// dst = src converted to dst.dtype(); shapes must match, both contiguous.
void convert(const Tensor& src, const Tensor& dst);

}  // namespace tessera::ops
