// Continuous batching: one thread drives the Engine for every request in flight.
//
// Each step of the loop:
//   1. admit: while a slot is free and a request waits, prefill its prompt into the slot and
//      sample its first token from the prefill logits;
//   2. decode: one Engine::decode() over every active slot (its last sampled token in, next-token
//      logits out), then each slot samples its next token with its own Sampler.
// A request that arrives while others decode joins the batch at the next step; one that ends
// (EOS, a stop string, max_tokens, the end of the context, or its client gone) frees its slot at
// once. A long prompt's prefill runs between two decode steps and delays the others by that
// much (there is no chunked prefill).
//
// Text: tokens become text incrementally (the difference between decoding the recent ids with and
// without the newest one, as Hugging Face's text-generation-inference does), holding back a
// trailing incomplete UTF-8 character; text that might be the start of a stop string is held
// until it is known not to be. The text a client receives never contains a stop string, nor the
// EOS token. Sampling is restricted to the ids below SchedulerOptions::sample_vocab, so a model
// whose vocabulary is padded past its tokenizer's never produces an id the tokenizer cannot read.
//
// Threads: submit(), RequestState and stats() are safe from any thread; step() belongs to the one
// thread that drives the engine (the thread start() launches, or a test that calls it directly).
// Nothing is allocated per decode step except the requests' own text.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tessera/data/tokenizer.h"
#include "tessera/infer/engine.h"
#include "tessera/infer/sampling.h"

namespace tessera::infer::server {

struct GenerationRequest {
  std::vector<int32_t> prompt;    // 1 <= size <= engine.max_prefill_length()
  int64_t max_tokens = 16;        // >= 1; prompt + max_tokens <= engine.max_target_length()
  SamplingParams sampling;        // validated by the caller
  uint64_t seed = 0;              // the request's Sampler seed
  std::vector<std::string> stop;  // the text ends before the first of these (each non-empty)
};

enum class FinishReason {
  kNone,       // still running
  kStop,       // EOS or a stop string
  kLength,     // max_tokens, or the slot's context is full
  kCancelled,  // the client went away, or the server is shutting down
  kError,      // the engine failed (error() says how)
};

// A request in flight, shared by the scheduler (which writes text into it) and the connection
// that waits for it. Thread-safe.
class RequestState {
 public:
  explicit RequestState(int64_t prompt_tokens) : prompt_tokens_(prompt_tokens) {}

  // Waits up to `timeout` for new text or the end; appends the new text to `text`. Returns true
  // once the request has finished and all its text has been taken.
  bool wait(std::string& text, std::chrono::milliseconds timeout);
  // Asks the scheduler to stop this request and free its slot (the client is gone).
  void cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }

  // Valid once wait() returned true.
  FinishReason finish_reason() const;
  std::string error() const;
  int64_t prompt_tokens() const { return prompt_tokens_; }
  int64_t completion_tokens() const;  // sampled tokens, the EOS included

 private:
  friend class Scheduler;
  void push(std::string_view text);
  void finish(FinishReason reason, int64_t completion_tokens, std::string error = {});

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::string text_;  // produced, not yet taken
  bool finished_ = false;
  FinishReason reason_ = FinishReason::kNone;
  std::string error_;
  const int64_t prompt_tokens_;
  int64_t completion_tokens_ = 0;
  std::atomic<bool> cancelled_{false};
};

struct SchedulerOptions {
  int max_queued = 16;       // requests waiting for a slot; more are refused (the server's 503)
  int32_t eos_id = -1;       // ends a generation and is not part of its text; -1: none
  int64_t sample_vocab = 0;  // ids are sampled from [0, sample_vocab); 0: the model's vocabulary
};

struct SchedulerStats {
  int64_t requests_finished = 0;
  int64_t tokens_generated = 0;
  int64_t decode_steps = 0;
  int64_t max_decode_batch = 0;  // the largest decode() batch so far
  int64_t active = 0;            // requests holding a slot
  int64_t queued = 0;            // requests waiting for one
};

class Scheduler {
 public:
  // `engine` and `tokenizer` must outlive the scheduler.
  Scheduler(Engine& engine, const data::Tokenizer& tokenizer, SchedulerOptions options);
  ~Scheduler();  // stop()
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a request. Returns null, with the reason in `refused`, when the queue is full or the
  // scheduler is stopping. Throws kShape for a request outside the engine's limits (callers
  // check them first and answer 400).
  std::shared_ptr<RequestState> submit(GenerationRequest request, std::string* refused = nullptr);

  // Launches the scheduler thread, which runs step() while there is work and sleeps otherwise.
  void start();
  // Cancels every queued and running request (they finish as kCancelled at the next step).
  void cancel_all();
  // Refuses new requests, cancels the rest, and joins the thread.
  void stop();

  // One iteration (admit, then one decode over the active slots); false when there was nothing
  // to do. Called by the thread start() launches, or directly by a test that did not start it.
  bool step();

  SchedulerStats stats() const;

 private:
  struct Slot;
  void run();
  void admit();
  void decode_active();
  // Samples the next token of `slot` from its logits row (vocab_ floats) and handles it.
  void sample_next(int slot, std::span<const float> logits);
  // Handles a freshly sampled token; false when the request has finished (slot released).
  bool on_token(int slot, int32_t token);
  // Finishes the request in `slot` (delivering held-back text first) and frees the slot.
  void end(int slot, FinishReason reason, std::string error = {});
  // The text that ids added since the last call; with `final`, whatever is left.
  std::string new_text(Slot& s, bool final);
  // Delivers `text` up to any stop string (true when one was found), holding back a tail that
  // may begin one unless `final`.
  bool emit(Slot& s, std::string_view text, bool final);

  Engine& engine_;
  const data::Tokenizer& tokenizer_;
  SchedulerOptions options_;
  int64_t vocab_;         // the engine's logits row length
  int64_t sample_vocab_;  // ids sampled from [0, sample_vocab_)

  // Scheduler-thread state.
  std::vector<std::unique_ptr<Slot>> slots_;  // [max_slots]; null when free
  std::vector<float> logits_;                 // [max_slots, vocab_]
  std::vector<int> batch_slots_;              // reserved to max_slots
  std::vector<int32_t> batch_tokens_;

  // Shared state.
  mutable std::mutex mu_;
  std::condition_variable work_;
  std::deque<std::pair<GenerationRequest, std::shared_ptr<RequestState>>> queue_;
  bool stopping_ = false;
  std::atomic<bool> cancel_all_{false};
  std::atomic<int64_t> requests_finished_{0}, tokens_generated_{0}, decode_steps_{0}, max_decode_batch_{0},
      active_{0};
  std::thread thread_;
};

// Whether `text` ends inside a UTF-8 character (or with U+FFFD, a decoder's stand-in for one).
bool ends_with_incomplete_utf8(std::string_view text);

}  // namespace tessera::infer::server
