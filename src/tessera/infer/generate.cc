// The generation loop (generate.h).
#include "tessera/infer/generate.h"

#include <chrono>
#include <deque>

#include "tessera/core/error.h"

namespace tessera::infer {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// A sequence in a slot: its request, and the token sampled last (to be appended by the next step).
struct Running {
  int slot;
  size_t request;
  int32_t pending;
};

}  // namespace

const char* stop_reason_name(StopReason r) {
  return r == StopReason::kEos ? "eos" : "length";
}

std::vector<Completion> generate(Engine& engine, const std::vector<std::vector<int32_t>>& prompts,
                                 const GenerateOptions& o, GenerateStats* stats) {
  validate(o.sampling);
  const int64_t V = engine.vocab_size(), T = engine.max_target_length();
  TESSERA_CHECK(o.sample_vocab >= 0 && o.sample_vocab <= V, ErrorKind::kConfig,
                "generate: sample_vocab {} must be in [0, the model's vocabulary {}]", o.sample_vocab, V);
  const auto sampled = static_cast<size_t>(o.sample_vocab > 0 ? o.sample_vocab : V);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto n = static_cast<int64_t>(prompts[i].size());
    TESSERA_CHECK_SHAPE(
        n >= 1 && n <= engine.max_prefill_length(),
        "generate: prompt {} has {} tokens; it must have 1 to max_prefill_predict_length = {}", i, n,
        engine.max_prefill_length());
    TESSERA_CHECK_SHAPE(
        n < T, "generate: prompt {} has {} tokens, which leaves no room below max_target_length = {}", i, n,
        T);
  }
  GenerateStats local;
  GenerateStats& st = stats ? *stats : local;
  st = GenerateStats{};
  std::vector<Completion> out(prompts.size());
  std::vector<Sampler> samplers;
  samplers.reserve(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) samplers.emplace_back(o.seed + i);
  std::vector<float> logits(static_cast<size_t>(engine.max_slots() * V));
  std::deque<size_t> waiting;
  for (size_t i = 0; i < prompts.size(); ++i) waiting.push_back(i);
  std::vector<int> free_slots;
  for (int s = engine.max_slots() - 1; s >= 0; --s) free_slots.push_back(s);
  std::vector<Running> running;

  // Takes the token sampled for `r` (from `row`); returns true while the sequence goes on.
  auto advance = [&](Running& r, const float* row) {
    const int32_t t = samplers[r.request].sample(std::span(row, sampled), o.sampling);
    Completion& c = out[r.request];
    if (t == o.eos_id) {
      c.stop = StopReason::kEos;
      return false;
    }
    c.tokens.push_back(t);
    const auto total = static_cast<int64_t>(prompts[r.request].size() + c.tokens.size());
    const bool full =
        total >= T || (o.max_new_tokens > 0 && static_cast<int64_t>(c.tokens.size()) >= o.max_new_tokens);
    c.stop = StopReason::kLength;
    r.pending = t;
    return !full;
  };
  std::vector<int> slots;
  std::vector<int32_t> tokens;
  while (!waiting.empty() || !running.empty()) {
    while (!free_slots.empty() && !waiting.empty()) {
      Running r{free_slots.back(), waiting.front(), -1};
      free_slots.pop_back();
      waiting.pop_front();
      const auto t0 = Clock::now();
      engine.prefill(r.slot, prompts[r.request], std::span(logits.data(), static_cast<size_t>(V)));
      const bool go_on = advance(r, logits.data());
      st.prefill_seconds += since(t0);
      st.prefill_tokens += static_cast<int64_t>(prompts[r.request].size());
      if (go_on) {
        running.push_back(r);
      } else {
        engine.release(r.slot);
        free_slots.push_back(r.slot);
      }
    }
    if (running.empty()) continue;
    slots.clear();
    tokens.clear();
    for (const Running& r : running) {
      slots.push_back(r.slot);
      tokens.push_back(r.pending);
    }
    const auto t0 = Clock::now();
    engine.decode(slots, tokens, logits);
    std::vector<Running> still;
    for (size_t i = 0; i < running.size(); ++i) {
      if (advance(running[i], logits.data() + i * static_cast<size_t>(V))) {
        still.push_back(running[i]);
      } else {
        engine.release(running[i].slot);
        free_slots.push_back(running[i].slot);
      }
    }
    st.decode_seconds += since(t0);
    st.decode_tokens += static_cast<int64_t>(running.size());
    ++st.decode_steps;
    st.max_batch = std::max(st.max_batch, static_cast<int>(running.size()));
    running.swap(still);
  }
  return out;
}

}  // namespace tessera::infer
