// The server's routes (service.h).
#include "tessera/infer/server/service.h"

#include <fmt/format.h>

#include <ctime>
#include <nlohmann/json.hpp>

#include "tessera/core/error.h"
#include "tessera/infer/sampling.h"

namespace tessera::infer::server {
namespace {

using Clock = std::chrono::steady_clock;

// How often a waiting connection checks that its client is still there.
constexpr std::chrono::milliseconds kPollInterval{50};

constexpr std::string_view kJson = "application/json";

void send_error(Responder& out, const ApiError& e, std::string_view extra_headers = {}) {
  out.send(e.status, kJson, error_body(e), extra_headers);
}

// For the log: every reason, by name.
std::string_view reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kError:
      return "error";
    default:
      return "running";
  }
}

}  // namespace

std::string_view finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    default:
      return "";
  }
}

Service::Service(Scheduler& scheduler, const data::Tokenizer& tokenizer, ServiceOptions options)
    : scheduler_(scheduler),
      tokenizer_(tokenizer),
      options_(std::move(options)),
      created_(static_cast<int64_t>(std::time(nullptr))) {}

void Service::handle(const HttpRequest& request, Responder& out) {
  struct Route {
    std::string_view path, method;
  };
  static constexpr Route kRoutes[] = {{"/health", "GET"},
                                      {"/v1/models", "GET"},
                                      {"/v1/completions", "POST"},
                                      {"/v1/chat/completions", "POST"}};
  for (const Route& r : kRoutes) {
    if (request.path != r.path) continue;
    if (request.method != r.method)
      return send_error(out,
                        ApiError(405, fmt::format("{} takes {}, not {}", r.path, r.method, request.method)),
                        fmt::format("Allow: {}\r\n", r.method));
    if (r.path == "/health") return health(out);
    if (r.path == "/v1/models") return models(out);
    return generate(request,
                    r.path == "/v1/completions" ? Endpoint::kCompletions : Endpoint::kChatCompletions, out);
  }
  send_error(out, ApiError(404, fmt::format("no route for {} {}; this server has /v1/completions, "
                                            "/v1/chat/completions, /v1/models and /health",
                                            request.method, request.path)));
}

void Service::health(Responder& out) {
  const SchedulerStats s = scheduler_.stats();
  nlohmann::json j = {{"status", "ok"},
                      {"model", options_.model_name},
                      {"active", s.active},
                      {"queued", s.queued},
                      {"requests_finished", s.requests_finished},
                      {"tokens_generated", s.tokens_generated},
                      {"decode_steps", s.decode_steps},
                      {"max_decode_batch", s.max_decode_batch}};
  out.send(200, kJson, j.dump());
}

void Service::models(Responder& out) {
  nlohmann::json model = {
      {"id", options_.model_name}, {"object", "model"}, {"created", created_}, {"owned_by", "tessera"}};
  out.send(200, kJson, nlohmann::json{{"object", "list"}, {"data", nlohmann::json::array({model})}}.dump());
}

GenerationRequest Service::prepare(const CompletionRequest& request) {
  if (request.model != options_.model_name)
    throw ApiError(404,
                   fmt::format("the model '{}' does not exist; this server serves '{}'", request.model,
                               options_.model_name),
                   "model", "model_not_found");
  GenerationRequest g;
  const bool chat = request.endpoint == Endpoint::kChatCompletions;
  const char* prompt_field = chat ? "messages" : "prompt";
  if (request.prompt_ids) {
    g.prompt = *request.prompt_ids;
    const int64_t limit = std::min(options_.model_vocab, tokenizer_.vocab_size());
    for (int32_t id : g.prompt)
      if (id >= limit)
        throw ApiError(400, fmt::format("prompt token id {} is outside the vocabulary [0, {})", id, limit),
                       "prompt");
  } else {
    if (options_.add_bos && tokenizer_.bos_id() >= 0) g.prompt.push_back(tokenizer_.bos_id());
    const std::vector<int32_t> ids = tokenizer_.encode(chat ? render_chat(request.messages) : request.prompt);
    g.prompt.insert(g.prompt.end(), ids.begin(), ids.end());
  }
  const auto p = static_cast<int64_t>(g.prompt.size());
  const int64_t context = options_.max_target_length;
  if (p == 0) throw ApiError(400, "the prompt is empty", prompt_field);
  if (p > options_.max_prefill_length)
    throw ApiError(400,
                   fmt::format("the prompt has {} tokens, more than this server's prompt limit of {} "
                               "(max_prefill_predict_length)",
                               p, options_.max_prefill_length),
                   prompt_field, "context_length_exceeded");
  if (request.max_tokens) {
    g.max_tokens = *request.max_tokens;
    if (g.max_tokens > context - p)
      throw ApiError(400,
                     fmt::format("the prompt's {} tokens + max_tokens {} exceed the context of {} tokens "
                                 "(max_target_length); max_tokens may be at most {}",
                                 p, g.max_tokens, context, context - p),
                     chat ? "max_completion_tokens" : "max_tokens", "context_length_exceeded");
  } else {
    if (p >= context)
      throw ApiError(
          400,
          fmt::format("the prompt's {} tokens fill the context of {} tokens (max_target_length)", p, context),
          prompt_field, "context_length_exceeded");
    g.max_tokens = chat ? context - p : std::min<int64_t>(16, context - p);
  }
  // Sampling: temperature 0 is greedy; otherwise top-k and top-p pick the strategy.
  const double t = request.temperature.value_or(options_.temperature);
  const double top_p = request.top_p.value_or(options_.top_p);
  const int64_t top_k = request.top_k.value_or(options_.top_k);
  if (t > 0) {
    g.sampling.temperature = t;
    g.sampling.nucleus_p = top_p;
    g.sampling.top_k = top_k;
    g.sampling.strategy =
        top_k > 0 ? (top_p < 1 ? "composite" : "topk") : (top_p < 1 ? "nucleus" : "weighted");
  }
  try {
    validate(g.sampling);
  } catch (const Error& e) {
    throw ApiError(400, e.what());
  }
  g.seed =
      request.seed ? static_cast<uint64_t>(*request.seed) : options_.seed_base + seed_counter_.fetch_add(1);
  g.stop = request.stop;
  return g;
}

