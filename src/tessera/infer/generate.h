// Generation: prompts to completions through an Engine's slots, the loop behind `tessera decode`.
//
// Scheduling (continuous batching): every free slot takes the next waiting prompt (a prefill,
// whose logits give the first new token); then one decode step advances every running sequence
// together; a sequence that stops frees its slot at once, and the next prompt fills it before the
// following step. Completions come back in the order of the prompts.
//
// A sequence stops at the first EOS token (which is not part of the completion), or when it fills
// the engine's max_target_length positions (prompt plus completion), or after max_new_tokens.
// Sampling: prompt i draws from its own Sampler seeded with seed + i, so a completion does not
// depend on how many slots there are or which other prompts run beside it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/infer/engine.h"
#include "tessera/infer/sampling.h"

namespace tessera::infer {

struct GenerateOptions {
  SamplingParams sampling;
  uint64_t seed = 0;
  int32_t eos_id = -1;         // -1: no EOS token (stop by length only)
  int64_t max_new_tokens = 0;  // 0: up to max_target_length
  // Only ids below this are sampled (0: the whole vocabulary): a tokenizer smaller than the
  // model's padded embedding table cannot turn the ids beyond it into text.
  int64_t sample_vocab = 0;
};

enum class StopReason { kEos, kLength };
const char* stop_reason_name(StopReason r);  // "eos", "length"

struct Completion {
  std::vector<int32_t> tokens;  // the generated ids, without the EOS
  StopReason stop = StopReason::kLength;
};

struct GenerateStats {
  double prefill_seconds = 0;  // prefill calls and the sampling of their first tokens
  int64_t prefill_tokens = 0;  // prompt tokens prefilled
  double decode_seconds = 0;   // decode calls and the sampling of their tokens
  int64_t decode_tokens = 0;   // tokens sampled from decode steps (summed over the batch)
  int64_t decode_steps = 0;
  int max_batch = 0;  // the most sequences one decode step advanced
};

// Runs every prompt to completion. Throws kShape for an empty prompt, one longer than the engine's
// max_prefill_length, or one that leaves no position to generate into (length >= max_target_length);
// kConfig for invalid sampling parameters.
std::vector<Completion> generate(Engine& engine, const std::vector<std::vector<int32_t>>& prompts,
                                 const GenerateOptions& options, GenerateStats* stats = nullptr);

}  // namespace tessera::infer
