#include "tessera/ops/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>
#include <utility>

#include "tessera/backends/kernels.h"
#include "tessera/core/error.h"

namespace tessera::ops {

namespace {

constexpr double kTwoPi = 2.0 * std::numbers::pi;

void check_config(const RopeConfig& c) {
  TESSERA_CHECK(c.head_dim >= 2 && c.head_dim % 2 == 0, ErrorKind::kConfig,
                "rope: head_dim must be even and >= 2, got {}", c.head_dim);
  TESSERA_CHECK(c.max_positions >= 1 && c.max_positions <= (int64_t{1} << 31), ErrorKind::kConfig,
                "rope: max_positions must be in [1, 2^31], got {}", c.max_positions);
  TESSERA_CHECK(c.max_timescale > 1.0, ErrorKind::kConfig, "rope: rope_max_timescale must be > 1, got {}",
                c.max_timescale);
  if (c.scaling == RopeScaling::kYarn) {
    const YarnRopeScaling& y = c.yarn;
    TESSERA_CHECK(
        y.factor >= 1 && y.beta_fast > y.beta_slow && y.beta_slow > 0 &&
            y.original_max_position_embeddings > 0,
        ErrorKind::kConfig,
        "rope: yarn scaling needs rope_factor >= 1, beta_fast > beta_slow > 0 and "
        "original_max_position_embeddings > 0; got factor {}, beta_fast {}, beta_slow {}, original {}",
        y.factor, y.beta_fast, y.beta_slow, y.original_max_position_embeddings);
  }
  TESSERA_CHECK(c.scaling != RopeScaling::kLinear || (std::isfinite(c.linear_factor) && c.linear_factor > 0),
                ErrorKind::kConfig, "rope: linear scaling needs rope_linear_scaling_factor > 0, got {}",
                c.linear_factor);
  TESSERA_CHECK(c.local_max_timescale == 0 || c.local_max_timescale > 1, ErrorKind::kConfig,
                "rope: local_rope_max_timescale must be > 1 (or 0: none), got {}", c.local_max_timescale);
  if (c.scaling == RopeScaling::kLlama3) {
    const Llama3RopeScaling& l = c.llama3;
    TESSERA_CHECK(l.factor > 0 && l.low_freq_factor > 0 && l.high_freq_factor > l.low_freq_factor &&
                      l.original_max_position_embeddings > 0,
                  ErrorKind::kConfig,
                  "rope: llama3 scaling needs factor > 0, 0 < low_freq_factor < high_freq_factor and "
                  "original_max_position_embeddings > 0; got factor {}, low {}, high {}, original {}",
                  l.factor, l.low_freq_factor, l.high_freq_factor, l.original_max_position_embeddings);
  }
}

// YaRN's ramp between the interpolated and extrapolated frequencies (see rope.h): [low, high].
std::pair<double, double> yarn_range(const YarnRopeScaling& y, double theta, int64_t d) {
  auto corr = [&](double rotations) {
    return static_cast<double>(d) * std::log(y.original_max_position_embeddings / (rotations * kTwoPi)) /
           (2.0 * std::log(theta));
  };
  double low = corr(y.beta_fast), high = corr(y.beta_slow);
  if (y.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(d - 1));
  if (high == low) high += 0.001;  // transformers' guard against a zero-width ramp
  return {low, high};
}

double yarn_scale(double f, int64_t i, const YarnRopeScaling& y, double theta, int64_t d) {
  const auto [low, high] = yarn_range(y, theta, d);
  const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
  return f * (1.0 - ramp) + f / y.factor * ramp;
}

// Llama 3.1's piecewise rescaling of one inverse frequency (see rope.h).
double llama3_scale(double f, const Llama3RopeScaling& l) {
  const double wavelen = kTwoPi / f;
  const double orig = l.original_max_position_embeddings;
  if (wavelen < orig / l.high_freq_factor) return f;            // high frequency: untouched
  if (wavelen > orig / l.low_freq_factor) return f / l.factor;  // low frequency: interpolated
  const double smooth = (orig / wavelen - l.low_freq_factor) / (l.high_freq_factor - l.low_freq_factor);
  return (1.0 - smooth) * f / l.factor + smooth * f;
}

// Checks x [..., H, D] against the table and positions [...]; returns the token count.
int64_t check_rope(const char* op, const char* xn, const Tensor& x, const Tensor& positions,
                   const RopeTable& table, const char* yn, const Tensor& y) {
  TESSERA_CHECK_SHAPE(x.rank() >= 3, "{}: {} must be [B, T, H, D] or [N, H, D], got {}", op, xn, x.str());
  TESSERA_CHECK_SHAPE(x.dtype() == DType::kF32 || x.dtype() == DType::kBF16,
                      "{}: {} must be float32 or bfloat16, got {}", op, xn, x.str());
  TESSERA_CHECK_SHAPE(x.dim(-1) == table.head_dim(),
                      "{}: {} has head dim D = {} but the RopeTable was built for {}", op, xn, x.dim(-1),
                      table.head_dim());
  TESSERA_CHECK_SHAPE(y.shape() == x.shape() && y.dtype() == x.dtype(), "{}: {} must match {} ({}), got {}",
                      op, yn, xn, x.str(), y.str());
  TESSERA_CHECK_SHAPE(x.is_contiguous() && y.is_contiguous(), "{}: {} and {} must be contiguous", op, xn, yn);
  Shape lead = Shape::of_rank(x.rank() - 2);
  for (int i = 0; i < lead.rank(); ++i) lead[i] = x.dim(i);
  TESSERA_CHECK_SHAPE(
      positions.dtype() == DType::kI32 && positions.shape() == lead && positions.is_contiguous(),
      "{}: positions must be int32 {} (the leading dimensions of {}), got {}", op, lead.str(), xn,
      positions.str());
  const int64_t tokens = lead.numel();
  const int32_t* pos = positions.ptr<int32_t>();
  const int64_t limit = table.max_positions();
  for (int64_t t = 0; t < tokens; ++t) {
    if (pos[t] < 0 || pos[t] >= limit)
      fail(ErrorKind::kShape,
           "{}: position {} of token {} (flat index into {}) is outside the RopeTable, which covers "
           "positions 0..{}; {}",
           op, pos[t], t, positions.str(), limit - 1,
           pos[t] < 0 ? std::string("positions must be >= 0")
                      : fmt::format("build the table with max_positions > {}", pos[t]));
  }
  return tokens;
}

void run_rope(const Tensor& x, const Tensor& positions, const RopeTable& table, RopeLayout layout,
              const Tensor& y, int64_t tokens, bool inverse) {
  if (tokens == 0) return;
  backends::RopeArgs a{
      x.data(),  y.data(),  positions.ptr<int32_t>(),           table.cos(), table.sin(), tokens,
      x.dim(-2), x.dim(-1), layout == RopeLayout::kInterleaved, inverse};
  const auto& k = *backends::kernels_for(x).rope;
  (x.dtype() == DType::kF32 ? k.rope_f32 : k.rope_bf16)(a);
}

}  // namespace

double YarnRopeScaling::attention_factor() const {
  return attention_scaling ? 0.1 * std::log(factor) + 1.0 : 1.0;
}

RopeTable::RopeTable(const RopeConfig& config) : config_(config) {
  check_config(config_);
  const int64_t half = config_.head_dim / 2, rows = config_.max_positions;
  inv_freq_.resize(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    double f = std::pow(config_.max_timescale, -2.0 * static_cast<double>(i) / config_.head_dim);
    if (config_.scaling == RopeScaling::kLlama3) f = llama3_scale(f, config_.llama3);
    if (config_.scaling == RopeScaling::kYarn)
      f = yarn_scale(f, i, config_.yarn, config_.max_timescale, config_.head_dim);
    if (config_.scaling == RopeScaling::kLinear) f /= config_.linear_factor;
    inv_freq_[i] = f;
  }
  const double att = config_.scaling == RopeScaling::kYarn ? config_.yarn.attention_factor() : 1.0;
  cos_.resize(static_cast<size_t>(rows * half));
  sin_.resize(static_cast<size_t>(rows * half));
  // Angles in double: p * f is exact to 2^-53 relative, so cos/sin round correctly to f32 even
  // at p ~ 1e6 (an f32 angle would be off by ~0.03 rad there).
#pragma omp parallel for schedule(static) if (rows * half > (1 << 16))
  for (int64_t p = 0; p < rows; ++p) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(p) * inv_freq_[i];
      cos_[p * half + i] = static_cast<float>(att * std::cos(angle));
      sin_[p * half + i] = static_cast<float>(att * std::sin(angle));
    }
  }
  if (config_.local_max_timescale > 0) {
    RopeConfig lc{.max_timescale = config_.local_max_timescale,
                  .head_dim = config_.head_dim,
                  .max_positions = config_.max_positions};
    local_ = std::make_unique<RopeTable>(lc);
  }
}

