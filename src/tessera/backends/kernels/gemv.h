// Small-M matrix products for decoding: y[M, N] (+)= x[M, K] · W[N, K]ᵀ, with W stored one output
// per row (Hugging Face's nn.Linear layout, [out, in]), so that each thread streams a contiguous
// range of W once per call. Built for AVX-512, AVX2 and scalar from gemv_kernels.inc. The op entry
// (ops/gemv.h) checks shapes and dtypes; these take raw pointers.
//
// Why not oneDNN for this shape: decoding one token per sequence makes M = 1..32 while W holds
// millions of elements, so the product is bound by reading W, and the kernel's job is to stream W
// at the memory bandwidth with f32 accumulation. bench/decode_bench.cc measures both.
// The table type is device-neutral: each backend fills one (backends/kernels.h); the CPU's are
// built per ISA in backends/cpu/.
#pragma once

#include <cstdint>
#include <span>

namespace tessera::backends {

// Element (i, j) of x is x[i * ldx + j]; row r of W is w[r * ldw ...]; y(i, n) is y[i * ldy + n].
// x and W have one dtype (f32 or bf16, see the table); y is f32 or bf16. Products and sums are f32
// (bf16 inputs are widened exactly); a bf16 y is rounded to nearest even once, after the
// accumulate add. y must not overlap x or W.
struct GemvArgs {
  int64_t m, n, k;
  const void* x;
  int64_t ldx;
  const void* w;
  int64_t ldw;
  void* y;
  int64_t ldy;
  bool accumulate;  // y += x·Wᵀ (y is read); else y = x·Wᵀ (y is never read)
};

// Each entry runs one or more products that read the same x (equal m, k, x and ldx; each its own
// W, y and n) as one: the threads split the products' rows together, in one fork. A decoding
// step's q, k and v projections (or its gate and up) thus cost one hand-off between threads, and
// the rows of W stream as one sequence where the weights lie next to each other.
struct GemvKernels {
  void (*f32)(std::span<const GemvArgs> products);        // x, W, y f32
  void (*bf16_f32)(std::span<const GemvArgs> products);   // x, W bf16; y f32
  void (*bf16_bf16)(std::span<const GemvArgs> products);  // x, W, y bf16
};
}  // namespace tessera::backends