void Service::generate(const HttpRequest& http, Endpoint endpoint, Responder& out) {
  const Clock::time_point start = Clock::now();
  CompletionRequest request;
  GenerationRequest g;
  try {
    request = parse_request(http.body, endpoint);
    g = prepare(request);
  } catch (const ApiError& e) {
    return send_error(out, e);
  }
  std::string refused;
  std::shared_ptr<RequestState> state = scheduler_.submit(std::move(g), &refused);
  if (!state) return send_error(out, ApiError(503, refused));
  const bool chat = endpoint == Endpoint::kChatCompletions;
  const ResponseId id{endpoint,
                      fmt::format("{}-{:x}{:06x}", chat ? "chatcmpl" : "cmpl", created_, counter_++),
                      static_cast<int64_t>(std::time(nullptr)), options_.model_name};
  if (request.stream)
    answer_stream(request, *state, id, out);
  else
    answer_whole(request, *state, id, out);
  if (options_.log) {
    // A request whose client left is finished by the scheduler at its next step: wait for that
    // (briefly) so that the line tells how far it got.
    std::string rest;
    for (int i = 0; i < 40 && !state->wait(rest, kPollInterval); ++i) {
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    const FinishReason reason = state->finish_reason();
    options_.log(fmt::format("{} {}{} prompt={} completion={} finish={}{} {:.2f} s{}", http.method, http.path,
                             request.stream ? " (stream)" : "", state->prompt_tokens(),
                             state->completion_tokens(), reason_name(reason),
                             state->cancelled() ? " (client gone)" : "", seconds,
                             reason == FinishReason::kError ? ": " + state->error() : std::string()));
  }
}

void Service::answer_whole(const CompletionRequest& request, RequestState& state, const ResponseId& id,
                           Responder& out) {
  std::string text;
  while (!state.wait(text, kPollInterval)) {
    if (out.client_gone()) {
      state.cancel();
      return;
    }
  }
  const FinishReason reason = state.finish_reason();
  if (reason == FinishReason::kError)
    return send_error(out, ApiError(500, "generation failed: " + state.error()));
  if (reason == FinishReason::kCancelled) return send_error(out, ApiError(503, state.error()));
  out.send(200, kJson,
           completion_body(id, text, finish_reason_name(reason),
                           {state.prompt_tokens(), state.completion_tokens()}));
}

void Service::answer_stream(const CompletionRequest& request, RequestState& state, const ResponseId& id,
                            Responder& out) {
  const bool chat = request.endpoint == Endpoint::kChatCompletions;
  if (!out.start_stream(200, "text/event-stream") || (chat && !out.write(stream_chunk(id, "", "", true)))) {
    state.cancel();
    return;
  }
  std::string text;
  for (bool finished = false; !finished;) {
    finished = state.wait(text, kPollInterval);
    const bool gone =
        text.empty() ? !finished && out.client_gone() : !out.write(stream_chunk(id, text, "", false));
    if (gone) {
      state.cancel();
      return;
    }
    text.clear();
  }
  const FinishReason reason = state.finish_reason();
  if (reason == FinishReason::kError)
    out.write(stream_error(500, "generation failed: " + state.error()));
  else if (reason == FinishReason::kCancelled)
    out.write(stream_error(503, state.error()));
  else
    out.write(stream_chunk(id, "", finish_reason_name(reason), false));
  if (request.include_usage) out.write(stream_usage(id, {state.prompt_tokens(), state.completion_tokens()}));
  out.write(kStreamDone);
  out.finish();
}

}  // namespace tessera::infer::server
