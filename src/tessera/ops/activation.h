// Activations of the MLP: plain act(x) and the gated unit act(gate) * up (SwiGLU with silu, GeGLU
// with gelu), forward and backward, byte counts, and double references for tests.
//
// Names follow MaxText's `mlp_activations` strings, which MaxText resolves as getattr(jax.nn, s):
//   "silu"        x * sigmoid(x)                                 (= "swish")
//   "gelu"        the TANH APPROXIMATION 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), because
//                 jax.nn.gelu defaults to approximate=True (Flax's nn.gelu is the same function);
//                 Hugging Face calls this "gelu_pytorch_tanh" (Gemma) or "gelu_new" (GPT-2).
//   "gelu_exact"  x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)), which is what Hugging Face and PyTorch
//                 mean by plain "gelu" (BERT-style models). MaxText has no string for it.
//   "linear"      identity; MaxText's [silu, linear] is SwiGLU: silu(x W_gate) * (x W_up).
//   "swish_1702"  x * sigmoid(1.702 x): GPT-OSS's gate (MaxText hard-codes it for gpt_oss, whose
//                 config says [sigmoid, linear]), with the clamps of GluOptions.
// A checkpoint converter must map Hugging Face's "gelu" to Activation::kGeluErf, not to "gelu".
//
// Layout: gate, up and out are [N, F] (any rank; the last dimension is F). A rank-2 tensor may
// have a row stride larger than F (the kernels take one per operand), so the two halves of a fused
// [N, 2F] projection can be passed as gate and up once core/tensor.h offers a column view; today's
// Tensor makes only contiguous views, so in practice all operands are contiguous.
//
// No FLOP counts: these ops are bound by memory traffic (the bytes below are the minimum, each
// input read once and each output written once), and their transcendentals are not FLOPs a
// roofline or MFU figure would count.
#pragma once

#include <cstdint>
#include <string_view>

#include "tessera/backends/kernels/activation.h"
#include "tessera/core/tensor.h"

namespace tessera::ops {

using Activation = backends::Activation;

// "silu", "gelu" (tanh approximation), "gelu_exact" (erf), "linear"; throws kConfig listing them.
Activation activation_from_name(std::string_view name);
std::string_view activation_name(Activation act);

// y = act(x). x, y: same shape, f32 or bf16 (same dtype), contiguous; y may alias x.
void act_fwd(Activation act, const Tensor& x, const Tensor& y);
// dx = dy * act'(x) (overwritten). All the same shape and dtype, contiguous; dx may alias dy.
void act_bwd(Activation act, const Tensor& x, const Tensor& dy, const Tensor& dx);

// y = a * x. x, y: same shape and dtype (f32 or bf16), contiguous; y may alias x. Its backward is
// itself (dx = a * dy).
void scale(const Tensor& x, float a, const Tensor& y);
// The logit soft cap (Gemma 2): y = cap * tanh(x / cap), cap > 0; y may alias x.
void soft_cap_fwd(const Tensor& x, float cap, const Tensor& y);
// dx = dy * (1 - tanh^2(x / cap)) (overwritten; from the forward's input x); dx may alias dy.
void soft_cap_bwd(const Tensor& x, const Tensor& dy, float cap, const Tensor& dx);

// GPT-OSS's clamps of the gated unit (backends/kernels/activation.h): limit 0 means none.
struct GluOptions {
  float limit = 0;      // mlp_activations_limit: gate <= limit, |up| <= limit
  float up_offset = 0;  // added to the (clamped) up: GPT-OSS's + 1
};

// out = act(gate) * up, elementwise over [N, F] (with options: act(min(gate, limit)) *
// (clamp(up, -limit, limit) + up_offset)). All one dtype (f32 or bf16).
void glu_fwd(Activation act, const Tensor& gate, const Tensor& up, const Tensor& out, GluOptions opt = {});
// dgate = dout * up * act'(gate), dup = dout * act(gate) (both overwritten; a clamped element's
// input gets 0). dgate may alias gate and dup may alias up.
void glu_bwd(Activation act, const Tensor& gate, const Tensor& up, const Tensor& dout, const Tensor& dgate,
             const Tensor& dup, GluOptions opt = {});

// Minimal memory traffic in bytes for n elements (act) or an [n, f] gated unit.
int64_t act_fwd_bytes(int64_t n, DType dtype);             // read x, write y
int64_t act_bwd_bytes(int64_t n, DType dtype);             // read x, dy; write dx
int64_t glu_fwd_bytes(int64_t n, int64_t f, DType dtype);  // read gate, up; write out
int64_t glu_bwd_bytes(int64_t n, int64_t f, DType dtype);  // read gate, up, dout; write dgate, dup

// References in double.
double act_ref(Activation act, double x);
double act_grad_ref(Activation act, double x);  // d act / dx
void act_fwd_ref(Activation act, const double* x, double* y, int64_t n);
double soft_cap_ref(double x, double cap);
double soft_cap_grad_ref(double x, double cap);  // d soft_cap / dx
void act_bwd_ref(Activation act, const double* x, const double* dy, double* dx, int64_t n);
void glu_fwd_ref(Activation act, const double* gate, const double* up, double* out, int64_t n);
void glu_bwd_ref(Activation act, const double* gate, const double* up, const double* dout, double* dgate,
                 double* dup, int64_t n);

}  // namespace tessera::ops
