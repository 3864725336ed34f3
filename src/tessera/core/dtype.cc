#include "tessera/core/dtype.h"

#include "tessera/core/error.h"

namespace tessera {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32:
      return 4;
    case DType::kBF16:
      return 2;
    case DType::kI32:
      return 4;
    case DType::kI64:
      return 8;
    case DType::kU8:
      return 1;
  }
  TESSERA_ASSERT(false);
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32:
      return "float32";
    case DType::kBF16:
      return "bfloat16";
    case DType::kI32:
      return "int32";
    case DType::kI64:
      return "int64";
    case DType::kU8:
      return "uint8";
  }
  TESSERA_ASSERT(false);
}

DType dtype_from_name(std::string_view name) {
  if (name == "float32" || name == "f32" || name == "fp32") return DType::kF32;
  if (name == "bfloat16" || name == "bf16") return DType::kBF16;
  if (name == "int32") return DType::kI32;
  if (name == "int64") return DType::kI64;
  if (name == "uint8") return DType::kU8;
  fail(ErrorKind::kConfig, "unknown dtype '{}': expected float32 or bfloat16", name);
}

}  // namespace tessera
