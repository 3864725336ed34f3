#include "tessera/ops/elementwise.h"

#include "tessera/backends/kernels.h"
#include "tessera/core/error.h"

namespace tessera::ops {

void add(const Tensor& a, const Tensor& b, const Tensor& out) {
  TESSERA_CHECK_SHAPE(a.shape() == b.shape() && a.shape() == out.shape(), "add: shapes differ: a {}, b {}, out {}",
                      a.str(), b.str(), out.str());
  TESSERA_CHECK_SHAPE(a.dtype() == b.dtype() && a.dtype() == out.dtype(), "add: dtypes differ: a {}, b {}, out {}",
                      a.str(), b.str(), out.str());
  TESSERA_CHECK_SHAPE(a.is_contiguous() && b.is_contiguous() && out.is_contiguous(), "add: tensors must be contiguous");
  const auto& k = *backends::kernels_for(a).vector;
  if (a.dtype() == DType::kF32) {
    k.add_f32(a.ptr<float>(), b.ptr<float>(), out.ptr<float>(), a.numel());
  } else if (a.dtype() == DType::kBF16) {
    k.add_bf16(a.ptr<uint16_t>(), b.ptr<uint16_t>(), out.ptr<uint16_t>(), a.numel());
  } else {
    fail(ErrorKind::kShape, "add: dtype {} is not supported (float32 or bfloat16)", dtype_name(a.dtype()));
  }
}

void add_ref(const double* a, const double* b, double* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

}  // namespace tessera::ops
