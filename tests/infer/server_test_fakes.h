// A small deterministic Engine and Tokenizer for the server's tests, so that the scheduler and
// the API are checked without a model.
//
// FakeTokenizer: id 0 is EOS (decodes to nothing); ids 1..26 are 'a'..'z'; 27 and 28 are the two
// bytes of 'é' (C3 A9), which only form a character together; 29 is '!', 30 is ' ', 31 is '?'.
// FakeEngine (vocab 33): the next token after t is t + 1 for a letter before 'z', EOS after 'z',
// '!' after '?', 27 after '!', 28 after 27, 'a' after 28, and 32 (an id the tokenizer lacks)
// after ' '. Its
// logits put 10 on that token and 0 elsewhere, so greedy sampling follows the rule. It logs every
// prefill, decode batch and release.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/data/tokenizer.h"
#include "tessera/infer/engine.h"

namespace tessera::infer::server::testing {

class FakeTokenizer : public data::Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids;
    for (size_t i = 0; i < text.size(); ++i) {
      const char c = text[i];
      if (c >= 'a' && c <= 'z')
        ids.push_back(c - 'a' + 1);
      else if (c == '!')
        ids.push_back(29);
      else if (c == ' ')
        ids.push_back(30);
      else if (c == '?')
        ids.push_back(31);
      else if (text.substr(i, 2) == "\xC3\xA9")
        ids.push_back(27), ids.push_back(28), ++i;
      // Anything else (capitals, ':', newlines of the chat template) is dropped: the fake has no
      // token for it.
    }
    return ids;
  }
  std::string decode(std::span<const int32_t> ids) const override {
    std::string out;
    for (int32_t id : ids) {
      TESSERA_CHECK_SHAPE(id >= 0 && id < 32, "FakeTokenizer: id {} outside [0, 32)", id);
      if (id >= 1 && id <= 26) out += static_cast<char>('a' + id - 1);
      if (id == 27) out += '\xC3';
      if (id == 28) out += '\xA9';
      if (id == 29) out += '!';
      if (id == 30) out += ' ';
      if (id == 31) out += '?';
    }
    return out;
  }
  int64_t vocab_size() const override { return 32; }
  int32_t bos_id() const override { return -1; }
  int32_t eos_id() const override { return 0; }
  int32_t pad_id() const override { return -1; }
  std::string_view type() const override { return "fake"; }
};

class FakeEngine : public Engine {
 public:
  FakeEngine(int max_slots, int64_t max_target_length, int64_t max_prefill_length)
      : slots_(static_cast<size_t>(max_slots)), target_(max_target_length), prefill_(max_prefill_length) {}

  static int32_t next_after(int32_t t) {
    if (t >= 1 && t <= 25) return t + 1;
    if (t == 29) return 27;
    if (t == 27) return 28;
    if (t == 28) return 1;
    if (t == 31) return 29;
    if (t == 30) return 32;
    return 0;  // after 'z' (and anything else): EOS
  }

  const models::ModelSpec& spec() const override { return spec_; }
  const char* name() const override { return "fake"; }
  int64_t vocab_size() const override { return kVocab; }
  int max_slots() const override { return static_cast<int>(slots_.size()); }
  int64_t max_target_length() const override { return target_; }
  int64_t max_prefill_length() const override { return prefill_; }
  int64_t length(int slot) const override {
    return static_cast<int64_t>(slots_.at(static_cast<size_t>(slot)).size());
  }

  void prefill(int slot, std::span<const int32_t> prompt, std::span<float> logits) override {
    TESSERA_CHECK_SHAPE(!prompt.empty() && static_cast<int64_t>(prompt.size()) <= prefill_,
                        "FakeEngine: prompt");
    if (fail_prefill) fail(ErrorKind::kRuntime, "FakeEngine: prefill failed");
    auto& s = slots_.at(static_cast<size_t>(slot));
    s.assign(prompt.begin(), prompt.end());
    prefills.push_back(slot);
    write_logits(s.back(), logits.first(kVocab));
  }

  void set_profiling(bool on) override { profiling = on; }
  std::string profile_report() const override { return profiling ? "fake engine: no ops\n" : ""; }

  void decode(std::span<const int> slots, std::span<const int32_t> tokens, std::span<float> logits) override {
    if (fail_decode) fail(ErrorKind::kRuntime, "FakeEngine: decode failed");
    decodes.emplace_back(slots.begin(), slots.end());
    for (size_t i = 0; i < slots.size(); ++i) {
      auto& s = slots_.at(static_cast<size_t>(slots[i]));
      TESSERA_CHECK_SHAPE(!s.empty() && static_cast<int64_t>(s.size()) < target_,
                          "FakeEngine: slot {} full or free", slots[i]);
      s.push_back(tokens[i]);
      write_logits(tokens[i], logits.subspan(i * kVocab, kVocab));
    }
  }

  void release(int slot) override {
    slots_.at(static_cast<size_t>(slot)).clear();
    releases.push_back(slot);
  }

  static constexpr size_t kVocab = 33;
  std::vector<int> prefills;              // slot of each prefill()
  std::vector<std::vector<int>> decodes;  // slots of each decode()
  std::vector<int> releases;
  bool fail_prefill = false, fail_decode = false;
  bool profiling = false;

 private:
  static void write_logits(int32_t last, std::span<float> row) {
    std::fill(row.begin(), row.end(), 0.0f);
    row[static_cast<size_t>(next_after(last))] = 10.0f;
  }

  models::ModelSpec spec_{};
  std::vector<std::vector<int32_t>> slots_;
  int64_t target_, prefill_;
};

}  // namespace tessera::infer::server::testing
