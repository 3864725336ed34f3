#include "tessera/ops/convert.h"

#include <cstring>

#include "tessera/backends/kernels.h"
#include "tessera/core/error.h"

namespace tessera::ops {

void convert(const Tensor& src, const Tensor& dst) {
  TESSERA_CHECK_SHAPE(src.shape() == dst.shape(), "convert: shapes differ, {} vs {}", src.str(), dst.str());
  TESSERA_CHECK_SHAPE(src.is_contiguous() && dst.is_contiguous(), "convert: tensors must be contiguous");
  const auto& k = *backends::kernels_for(src).vector;
  if (src.dtype() == dst.dtype()) {
    std::memmove(dst.data(), src.data(), src.nbytes());
  } else if (src.dtype() == DType::kF32 && dst.dtype() == DType::kBF16) {
    k.f32_to_bf16(src.ptr<float>(), dst.ptr<uint16_t>(), src.numel());
  } else if (src.dtype() == DType::kBF16 && dst.dtype() == DType::kF32) {
    k.bf16_to_f32(src.ptr<uint16_t>(), dst.ptr<float>(), src.numel());
  } else {
    fail(ErrorKind::kShape, "convert: no conversion from {} to {}", dtype_name(src.dtype()),
         dtype_name(dst.dtype()));
  }
}

}  // namespace tessera::ops