RopeTable::~RopeTable() = default;

void rope_fwd(const Tensor& x, const Tensor& positions, const RopeTable& table, RopeLayout layout,
              const Tensor& y) {
  const int64_t tokens = check_rope("rope_fwd", "x", x, positions, table, "y", y);
  run_rope(x, positions, table, layout, y, tokens, /*inverse=*/false);
}

void rope_bwd(const Tensor& dy, const Tensor& positions, const RopeTable& table, RopeLayout layout,
              const Tensor& dx) {
  const int64_t tokens = check_rope("rope_bwd", "dy", dy, positions, table, "dx", dx);
  run_rope(dy, positions, table, layout, dx, tokens, /*inverse=*/true);
}

int64_t rope_bytes(int64_t tokens, int64_t heads, int64_t head_dim, DType dtype, int64_t distinct_positions) {
  const int64_t e = static_cast<int64_t>(dtype_size(dtype));
  return 2 * tokens * heads * head_dim * e + 4 * tokens + distinct_positions * head_dim * 4;
}

// ---- references -------------------------------------------------------------------------------

// Written after Hugging Face's vectorised form: compute every candidate, then select with masks.
std::vector<double> rope_inv_freq_ref(const RopeConfig& config) {
  const int64_t d = config.head_dim;
  std::vector<double> f(static_cast<size_t>(d / 2));
  for (int64_t i = 0; i < d / 2; ++i)
    f[i] = 1.0 / std::pow(config.max_timescale, static_cast<double>(2 * i) / d);
  if (config.scaling == RopeScaling::kYarn) {  // written from the formula, apart from yarn_scale
    const YarnRopeScaling& y = config.yarn;
    auto corr = [&](double r) {
      return d * std::log(y.original_max_position_embeddings / (r * 2.0 * std::numbers::pi)) /
             (2.0 * std::log(config.max_timescale));
    };
    double low = y.truncate ? std::floor(corr(y.beta_fast)) : corr(y.beta_fast);
    double high = y.truncate ? std::ceil(corr(y.beta_slow)) : corr(y.beta_slow);
    low = low < 0 ? 0 : low;
    high = high > d - 1 ? static_cast<double>(d - 1) : high;
    if (high == low) high += 0.001;
    for (int64_t i = 0; i < d / 2; ++i) {
      double ramp = (static_cast<double>(i) - low) / (high - low);
      ramp = ramp < 0 ? 0 : (ramp > 1 ? 1 : ramp);
      f[i] = f[i] / y.factor * ramp + f[i] * (1 - ramp);
    }
    return f;
  }
  if (config.scaling == RopeScaling::kLinear)
    for (double& x : f) x /= config.linear_factor;
  if (config.scaling != RopeScaling::kLlama3) return f;
  const Llama3RopeScaling& l = config.llama3;
  const double low_wavelen = l.original_max_position_embeddings / l.low_freq_factor;
  const double high_wavelen = l.original_max_position_embeddings / l.high_freq_factor;
  for (double& fi : f) {
    const double wavelen = 2.0 * std::numbers::pi / fi;
    const double scaled = wavelen > low_wavelen ? fi / l.factor : fi;
    const double smooth = (l.original_max_position_embeddings / wavelen - l.low_freq_factor) /
                          (l.high_freq_factor - l.low_freq_factor);
    const double smoothed = (1.0 - smooth) * scaled / l.factor + smooth * scaled;
    const bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
    fi = medium ? smoothed : scaled;
  }
  return f;
}

void rope_ref(const RopeConfig& config, RopeLayout layout, bool inverse, const double* x, const int32_t* pos,
              int64_t tokens, int64_t heads, double* y) {
  const int64_t d = config.head_dim, half = d / 2;
  const std::vector<double> f = rope_inv_freq_ref(config);
  const double att = config.scaling == RopeScaling::kYarn && config.yarn.attention_scaling
                         ? 0.1 * std::log(config.yarn.factor) + 1.0
                         : 1.0;
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      const double* xh = x + (t * heads + h) * d;
      double* yh = y + (t * heads + h) * d;
      for (int64_t i = 0; i < half; ++i) {
        const double angle = (inverse ? -1.0 : 1.0) * pos[t] * f[i];
        const int64_t i1 = layout == RopeLayout::kRotateHalf ? i : 2 * i;
        const int64_t i2 = layout == RopeLayout::kRotateHalf ? i + half : 2 * i + 1;
        const double x1 = xh[i1], x2 = xh[i2];
        yh[i1] = att * (x1 * std::cos(angle) - x2 * std::sin(angle));
        yh[i2] = att * (x2 * std::cos(angle) + x1 * std::sin(angle));
      }
    }
  }
}

}  // namespace tessera::ops
