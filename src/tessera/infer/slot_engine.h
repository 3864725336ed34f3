// What an Engine implementation (graph_engine.cc) keeps apart from its model: the slots'
// lengths, the Engine accessors, and the argument checks of prefill and decode with their
// messages (engine.h's contract). An engine derives from it and runs the model.
#pragma once

#include <span>
#include <vector>

#include "tessera/infer/engine.h"

namespace tessera::infer {

class SlotEngine : public Engine {
 public:
  SlotEngine(const models::ModelSpec& spec, const EngineOptions& options)
      : spec_(spec), options_(options), length_(static_cast<size_t>(options.max_slots), 0) {}

  const models::ModelSpec& spec() const override { return spec_; }
  int64_t vocab_size() const override { return spec_.vocab_size; }
  int max_slots() const override { return options_.max_slots; }
  int64_t max_target_length() const override { return options_.max_target_length; }
  int64_t max_prefill_length() const override { return options_.max_prefill_length; }
  int64_t length(int slot) const override {
    check_slot("length", slot);
    return length_[static_cast<size_t>(slot)];
  }
  void release(int slot) override {
    check_slot("release", slot);
    length_[static_cast<size_t>(slot)] = 0;
  }

 protected:
  void check_slot(const char* what, int slot) const;
  void check_tokens(const char* what, std::span<const int32_t> ids) const;
  // engine.h's prefill and decode contracts (kShape naming the argument); check_decode also checks
  // that every listed slot has a position left.
  void check_prefill(int slot, std::span<const int32_t> prompt, std::span<float> logits) const;
  void check_decode(std::span<const int> slots, std::span<const int32_t> tokens,
                    std::span<float> logits) const;

  models::ModelSpec spec_;
  EngineOptions options_;
  std::vector<int64_t> length_;  // per slot
};

}  // namespace tessera::infer
