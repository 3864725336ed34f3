// The engine's slot bookkeeping and argument checks (slot_engine.h).
#include "tessera/infer/slot_engine.h"

#include "tessera/core/error.h"

namespace tessera::infer {

void SlotEngine::check_slot(const char* what, int slot) const {
  TESSERA_CHECK_SHAPE(slot >= 0 && slot < options_.max_slots, "engine.{}: slot {} is outside [0, {})", what,
                      slot, options_.max_slots);
}

void SlotEngine::check_tokens(const char* what, std::span<const int32_t> ids) const {
  for (size_t i = 0; i < ids.size(); ++i)
    TESSERA_CHECK_SHAPE(ids[i] >= 0 && ids[i] < spec_.vocab_size,
                        "engine.{}: token {} at index {} is outside the vocabulary [0, {})", what, ids[i], i,
                        spec_.vocab_size);
}

void SlotEngine::check_prefill(int slot, std::span<const int32_t> prompt, std::span<float> logits) const {
  check_slot("prefill", slot);
  const auto P = static_cast<int64_t>(prompt.size());
  TESSERA_CHECK_SHAPE(P >= 1 && P <= options_.max_prefill_length,
                      "engine.prefill: the prompt has {} tokens; it must have 1 to max_prefill_length = {}",
                      P, options_.max_prefill_length);
  TESSERA_CHECK_SHAPE(static_cast<int64_t>(logits.size()) >= spec_.vocab_size,
                      "engine.prefill: logits holds {} floats; it needs vocab_size = {}", logits.size(),
                      spec_.vocab_size);
  check_tokens("prefill", prompt);
}

void SlotEngine::check_decode(std::span<const int> slots, std::span<const int32_t> tokens,
                              std::span<float> logits) const {
  const auto M = static_cast<int64_t>(slots.size());
  const int64_t V = spec_.vocab_size;
  TESSERA_CHECK_SHAPE(tokens.size() == slots.size(), "engine.decode: {} slots but {} tokens", slots.size(),
                      tokens.size());
  TESSERA_CHECK_SHAPE(static_cast<int64_t>(logits.size()) >= M * V,
                      "engine.decode: logits holds {} floats; {} rows need {} x {}", logits.size(), M, M, V);
  TESSERA_CHECK_SHAPE(M <= options_.max_slots, "engine.decode: {} slots listed; the engine has {}", M,
                      options_.max_slots);
  check_tokens("decode", tokens);
  for (int64_t i = 0; i < M; ++i) {
    const int s = slots[static_cast<size_t>(i)];
    check_slot("decode", s);
    for (int64_t j = 0; j < i; ++j)
      TESSERA_CHECK_SHAPE(slots[static_cast<size_t>(j)] != s, "engine.decode: slot {} is listed twice", s);
    TESSERA_CHECK_SHAPE(length_[static_cast<size_t>(s)] < options_.max_target_length,
                        "engine.decode: slot {} is full ({} positions = max_target_length)", s,
                        length_[static_cast<size_t>(s)]);
  }
}

}  // namespace tessera::infer
