// A short sample from a model in training, for the end of a run: the continuation of a prompt by
// the decoding engine (infer/engine.h: the trained parameters, a KV cache, one slot), up to
// max_new_tokens or max_target_length positions. In a job of several ranks the parameters are
// sharded, so every rank instead runs full forward passes of the training plan (no cache) and the
// tensor ranks gather the logits. `tessera decode` is the tool for real generation from a checkpoint.
//
// Sampling follows MaxText's decode_sampling_strategy names: greedy, or weighted (softmax of
// logits / decode_sampling_temperature); the others are refused.
#pragma once

#include <cstdint>
#include <string>

#include "tessera/data/tokenizer.h"
#include "tessera/train/trainer.h"

namespace tessera::cli {

struct SampleOptions {
  std::string prompt;
  int64_t max_new_tokens = 64;
  std::string strategy = "greedy";  // greedy | weighted
  double temperature = 1.0;
  uint64_t seed = 0;
};

// Returns the prompt followed by the generated text. Stops at EOS or when the row is full.
std::string sample_text(train::Trainer& trainer, const data::Tokenizer& tokenizer,
                        const SampleOptions& options);

}  // namespace tessera::cli
