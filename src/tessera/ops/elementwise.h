// Elementwise arithmetic on whole tensors: the residual add of a decoder block, the sum of
// gradient contributions and the bias of a projection. f32 or bf16 activations (bf16 adds in f32
// and rounds once); biases and their gradients are f32.
#pragma once

#include "tessera/core/tensor.h"

namespace tessera::ops {

// out = a + b; all the same shape and dtype, contiguous; out may alias a or b.
void add(const Tensor& a, const Tensor& b, const Tensor& out);

// y[N, C] = x[N, C] + bias[C] (bias f32; x, y of one dtype, contiguous; y may alias x).
void bias_add(const Tensor& x, const Tensor& bias, const Tensor& y);
// dbias[C] += sum over rows of dy[N, C] (dbias f32; the sum in double, as the kernels state).
void bias_grad(const Tensor& dy, const Tensor& dbias);

// References in double.
void add_ref(const double* a, const double* b, double* out, int64_t n);
void bias_add_ref(const double* x, const double* bias, double* y, int64_t n, int64_t c);
void bias_grad_ref(const double* dy, double* dbias, int64_t n, int64_t c);  // accumulates

}  // namespace tessera::ops
