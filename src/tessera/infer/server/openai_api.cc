// OpenAI request parsing and response shapes (openai_api.h).
#include "tessera/infer/server/openai_api.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>

namespace tessera::infer::server {
namespace {

using nlohmann::json;

// Invalid UTF-8 (a model may produce it) is replaced by U+FFFD rather than failing the dump.
std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// A value as the client wrote it, shortened, for messages.
std::string shown(const json& v) {
  std::string s = dump(v);
  return s.size() > 40 ? s.substr(0, 37) + "..." : s;
}

[[noreturn]] void bad_field(std::string_view key, std::string_view expected, const json& v) {
  throw ApiError(400, fmt::format("'{}' must be {}, not {}", key, expected, shown(v)), std::string(key));
}

// The field's value, or null when absent or null ("not given").
const json& field(const json& body, const char* key) {
  static const json kNull;
  auto it = body.find(key);
  return it == body.end() ? kNull : *it;
}

std::optional<int64_t> integer(const json& body, const char* key, int64_t lo, int64_t hi,
                               std::string_view expected) {
  const json& v = field(body, key);
  if (v.is_null()) return std::nullopt;
  if (!v.is_number_integer() ||
      (v.is_number_unsigned() &&
       v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())))
    bad_field(key, expected, v);
  const auto x = v.get<int64_t>();
  if (x < lo || x > hi) bad_field(key, expected, v);
  return x;
}

std::optional<double> number(const json& body, const char* key, double lo, double hi, bool open_lo,
                             std::string_view expected) {
  const json& v = field(body, key);
  if (v.is_null()) return std::nullopt;
  if (!v.is_number()) bad_field(key, expected, v);
  const auto x = v.get<double>();
  if (!(open_lo ? x > lo : x >= lo) || !(x <= hi)) bad_field(key, expected, v);
  return x;
}

std::optional<bool> boolean(const json& body, const char* key) {
  const json& v = field(body, key);
  if (v.is_null()) return std::nullopt;
  if (!v.is_boolean()) bad_field(key, "true or false", v);
  return v.get<bool>();
}

// A field Tessera accepts only at its neutral value.
void neutral_only(const json& body, const char* key, bool neutral, std::string_view what) {
  if (!field(body, key).is_null() && !neutral)
    throw ApiError(400, fmt::format("'{}' is not supported by this server ({})", key, what), key);
}

void check_neutral_fields(const json& body) {
  const json& logprobs = field(body, "logprobs");
  neutral_only(body, "logprobs", logprobs == false || logprobs == 0,
               "log-probabilities are not in this build");
  neutral_only(body, "top_logprobs", field(body, "top_logprobs") == 0,
               "log-probabilities are not in this build");
  neutral_only(body, "echo", field(body, "echo") == false, "echo is not in this build");
  neutral_only(body, "best_of", field(body, "best_of") == 1, "only best_of=1");
  const json& suffix = field(body, "suffix");
  neutral_only(body, "suffix", suffix == "", "insertion is not in this build");
  neutral_only(body, "frequency_penalty", field(body, "frequency_penalty") == 0,
               "penalties are not in this build");
  neutral_only(body, "presence_penalty", field(body, "presence_penalty") == 0,
               "penalties are not in this build");
  const json& bias = field(body, "logit_bias");
  neutral_only(body, "logit_bias", bias.is_object() && bias.empty(), "logit_bias is not in this build");
  const json& format = field(body, "response_format");
  neutral_only(body, "response_format",
               format.is_object() && format.value("type", "") == "text" && format.size() == 1,
               "only {\"type\": \"text\"}");
  const json& tools = field(body, "tools");
  neutral_only(body, "tools", tools.is_array() && tools.empty(), "tool calls are not in this build");
  neutral_only(body, "tool_choice", field(body, "tool_choice") == "none", "tool calls are not in this build");
}

bool known_field(std::string_view key, Endpoint endpoint) {
  static constexpr std::string_view kCommon[] = {"model",
                                                 "max_tokens",
                                                 "temperature",
                                                 "top_p",
                                                 "top_k",
                                                 "seed",
                                                 "stream",
                                                 "stream_options",
                                                 "stop",
                                                 "n",
                                                 "logprobs",
                                                 "frequency_penalty",
                                                 "presence_penalty",
                                                 "logit_bias",
                                                 "user",
                                                 "store",
                                                 "metadata",
                                                 "service_tier"};
  static constexpr std::string_view kCompletions[] = {"prompt", "echo", "best_of", "suffix"};
  static constexpr std::string_view kChat[] = {
      "messages", "max_completion_tokens", "top_logprobs",       "response_format",
      "tools",    "tool_choice",           "parallel_tool_calls"};
  for (std::string_view k : kCommon)
    if (k == key) return true;
  if (endpoint == Endpoint::kCompletions) {
    for (std::string_view k : kCompletions)
      if (k == key) return true;
  } else {
    for (std::string_view k : kChat)
      if (k == key) return true;
  }
  return false;
}

std::vector<int32_t> token_ids(const json& list) {
  std::vector<int32_t> ids;
  for (const json& t : list) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 ||
        t.get<int64_t>() > std::numeric_limits<int32_t>::max())
      bad_field("prompt", "a string, a list of one string, or a list of token ids (integers >= 0)", t);
    ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  return ids;
}

