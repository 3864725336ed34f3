// Activation kernels: elementwise act(x) and its derivative, the gated unit act(gate) * up
// (SwiGLU, GeGLU) with its backward, and the simd_math.h functions over arrays (so tests check the
// code exactly as each ISA build compiles it). f32 and bf16 storage; math in f32.
// The op entries, name parsing and double references live in ops/activation.{h,cc}.
// The table type is device-neutral: each backend fills one (backends/kernels.h); the CPU's are
// built per ISA in backends/cpu/.
#pragma once

#include <cstdint>
#include <limits>

namespace tessera::backends {

// Which nonlinearity. See ops/activation.h for the names (MaxText's mlp_activations strings).
enum class Activation : uint8_t {
  kLinear,     // x
  kSilu,       // x * sigmoid(x)
  kGeluTanh,   // x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3); = 0.5 x (1 + tanh u)
  kGeluErf,    // x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2))
  kSwish1702,  // x * sigmoid(1.702 x): GPT-OSS's gate (MaxText's [sigmoid, linear] for gpt_oss)
};

// The gated unit's clamps (GPT-OSS): gate' = min(gate, limit), up' = clamp(up, -limit, limit),
// out = act(gate') * (up' + up_offset). limit = +inf and up_offset = 0 are the plain unit; where a
// clamp is active its input gets no gradient.
struct GluClamp {
  float limit = std::numeric_limits<float>::infinity();
  float up_offset = 0;
};

// The simd_math.h functions, for tests of their accuracy as compiled in each ISA build. kExp is
// the exp the bf16 loops use: on registers in the AVX builds (simd_avx512.h's and simd_avx2.h's
// exp_ps); kExpFormula is simd_math.h's exp_f32 under `omp simd` in every build, which those must
// equal bit for bit.
enum class MathFn : uint8_t { kExp, kTanh, kErf, kErfc, kExpFormula };

// Rows of a matrix in f32 or bf16 storage: element (r, j) at data[r * ld + j], ld >= cols. A row
// stride lets the two halves of a fused [rows, 2F] projection be passed as gate and up.
struct ConstRows {
  const void* data;
  int64_t ld;
};
struct MutRows {
  void* data;
  int64_t ld;
};

// out[r, j] = act(gate'[r, j]) * (up'[r, j] + up_offset) for r < rows, j < cols (GluClamp). All in
// one dtype.
struct GluFwdArgs {
  Activation act;
  int64_t rows, cols;
  ConstRows gate, up;
  MutRows out;
  GluClamp clamp;
};

// dgate = dout * (up' + up_offset) * act'(gate') [gate <= limit]; dup = dout * act(gate')
// [|up| <= limit]; both overwritten.
struct GluBwdArgs {
  Activation act;
  int64_t rows, cols;
  ConstRows gate, up, dout;
  MutRows dgate, dup;
  GluClamp clamp;
};

struct ActivationKernels {
  // y[i] = act(x[i]) over a flat array.
  void (*act_fwd_f32)(Activation act, const float* x, float* y, int64_t n);
  void (*act_fwd_bf16)(Activation act, const uint16_t* x, uint16_t* y, int64_t n);
  // dx[i] = dy[i] * act'(x[i]).
  void (*act_bwd_f32)(Activation act, const float* x, const float* dy, float* dx, int64_t n);
  void (*act_bwd_bf16)(Activation act, const uint16_t* x, const uint16_t* dy, uint16_t* dx, int64_t n);
  void (*glu_fwd_f32)(const GluFwdArgs& a);
  void (*glu_fwd_bf16)(const GluFwdArgs& a);
  void (*glu_bwd_f32)(const GluBwdArgs& a);
  void (*glu_bwd_bf16)(const GluBwdArgs& a);
  // y[i] = fn(x[i]) with the simd_math.h function fn.
  void (*math_f32)(MathFn fn, const float* x, float* y, int64_t n);
  // y[i] = a * x[i] (y may alias x).
  void (*scale_f32)(const float* x, float* y, float a, int64_t n);
  void (*scale_bf16)(const uint16_t* x, uint16_t* y, float a, int64_t n);
  // The logit soft cap (Gemma 2): y[i] = cap * tanh(x[i] / cap) (y may alias x), and its backward
  // dx[i] = dy[i] * (1 - tanh^2(x[i] / cap)) (dx may alias dy).
  void (*soft_cap_f32)(const float* x, float* y, float cap, int64_t n);
  void (*soft_cap_bf16)(const uint16_t* x, uint16_t* y, float cap, int64_t n);
  void (*soft_cap_bwd_f32)(const float* x, const float* dy, float* dx, float cap, int64_t n);
  void (*soft_cap_bwd_bf16)(const uint16_t* x, const uint16_t* dy, uint16_t* dx, float cap, int64_t n);
};
}  // namespace tessera::backends
