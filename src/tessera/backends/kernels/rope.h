// Rotary position embedding kernels: rotate pairs of each head vector by the angles of the token's
// position, read from a precomputed cos/sin table. The table, the op entry with its position
// checks, and the double reference live in ops/rope.{h,cc}.
// The table type is device-neutral: each backend fills one (backends/kernels.h); the CPU's are
// built per ISA in backends/cpu/.
#pragma once

#include <cstdint>

namespace tessera::backends {

// x, y: [tokens, heads, head_dim] contiguous in the kernel's dtype (y may alias x).
// pos: [tokens], each in [0, table rows) (the op checks). cos, sin: [table rows, head_dim / 2].
// Pair i of a head is (i, i + D/2) when !interleaved (Hugging Face "rotate_half") and (2i, 2i+1)
// when interleaved. With angle a = pos * inv_freq[i], c = cos a, s = sin a:
//   forward  (y1, y2) = (x1 c - x2 s, x2 c + x1 s)
//   inverse  (y1, y2) = (x1 c + x2 s, x2 c - x1 s)   (the transpose: the backward of the forward)
struct RopeArgs {
  const void* x;
  void* y;
  const int32_t* pos;
  const float* cos;
  const float* sin;
  int64_t tokens, heads, head_dim;
  bool interleaved;
  bool inverse;
};

struct RopeKernels {
  void (*rope_f32)(const RopeArgs& a);
  void (*rope_bf16)(const RopeArgs& a);
};
}  // namespace tessera::backends
