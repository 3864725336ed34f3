// Next-token sampling (sampling.h): MaxText's strategies on one row of logits.
//
// How each draw is made, so that a seed gives the same tokens on every machine: the kept tokens
// are put in a fixed order (by logit, highest first, ties by lower id; weighted keeps every token
// in id order), their weights w_i = exp((logit_i - max) / temperature) are summed in double, and
// the token is the first whose running sum exceeds u * sum, with u = (the next 53 bits of the
// mt19937_64 stream) / 2^53 in [0, 1). One draw takes one number from the stream.
//
// Which tokens are kept, as MaxText's inference_utils.sampling decides it:
//   topk       the top_k highest logits (top_k > V keeps all V);
//   nucleus    sorted by probability softmax(logits) (no temperature), the shortest prefix whose
//              cumulative probability reaches nucleus_p (the token that crosses it is kept);
//   composite  the top_k highest, then within them the shortest prefix whose cumulative
//              probability, renormalised over the top_k (softmax of the top_k logits), reaches
//              nucleus_p.
// The temperature then shapes only the draw among the kept tokens. Finding the nucleus sorts only
// a prefix: the top 64 tokens, then 4 times more until the prefix holds nucleus_p of the mass.
#include "tessera/infer/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tessera/core/error.h"

namespace tessera::infer {

namespace {

constexpr int64_t kFirstNucleusPrefix = 64;

bool is_strategy(const std::string& s) {
  return s == "greedy" || s == "weighted" || s == "nucleus" || s == "topk" || s == "composite";
}

// Highest logit first; equal logits by lower id.
bool before(const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

}  // namespace

void validate(const SamplingParams& p) {
  if (!is_strategy(p.strategy))
    fail(
        ErrorKind::kConfig,
        "decode_sampling_strategy '{}' is not a sampling strategy (allowed: greedy, weighted, nucleus, topk, "
        "composite)",
        p.strategy);
  if (!(std::isfinite(p.temperature) && p.temperature > 0))
    fail(ErrorKind::kConfig, "decode_sampling_temperature must be a number > 0, got {}", p.temperature);
  if ((p.strategy == "nucleus" || p.strategy == "composite") && !(p.nucleus_p > 0 && p.nucleus_p <= 1))
    fail(ErrorKind::kConfig, "decode_sampling_nucleus_p must be in (0, 1] for the {} strategy, got {}",
         p.strategy, p.nucleus_p);
  if ((p.strategy == "topk" || p.strategy == "composite") && p.top_k < 1)
    fail(ErrorKind::kConfig, "decode_sampling_top_k must be >= 1 for the {} strategy, got {}", p.strategy,
         p.top_k);
}

namespace {

int32_t argmax(std::span<const float> logits) {
  int32_t best = 0;
  for (size_t v = 1; v < logits.size(); ++v)
    if (logits[v] > logits[best]) best = static_cast<int32_t>(v);
  return best;
}

double uniform(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

// A draw from the kept tokens `kept` (in their order) with weights exp((logit - mx) / t).
int32_t draw(std::span<const std::pair<float, int32_t>> kept, float mx, double t, std::mt19937_64& rng) {
  double total = 0;
  for (const auto& [l, id] : kept) total += std::exp((static_cast<double>(l) - mx) / t);
  const double target = uniform(rng) * total;
  double run = 0;
  for (const auto& [l, id] : kept) {
    run += std::exp((static_cast<double>(l) - mx) / t);
    if (run > target) return id;
  }
  return kept.back().second;  // target within rounding of the total
}

// Sorts the `n` highest entries of `s` to its front (in `before` order).
void sort_prefix(std::vector<std::pair<float, int32_t>>& s, int64_t n) {
  const auto mid = s.begin() + n;
  if (mid != s.end()) std::nth_element(s.begin(), mid - 1, s.end(), before);
  std::sort(s.begin(), mid, before);
}

// The length of the shortest prefix of the sorted `s[0, n)` whose probability, each entry's
// exp(logit - mx) / z, reaches p; n when none does.
int64_t nucleus_length(const std::vector<std::pair<float, int32_t>>& s, int64_t n, float mx, double z,
                       double p) {
  double run = 0;
  for (int64_t i = 0; i < n; ++i) {
    run += std::exp(static_cast<double>(s[i].first) - mx) / z;
    if (run >= p) return i + 1;
  }
  return n;
}

}  // namespace

int32_t Sampler::sample(std::span<const float> logits, const SamplingParams& params) {
  validate(params);
  TESSERA_CHECK_SHAPE(!logits.empty(), "sample: the logits row is empty");
  if (params.strategy == "greedy") return argmax(logits);
  const float mx = logits[argmax(logits)];
  const auto V = static_cast<int64_t>(logits.size());
  if (params.strategy == "weighted") {
    // In id order over the whole vocabulary, without copying it.
    double total = 0;
    for (float l : logits) total += std::exp((static_cast<double>(l) - mx) / params.temperature);
    const double target = uniform(rng_) * total;
    double run = 0;
    for (int64_t v = 0; v < V; ++v) {
      run += std::exp((static_cast<double>(logits[v]) - mx) / params.temperature);
      if (run > target) return static_cast<int32_t>(v);
    }
    return static_cast<int32_t>(V - 1);
  }
  scratch_.resize(static_cast<size_t>(V));  // grows once to the vocabulary
  for (int64_t v = 0; v < V; ++v) scratch_[v] = {logits[v], static_cast<int32_t>(v)};
  int64_t kept = V;
  if (params.strategy == "topk" || params.strategy == "composite") {
    kept = std::min(params.top_k, V);
    sort_prefix(scratch_, kept);
  }
  if (params.strategy == "nucleus") {
    double z = 0;  // the softmax's normaliser over the whole vocabulary
    for (float l : logits) z += std::exp(static_cast<double>(l) - mx);
    for (int64_t n = std::min(kFirstNucleusPrefix, V);; n = std::min(4 * n, V)) {
      sort_prefix(scratch_, n);
      kept = nucleus_length(scratch_, n, mx, z, params.nucleus_p);
      if (kept < n || n == V) break;  // the prefix reached nucleus_p, or holds everything
    }
  } else if (params.strategy == "composite") {
    double z = 0;  // renormalised over the top k
    for (int64_t i = 0; i < kept; ++i) z += std::exp(static_cast<double>(scratch_[i].first) - mx);
    kept = nucleus_length(scratch_, kept, mx, z, params.nucleus_p);
  }
  return draw(std::span(scratch_.data(), static_cast<size_t>(kept)), mx, params.temperature, rng_);
}

}  // namespace tessera::infer
