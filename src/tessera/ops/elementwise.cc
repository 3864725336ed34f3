#include "tessera/ops/elementwise.h"

#include "tessera/backends/kernels.h"
#include "tessera/core/error.h"

namespace tessera::ops {

void add(const Tensor& a, const Tensor& b, const Tensor& out) {
  TESSERA_CHECK_SHAPE(a.shape() == b.shape() && a.shape() == out.shape(),
                      "add: shapes differ: a {}, b {}, out {}", a.str(), b.str(), out.str());
  TESSERA_CHECK_SHAPE(a.dtype() == b.dtype() && a.dtype() == out.dtype(),
                      "add: dtypes differ: a {}, b {}, out {}", a.str(), b.str(), out.str());
  TESSERA_CHECK_SHAPE(a.is_contiguous() && b.is_contiguous() && out.is_contiguous(),
                      "add: tensors must be contiguous");
  const auto& k = *backends::kernels_for(a).vector;
  if (a.dtype() == DType::kF32) {
    k.add_f32(a.ptr<float>(), b.ptr<float>(), out.ptr<float>(), a.numel());
  } else if (a.dtype() == DType::kBF16) {
    k.add_bf16(a.ptr<uint16_t>(), b.ptr<uint16_t>(), out.ptr<uint16_t>(), a.numel());
  } else {
    fail(ErrorKind::kShape, "add: dtype {} is not supported (float32 or bfloat16)", dtype_name(a.dtype()));
  }
}

namespace {

// [N, C] activations of one dtype and an f32 [C] vector, all contiguous.
void check_rows_and_bias(const char* op, const Tensor& x, const Tensor& bias, const Tensor& y) {
  TESSERA_CHECK_SHAPE(x.shape().rank() == 2 && y.shape() == x.shape() && bias.shape() == Shape{x.shape()[1]},
                      "{}: want x [N, C], bias [C], y like x; got x {}, bias {}, y {}", op, x.str(),
                      bias.str(), y.str());
  TESSERA_CHECK_SHAPE(
      x.dtype() == y.dtype() && (x.dtype() == DType::kF32 || x.dtype() == DType::kBF16) &&
          bias.dtype() == DType::kF32,
      "{}: want x and y of one dtype (float32 or bfloat16) and a float32 bias; got x {}, bias {}, y {}", op,
      x.str(), bias.str(), y.str());
  TESSERA_CHECK_SHAPE(x.is_contiguous() && bias.is_contiguous() && y.is_contiguous(),
                      "{}: tensors must be contiguous", op);
}

}  // namespace

void bias_add(const Tensor& x, const Tensor& bias, const Tensor& y) {
  check_rows_and_bias("bias_add", x, bias, y);
  const auto& k = *backends::kernels_for(x).vector;
  const int64_t n = x.shape()[0], c = x.shape()[1];
  if (x.dtype() == DType::kF32)
    k.add_bias_f32(x.ptr<float>(), bias.ptr<float>(), y.ptr<float>(), n, c);
  else
    k.add_bias_bf16(x.ptr<uint16_t>(), bias.ptr<float>(), y.ptr<uint16_t>(), n, c);
}

void bias_grad(const Tensor& dy, const Tensor& dbias) {
  check_rows_and_bias("bias_grad", dy, dbias, dy);
  const auto& k = *backends::kernels_for(dy).vector;
  const int64_t n = dy.shape()[0], c = dy.shape()[1];
  if (dy.dtype() == DType::kF32)
    k.bias_grad_f32(dy.ptr<float>(), dbias.ptr<float>(), n, c);
  else
    k.bias_grad_bf16(dy.ptr<uint16_t>(), dbias.ptr<float>(), n, c);
}

void bias_add_ref(const double* x, const double* bias, double* y, int64_t n, int64_t c) {
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < c; ++j) y[r * c + j] = x[r * c + j] + bias[j];
}

void bias_grad_ref(const double* dy, double* dbias, int64_t n, int64_t c) {
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < c; ++j) dbias[j] += dy[r * c + j];
}

void add_ref(const double* a, const double* b, double* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

}  // namespace tessera::ops