void parse_prompt(const json& body, CompletionRequest& r) {
  const json& p = field(body, "prompt");
  constexpr std::string_view kExpected = "a string, a list of one string, or a list of token ids";
  if (p.is_null()) throw ApiError(400, "'prompt' is required", "prompt");
  if (p.is_string()) {
    r.prompt = p.get<std::string>();
    return;
  }
  if (!p.is_array() || p.empty()) bad_field("prompt", kExpected, p);
  if (p[0].is_string() || p[0].is_array()) {
    if (p.size() > 1)
      throw ApiError(
          400, fmt::format("'prompt' holds {} prompts; this server takes one prompt per request", p.size()),
          "prompt");
    if (p[0].is_string())
      r.prompt = p[0].get<std::string>();
    else
      r.prompt_ids = token_ids(p[0]);
    return;
  }
  r.prompt_ids = token_ids(p);
}

std::string text_content(const json& content, size_t index) {
  const std::string key = fmt::format("messages[{}].content", index);
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) bad_field(key, "a string or a list of text parts", content);
  std::string text;
  for (const json& part : content) {
    if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
        !part["text"].is_string())
      bad_field(key, "a string or a list of {\"type\": \"text\", \"text\": ...} parts", part);
    text += part["text"].get<std::string>();
  }
  return text;
}

void parse_messages(const json& body, CompletionRequest& r) {
  const json& m = field(body, "messages");
  if (m.is_null()) throw ApiError(400, "'messages' is required", "messages");
  if (!m.is_array() || m.empty()) bad_field("messages", "a non-empty list of messages", m);
  for (size_t i = 0; i < m.size(); ++i) {
    const json& msg = m[i];
    const std::string key = fmt::format("messages[{}]", i);
    if (!msg.is_object()) bad_field(key, "an object with role and content", msg);
    const json& role = field(msg, "role");
    if (!role.is_string() ||
        (role != "system" && role != "developer" && role != "user" && role != "assistant"))
      bad_field(key + ".role", "one of system, developer, user, assistant", role);
    if (!msg.contains("content") || msg["content"].is_null())
      throw ApiError(400, fmt::format("'{}.content' is required", key), key + ".content");
    r.messages.push_back({role.get<std::string>(), text_content(msg["content"], i)});
  }
}

void parse_stop(const json& body, CompletionRequest& r) {
  const json& s = field(body, "stop");
  constexpr std::string_view kExpected = "a non-empty string or a list of up to 4 of them";
  if (s.is_null()) return;
  if (s.is_string()) {
    if (s.get<std::string>().empty()) bad_field("stop", kExpected, s);
    r.stop.push_back(s.get<std::string>());
    return;
  }
  if (!s.is_array() || s.size() > 4) bad_field("stop", kExpected, s);
  for (const json& x : s) {
    if (!x.is_string() || x.get<std::string>().empty()) bad_field("stop", kExpected, s);
    r.stop.push_back(x.get<std::string>());
  }
}

void parse_sampling(const json& body, CompletionRequest& r) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  r.max_tokens = integer(body, "max_tokens", 1, kMax, "an integer >= 1");
  if (r.endpoint == Endpoint::kChatCompletions) {
    if (auto m = integer(body, "max_completion_tokens", 1, kMax, "an integer >= 1")) {
      if (r.max_tokens && *r.max_tokens != *m)
        throw ApiError(400, "'max_tokens' and 'max_completion_tokens' disagree; give one",
                       "max_completion_tokens");
      r.max_tokens = m;
    }
  }
  r.temperature = number(body, "temperature", 0, 2, false, "a number from 0 to 2");
  r.top_p = number(body, "top_p", 0, 1, true, "a number in (0, 1]");
  r.top_k = integer(body, "top_k", -1, kMax, "an integer >= 0 (0 or -1: off)");
  if (r.top_k && *r.top_k < 0) r.top_k = 0;
  r.seed = integer(body, "seed", std::numeric_limits<int64_t>::min(), kMax, "an integer");
  if (auto n = integer(body, "n", std::numeric_limits<int64_t>::min(), kMax, "an integer"); n && *n != 1)
    throw ApiError(400, fmt::format("'n' is {}: this server returns one choice per request (n=1)", *n), "n");
  r.stream = boolean(body, "stream").value_or(false);
  const json& so = field(body, "stream_options");
  if (!so.is_null()) {
    if (!so.is_object()) bad_field("stream_options", "an object", so);
    for (auto it = so.begin(); it != so.end(); ++it)
      if (it.key() != "include_usage")
        throw ApiError(400, fmt::format("unknown field 'stream_options.{}'", it.key()), "stream_options");
    r.include_usage = boolean(so, "include_usage").value_or(false);
  }
}

