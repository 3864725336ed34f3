// Rotary position embedding (RoPE) for attention tensors [B, T, H, D]: the table of cos/sin per
// position (built once), the forward rotation and its backward (the inverse rotation), byte counts,
// and a double reference.
//
// Frequencies: inv_freq[i] = theta^(-2i/D) for i < D/2, theta = rope_max_timescale (MaxText's
// name; Hugging Face's rope_theta). The rotation angle of pair i at position p is p * inv_freq[i].
// Positions come per token (int32 [B, T]) so packed sequences restart at 0 in each segment.
//
// Pair layouts: kRotateHalf pairs (i, i + D/2), Hugging Face Llama's `rotate_half`, which is what
// Llama checkpoints in Hugging Face layout expect (their q/k projections were permuted for it);
// kInterleaved pairs (2i, 2i+1), Meta's original layout, offered as an option.
//
// Scaling: kNone, or kLlama3 (Llama 3.1+, rope_type "llama3"/"llama3.1"), which rescales the
// inverse frequencies once, exactly as Hugging Face transformers' `_compute_llama3_parameters`:
//   wavelen = 2 pi / f;  if wavelen < orig / high_freq_factor: keep f;
//   elif wavelen > orig / low_freq_factor: f / factor;
//   else: smooth = (orig / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor),
//         f' = (1 - smooth) f / factor + smooth f.
// No attention scaling comes with it (Hugging Face's attention_factor is 1 for llama3).
// Or kYarn (rope_type "yarn", GPT-OSS and DeepSeek), as transformers' `_compute_yarn_parameters`:
//   corr(r) = D ln(orig / (2 pi r)) / (2 ln theta);  low = max(corr(beta_fast), 0),
//   high = min(corr(beta_slow), D - 1) (floored / ceiled first when truncate);
//   ramp_i = clamp((i - low) / (high - low), 0, 1);  f'_i = f_i (1 - ramp_i) + f_i / factor ramp_i,
// and an attention factor att = 0.1 ln(factor) + 1 (when attention_scaling; 1 otherwise) that
// multiplies both cos and sin, so q·k grows by att^2; the inverse rotation carries it too (the
// backward of y = att R x is att Rᵀ dy).
//
// Or kLinear (Hugging Face's rope_type "linear", Gemma 3's global layers): f' = f / linear_factor.
//
// A local companion (Gemma 3): with local_max_timescale > 0 the table also holds a second table of
// theta = local_max_timescale and no scaling (local()), which layers marked local rotate with.
//
// Precision: the table is computed in double (angle, cos, sin) and stored in f32, so every entry
// is the correctly rounded value. Hugging Face computes inv_freq and p * inv_freq in f32, whose
// angle error grows with p (about 1e-3 rad near p = 8192); comparisons with its dumps need a
// tolerance that grows with position.
//
// Left out: partial rotary (rotary dim < head dim), MRoPE, YaRN's mscale variants
// (DeepSeek's mscale / mscale_all_dim).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera::ops {

enum class RopeLayout { kRotateHalf, kInterleaved };
enum class RopeScaling { kNone, kLlama3, kYarn, kLinear };

// Llama 3.1's published values are the defaults.
struct Llama3RopeScaling {
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  double original_max_position_embeddings = 8192.0;
};

// GPT-OSS's values are the defaults.
struct YarnRopeScaling {
  double factor = 32.0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double original_max_position_embeddings = 4096.0;
  bool truncate = false;
  bool attention_scaling = true;
  double attention_factor() const;  // 0.1 ln(factor) + 1, or 1
};

struct RopeConfig {
  double max_timescale = 10000.0;  // theta
  int64_t head_dim = 0;            // D, even
  int64_t max_positions = 0;       // table rows: positions 0 .. max_positions - 1
  RopeScaling scaling = RopeScaling::kNone;
  Llama3RopeScaling llama3;        // used when scaling == kLlama3
  YarnRopeScaling yarn;            // used when scaling == kYarn
  double linear_factor = 1;        // used when scaling == kLinear: positions divided by it
  double local_max_timescale = 0;  // > 0: build local(), theta = this, no scaling
};

// cos/sin [max_positions, D/2] f32. Built once (std::vector, outside any step loop); threaded.
class RopeTable {
 public:
  explicit RopeTable(const RopeConfig& config);  // throws kConfig on a bad config
  RopeTable(const RopeTable&) = delete;
  RopeTable& operator=(const RopeTable&) = delete;
  RopeTable(RopeTable&&) = default;
  RopeTable& operator=(RopeTable&&) = default;
  ~RopeTable();

  const RopeConfig& config() const { return config_; }
  int64_t head_dim() const { return config_.head_dim; }
  int64_t max_positions() const { return config_.max_positions; }
  double inv_freq(int64_t i) const { return inv_freq_[static_cast<size_t>(i)]; }  // after scaling
  const float* cos() const { return cos_.data(); }
  const float* sin() const { return sin_.data(); }
  // The local companion (config.local_max_timescale > 0), else nullptr.
  const RopeTable* local() const { return local_.get(); }

 private:
  RopeConfig config_;
  std::unique_ptr<RopeTable> local_;
  std::vector<double> inv_freq_;  // [D/2]
  std::vector<float> cos_, sin_;  // [max_positions, D/2]
};

// y = rope(x). x, y: [B, T, H, D] (or [N, H, D]), f32 or bf16, same dtype, contiguous; y may alias
// x. positions: int32 with x's leading dimensions ([B, T] or [N]), each in [0, max_positions).
void rope_fwd(const Tensor& x, const Tensor& positions, const RopeTable& table, RopeLayout layout,
              const Tensor& y);
// dx = rope^T(dy), the inverse rotation (overwritten); dx may alias dy.
void rope_bwd(const Tensor& dy, const Tensor& positions, const RopeTable& table, RopeLayout layout,
              const Tensor& dx);

// Minimal traffic for tokens = B*T: x read, y written, positions read, and the cos/sin rows of
// `distinct_positions` positions (T when the batch rows share positions 0..T-1).
int64_t rope_bytes(int64_t tokens, int64_t heads, int64_t head_dim, DType dtype, int64_t distinct_positions);

// References in double, written apart from RopeTable: inverse frequencies (with scaling) straight
// from the formula above, and the rotation of x [tokens, heads, D] by the angles of `pos` (times
// YaRN's attention factor).
std::vector<double> rope_inv_freq_ref(const RopeConfig& config);
void rope_ref(const RopeConfig& config, RopeLayout layout, bool inverse, const double* x, const int32_t* pos,
              int64_t tokens, int64_t heads, double* y);

}  // namespace tessera::ops
