// Next-token sampling, with MaxText's decode_sampling_strategy names:
//   greedy     the arg-max (ties: the lowest id);
//   weighted   a draw from softmax(logits / temperature);
//   nucleus    a draw from the smallest set of most likely tokens whose probability reaches
//              nucleus_p (renormalised), after the temperature;
//   topk       a draw from the top_k most likely tokens (renormalised), after the temperature;
//   composite  top-k, then nucleus within it, then the temperature draw (MaxText's order).
// As in MaxText, the top-k and nucleus sets are chosen from the logits as they are; the
// temperature then shapes the draw among the kept tokens (sampling.cc gives the details).
// A Sampler owns its random stream (seeded), so a request's output is reproducible.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace tessera::infer {

struct SamplingParams {
  std::string strategy = "greedy";  // greedy | weighted | nucleus | topk | composite
  double temperature = 1.0;         // > 0
  double nucleus_p = 1.0;           // (0, 1]
  int64_t top_k = 0;                // >= 1 for topk and composite
};

// Throws kConfig naming the field when a value does not fit the strategy.
void validate(const SamplingParams& params);

class Sampler {
 public:
  explicit Sampler(uint64_t seed) : rng_(seed) {}
  // The chosen token id for one row of logits (vocab-sized, f32).
  int32_t sample(std::span<const float> logits, const SamplingParams& params);

 private:
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> scratch_;  // grown once, reused
  std::vector<float> weights_;                      // exp((logit - max) / temperature), grown once
};

}  // namespace tessera::infer
