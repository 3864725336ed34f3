// Inference: a decoder with a KV cache, driven one step at a time. The cache has `max_slots`
// rows (sequences in flight), each up to `max_target_length` positions. A sequence lives in a
// slot: prefill() writes its prompt's keys and values and returns the logits of the last prompt
// position; each decode() appends one token to every listed slot and returns their next-token
// logits. Slots are independent, so a server can prefill a new request into a free slot between
// two decode() calls of the others (continuous batching), and release() frees a finished one.
//
// Engine is the interface the decode command, the server and the tests share; make_engine()
// (llama_engine.h) builds the CPU implementation for the Llama family from a config.
// Not thread-safe: one thread drives an Engine (the server's scheduler thread).
#pragma once

#include <cstdint>
#include <span>

#include "tessera/models/model_spec.h"

namespace tessera::infer {

class Engine {
 public:
  virtual ~Engine() = default;

  virtual const models::ModelSpec& spec() const = 0;
  // For logs: "llama" (llama_engine.h) or "graph" (graph_engine.h).
  virtual const char* name() const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual int max_slots() const = 0;
  virtual int64_t max_target_length() const = 0;   // positions per slot (prompt + generated)
  virtual int64_t max_prefill_length() const = 0;  // longest prompt prefill() accepts

  // Positions written in `slot` so far (0 for a free or released slot).
  virtual int64_t length(int slot) const = 0;

  // Clears `slot`, runs the prompt through the model from position 0 and stores its keys and
  // values; writes the logits of the last prompt position to `logits` (vocab_size() floats).
  // Throws kShape for an empty prompt, one over max_prefill_length(), or a bad slot.
  virtual void prefill(int slot, std::span<const int32_t> prompt, std::span<float> logits) = 0;

  // Appends tokens[i] at position length(slots[i]) of slots[i], for every i at once (one batched
  // forward step), and writes that position's next-token logits to
  // logits[i * vocab_size() ... (i + 1) * vocab_size()). Throws kShape for a slot that is full
  // (length == max_target_length()) or listed twice.
  virtual void decode(std::span<const int> slots, std::span<const int32_t> tokens,
                      std::span<float> logits) = 0;

  // Frees `slot` (its length becomes 0).
  virtual void release(int slot) = 0;
};

}  // namespace tessera::infer
