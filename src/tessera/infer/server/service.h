// The routes of `tessera serve`: OpenAI's completions and chat completions over the scheduler,
// plus /health and /v1/models. One Service answers every connection (handle() is thread-safe);
// it turns a request into prompt ids, checks them against the engine's limits, queues a
// GenerationRequest, and answers as one JSON body or as server-sent events while it generates.
//
//   GET  /health               {"status": "ok", slots, active, queued, counters}
//   GET  /v1/models            the one model served
//   POST /v1/completions       prompt -> text
//   POST /v1/chat/completions  messages (default chat template, openai_api.h) -> assistant text
// Statuses: 400 a bad request (the message names the field, or both numbers of a limit), 404 an
// unknown path or model, 405 a known path with the wrong method, 503 when the queue is full or the
// server is shutting down, 500 when the engine fails. The HTTP layer adds 408, 413, 431, 501.
//
// The prompt: a text prompt is encoded with the tokenizer and, when add_bos is set and the
// tokenizer has a BOS id, starts with it; a prompt of token ids is used as given. Defaults when a
// request leaves them out: max_tokens 16 (completions, OpenAI's) or the rest of the context
// (chat); temperature, top_p and top_k from the config's decode_sampling_* keys; seed
// decode_sampling_seed + n for the n-th request without one.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "tessera/data/tokenizer.h"
#include "tessera/infer/server/http.h"
#include "tessera/infer/server/openai_api.h"
#include "tessera/infer/server/scheduler.h"

namespace tessera::infer::server {

struct ServiceOptions {
  std::string model_name;          // the id clients name in "model"
  int64_t max_prefill_length = 0;  // the engine's limits (prompt; prompt + generated)
  int64_t max_target_length = 0;
  int64_t model_vocab = 0;  // ids a token-id prompt may hold: below min(model, tokenizer)
  bool add_bos = true;
  // Sampling defaults (the config's decode_sampling_*): temperature 0 means greedy.
  double temperature = 0;
  double top_p = 1;
  int64_t top_k = 0;
  // A request without a seed draws with seed_base + n, n counting such requests from 0.
  uint64_t seed_base = 0;
  // One line per finished request ("POST /v1/completions 200 ..."); may be empty.
  std::function<void(std::string_view)> log;
};

class Service {
 public:
  // `scheduler` and `tokenizer` must outlive the service.
  Service(Scheduler& scheduler, const data::Tokenizer& tokenizer, ServiceOptions options);

  void handle(const HttpRequest& request, Responder& out);

  // A generation turned into the scheduler's terms; throws ApiError for what the client must fix.
  // (Public for tests.)
  GenerationRequest prepare(const CompletionRequest& request);

 private:
  void generate(const HttpRequest& http, Endpoint endpoint, Responder& out);
  void answer_whole(const CompletionRequest& request, RequestState& state, const ResponseId& id,
                    Responder& out);
  void answer_stream(const CompletionRequest& request, RequestState& state, const ResponseId& id,
                     Responder& out);
  void health(Responder& out);
  void models(Responder& out);

  Scheduler& scheduler_;
  const data::Tokenizer& tokenizer_;
  ServiceOptions options_;
  const int64_t created_;                  // Unix seconds at start: the model's "created"
  std::atomic<uint64_t> counter_{0};       // request ids
  std::atomic<uint64_t> seed_counter_{0};  // requests without a seed
};

// The finish_reason OpenAI clients expect: "stop" or "length" (empty for the others).
std::string_view finish_reason_name(FinishReason reason);

}  // namespace tessera::infer::server
