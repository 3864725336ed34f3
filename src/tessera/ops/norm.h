// Normalisations over the last dimension C of activations [N, C] (any rank; N = numel / C):
// RMSNorm (Llama, Mistral, Gemma, Qwen) and LayerNorm with optional bias (GPT-2/3), forward and
// backward side by side, minimal byte counts, and double references for tests.
//
// dtypes: x, y, dy, dx are f32 or bf16 (all the same); gamma, beta, the saved statistics (mean,
// rstd: [N] f32) and the parameter gradients are f32. Math is f32 with one rounding at each
// bf16 store. Gradients: dx is overwritten; dgamma and dbeta are accumulated (+=).
//
// Relation to Hugging Face's LlamaRMSNorm, which computes
//     h = (x.float() * rsqrt(mean(x.float()^2) + eps)).to(x.dtype);  return weight * h
// i.e. it rounds the normalised value to the input dtype BEFORE multiplying by the weight (and,
// with a bf16 weight, rounds the product again). Tessera computes x * rstd * gamma in f32 and
// rounds once at the store. For f32 inputs the two agree to f32 rounding; for bf16 they differ by
// at most one bf16 rounding of the normalised value (relative 2^-9 per element before the product,
// so |Tessera - HF| <= ~2^-8 |y| with the second rounding), and Tessera's is the more accurate.
// Gemma's variant (weight w stored as Hugging Face stores it, applied as 1 + w) is the rmsnorm
// ops' gamma_offset = 1: y = x * rstd * (gamma + gamma_offset), in f32 as Gemma's RMSNorm does.
//
// Left out: FLOP counts (these ops are bound by memory traffic), the forward's fused residual add,
// QK-norm over heads (call rmsnorm on [B*T*H, D]).
#pragma once

#include <cstdint>

#include "tessera/core/tensor.h"

namespace tessera::ops {

// y = x * rstd * (gamma + gamma_offset), rstd = 1 / sqrt(mean(x^2) + eps), saved as rstd [N].
// x [N, C], gamma [C] f32, y like x (may alias x), rstd [N] f32. All contiguous.
void rmsnorm_fwd(const Tensor& x, const Tensor& gamma, float eps, const Tensor& y, const Tensor& rstd,
                 float gamma_offset = 0);
// With g = dy * (gamma + gamma_offset): dx = rstd * (g - xhat * mean(g * xhat)), xhat = x * rstd
// (overwritten; with accumulate_dx added to dx's prior value in f32 and rounded once: a gradient
// that collects this one and others, autodiff's sums, in one pass); dgamma += sum over rows of
// dy * xhat. rstd is the forward's.
void rmsnorm_bwd(const Tensor& x, const Tensor& gamma, const Tensor& rstd, const Tensor& dy, const Tensor& dx,
                 const Tensor& dgamma, float gamma_offset = 0, bool accumulate_dx = false);

// y = (x - mean) * rstd * gamma + beta, rstd = 1 / sqrt(var + eps) (biased variance), saving
// mean [N] and rstd [N]. beta may be an undefined Tensor (no bias).
void layernorm_fwd(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, const Tensor& y,
                   const Tensor& mean, const Tensor& rstd);
// g = dy * gamma: dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) (overwritten, or added to as
// rmsnorm_bwd's with accumulate_dx); dgamma += sum of dy * xhat; dbeta += sum of dy (dbeta may be
// undefined).
void layernorm_bwd(const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd,
                   const Tensor& dy, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta,
                   bool accumulate_dx = false);

// Minimal memory traffic: each input read once, each output written once, accumulated parameter
// gradients read and written.
int64_t rmsnorm_fwd_bytes(int64_t n, int64_t c, DType dtype);
int64_t rmsnorm_bwd_bytes(int64_t n, int64_t c, DType dtype);
int64_t layernorm_fwd_bytes(int64_t n, int64_t c, DType dtype, bool has_beta);
int64_t layernorm_bwd_bytes(int64_t n, int64_t c, DType dtype, bool has_beta);

// References in double over x [n, c] row-major. The backward references compute their own
// statistics from x and OVERWRITE dgamma/dbeta with the sums (the caller adds any prior value).
void rmsnorm_fwd_ref(const double* x, const double* gamma, double eps, int64_t n, int64_t c, double* y,
                     double* rstd);
void rmsnorm_bwd_ref(const double* x, const double* gamma, double eps, const double* dy, int64_t n, int64_t c,
                     double* dx, double* dgamma);
// beta may be null.
void layernorm_fwd_ref(const double* x, const double* gamma, const double* beta, double eps, int64_t n,
                       int64_t c, double* y, double* mean, double* rstd);
void layernorm_bwd_ref(const double* x, const double* gamma, double eps, const double* dy, int64_t n,
                       int64_t c, double* dx, double* dgamma, double* dbeta);

}  // namespace tessera::ops