// The deepest nesting of arrays and objects in `text` (strings skipped), stopping early past
// `limit`. nlohmann-json recurses per level when it builds and destroys values, so a body of a
// million '[' would overflow a connection thread's stack: such bodies are refused before parsing.
size_t nesting_depth(std::string_view text, size_t limit) {
  size_t depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size() && deepest <= limit; ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

}  // namespace

std::string error_body(int status, std::string_view message, std::string_view param, std::string_view code) {
  json e = {{"message", message},
            {"type", status >= 500 ? "server_error" : "invalid_request_error"},
            {"param", nullptr},
            {"code", nullptr}};
  if (!param.empty()) e["param"] = param;
  if (!code.empty()) e["code"] = code;
  return dump(json{{"error", e}});
}

CompletionRequest parse_request(std::string_view body, Endpoint endpoint) {
  if (nesting_depth(body, kMaxJsonDepth) > kMaxJsonDepth)
    throw ApiError(400,
                   fmt::format("the request body nests arrays and objects more than {} deep", kMaxJsonDepth));
  json j;
  try {
    j = json::parse(body);
  } catch (const json::exception& e) {
    throw ApiError(400, fmt::format("the request body is not valid JSON: {}", e.what()));
  }
  if (!j.is_object()) throw ApiError(400, "the request body must be a JSON object");
  for (auto it = j.begin(); it != j.end(); ++it)
    if (!known_field(it.key(), endpoint))
      throw ApiError(400, fmt::format("unknown field '{}'", it.key()), it.key());
  CompletionRequest r;
  r.endpoint = endpoint;
  const json& model = field(j, "model");
  if (model.is_null()) throw ApiError(400, "'model' is required", "model");
  if (!model.is_string()) bad_field("model", "a string", model);
  r.model = model.get<std::string>();
  if (endpoint == Endpoint::kCompletions)
    parse_prompt(j, r);
  else
    parse_messages(j, r);
  parse_sampling(j, r);
  parse_stop(j, r);
  check_neutral_fields(j);
  return r;
}

std::string render_chat(std::span<const ChatMessage> messages) {
  std::string out;
  for (const ChatMessage& m : messages) {
    const std::string_view role = m.role == "user" ? "User" : m.role == "assistant" ? "Assistant" : "System";
    fmt::format_to(std::back_inserter(out), "{}: {}\n", role, m.content);
  }
  out += "Assistant:";
  return out;
}

namespace {

json base(const ResponseId& r, bool chunk) {
  const bool chat = r.endpoint == Endpoint::kChatCompletions;
  return {{"id", r.id},
          {"object", chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion"},
          {"created", r.created},
          {"model", r.model}};
}

json finish(std::string_view reason) {
  return reason.empty() ? json(nullptr) : json(reason);
}

json usage_json(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

}  // namespace

std::string completion_body(const ResponseId& r, std::string_view text, std::string_view finish_reason,
                            const Usage& usage) {
  json j = base(r, false);
  json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", finish(finish_reason)}};
  if (r.endpoint == Endpoint::kChatCompletions)
    choice["message"] = {{"role", "assistant"}, {"content", text}};
  else
    choice["text"] = text;
  j["choices"] = json::array({choice});
  j["usage"] = usage_json(usage);
  return dump(j);
}

std::string stream_chunk(const ResponseId& r, std::string_view text, std::string_view finish_reason,
                         bool first) {
  json j = base(r, true);
  json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", finish(finish_reason)}};
  if (r.endpoint == Endpoint::kChatCompletions) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (first || !text.empty()) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  j["choices"] = json::array({choice});
  return "data: " + dump(j) + "\n\n";
}

std::string stream_usage(const ResponseId& r, const Usage& usage) {
  json j = base(r, true);
  j["choices"] = json::array();
  j["usage"] = usage_json(usage);
  return "data: " + dump(j) + "\n\n";
}

std::string stream_error(int status, std::string_view message) {
  return "data: " + error_body(status, message) + "\n\n";
}

}  // namespace tessera::infer::server
