// The OpenAI API's wire format for /v1/completions and /v1/chat/completions: request parsing and
// checking (nlohmann-json), the default chat template, and the JSON shapes of responses, stream
// chunks and errors. Pure functions of text: no sockets, no model (service.h joins them up).
//
// Fields read: model, prompt (a string, a list of one string, a list of token ids, or a list of
// one such list), messages (chat), max_tokens / max_completion_tokens, temperature (0 = greedy),
// top_p, top_k (an extension; 0 or -1 = off), seed, stream, stream_options.include_usage, stop (a
// string or up to 4), n (1 only).
// Fields accepted only at their neutral value (anything else is refused, never ignored):
// logprobs (false), top_logprobs (0), echo (false), best_of (1), suffix (empty), frequency_penalty
// and presence_penalty (0), logit_bias (empty), response_format ({"type": "text"}), tools (empty),
// tool_choice ("none"). Fields ignored because they do not change the output: user, store,
// metadata, service_tier, parallel_tool_calls. A null value means "not given". Any other field,
// or a field of the wrong type or range, is a 400 that names it.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::infer::server {

enum class Endpoint { kCompletions, kChatCompletions };

// An error answered to the client: {"error": {"message", "type", "param", "code"}}.
struct ApiError : std::runtime_error {
  ApiError(int status, std::string message, std::string param = {}, std::string code = {})
      : std::runtime_error(message), status(status), param(std::move(param)), code(std::move(code)) {}
  int status;         // 400, 404, 413, 503, ...
  std::string param;  // the offending field, or empty (null)
  std::string code;   // a machine-readable code, or empty (null)
};

// The JSON body of an error; `type` follows OpenAI: invalid_request_error for 4xx, server_error
// for 5xx.
std::string error_body(int status, std::string_view message, std::string_view param = {},
                       std::string_view code = {});
inline std::string error_body(const ApiError& e) {
  return error_body(e.status, e.what(), e.param, e.code);
}

struct ChatMessage {
  std::string role;  // system | developer | user | assistant
  std::string content;
};

struct CompletionRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;
  std::string prompt;                              // completions: the prompt text
  std::optional<std::vector<int32_t>> prompt_ids;  // completions: a prompt given as token ids
  std::vector<ChatMessage> messages;               // chat
  std::optional<int64_t> max_tokens;
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int64_t> top_k;  // 0 = off
  std::optional<int64_t> seed;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage: a last chunk with the token counts
  std::vector<std::string> stop;
};

// Deepest nesting of arrays and objects a request body may have (a chat request needs 4).
inline constexpr size_t kMaxJsonDepth = 32;

// Parses and checks a request body for `endpoint`. Throws ApiError(400) naming the field.
CompletionRequest parse_request(std::string_view body, Endpoint endpoint);

// Tessera's default chat template (a tokenizer's own Jinja template is not interpreted): one line
// per message, "System: ...", "User: ...", "Assistant: ..." (developer counts as System), then
// "Assistant:" for the reply to follow. Example: [{user, "Hi"}] -> "User: Hi\nAssistant:".
std::string render_chat(std::span<const ChatMessage> messages);

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
};

// The identity of one response, shared by all its stream chunks.
struct ResponseId {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string id;       // "cmpl-..." or "chatcmpl-..."
  int64_t created = 0;  // Unix seconds
  std::string model;
};

// A whole (non-streamed) response: "text_completion" or "chat.completion".
std::string completion_body(const ResponseId& r, std::string_view text, std::string_view finish_reason,
                            const Usage& usage);

// One server-sent event ("data: {...}\n\n") of a stream: "text_completion" or
// "chat.completion.chunk". A chat stream's first chunk carries the role (`first`); the last
// carries `finish_reason` (empty means null).
std::string stream_chunk(const ResponseId& r, std::string_view text, std::string_view finish_reason,
                         bool first);
// The usage event after the last chunk (stream_options.include_usage): empty choices, usage set.
std::string stream_usage(const ResponseId& r, const Usage& usage);
// An error inside a stream that has started: "data: {"error": ...}\n\n".
std::string stream_error(int status, std::string_view message);
inline constexpr std::string_view kStreamDone = "data: [DONE]\n\n";

}  // namespace tessera::infer::server
