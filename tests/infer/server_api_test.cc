// The OpenAI layer: request parsing (each field's type and range, refused features), the response
// and stream shapes, and the routes of Service over the fake engine (server_test_fakes.h) with a
// recording Responder: every 4xx the server gives, and whole and streamed answers.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "infer/server_test_fakes.h"
#include "tessera/infer/server/openai_api.h"
#include "tessera/infer/server/service.h"

namespace tessera::infer::server {
namespace {

using nlohmann::json;
using testing::FakeEngine;
using testing::FakeTokenizer;

// The ApiError that parsing `body` throws (status 0 when it parses).
ApiError parse_error(std::string_view body, Endpoint e = Endpoint::kCompletions) {
  try {
    parse_request(body, e);
  } catch (const ApiError& err) {
    return err;
  }
  return ApiError(0, "parsed");
}

// Hostile values: a number past a double's range and an empty prompt are the client's error (400),
// never the server's (500).
TEST(ServerApi, OutOfRangeNumbersAndEmptyPromptsAre400) {
  for (const char* body : {R"({"model": "m", "prompt": "x", "max_tokens": 1e400})",
                           R"({"model": "m", "prompt": "x", "temperature": -1e400})",
                           R"({"model": "m", "prompt": "x", "seed": 1e400})"}) {
    const ApiError e = parse_error(body);
    EXPECT_EQ(e.status, 400) << body << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find("not valid JSON"), std::string::npos) << e.what();
  }
  for (const char* body : {R"({"model": "m", "prompt": ""})", R"({"model": "m", "prompt": [""]})",
                           R"({"model": "m", "prompt": [[]]})"}) {
    const ApiError e = parse_error(body);
    EXPECT_EQ(e.status, 400) << body << ": " << e.what();
    EXPECT_EQ(e.param, "prompt") << body;
    EXPECT_NE(std::string(e.what()).find("'prompt' is empty"), std::string::npos) << e.what();
  }
}

TEST(ServerApi, ParsesACompletionRequest) {
  CompletionRequest r = parse_request(
      R"({"model": "m", "prompt": "hi", "max_tokens": 7, "temperature": 0.5, "top_p": 0.9, "top_k": 40,
          "seed": -3, "stream": true, "stream_options": {"include_usage": true}, "stop": ["a", "b"], "n": 1,
          "logprobs": null, "user": "u", "frequency_penalty": 0, "echo": false})",
      Endpoint::kCompletions);
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.prompt, "hi");
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_EQ(r.temperature, 0.5);
  EXPECT_EQ(r.top_p, 0.9);
  EXPECT_EQ(r.top_k, 40);
  EXPECT_EQ(r.seed, -3);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"a", "b"}));
  // The prompt's other forms: a list of one string, token ids, a list of one list of ids.
  EXPECT_EQ(parse_request(R"({"model": "m", "prompt": ["x"]})", Endpoint::kCompletions).prompt, "x");
  EXPECT_EQ(parse_request(R"({"model": "m", "prompt": [1, 2]})", Endpoint::kCompletions).prompt_ids,
            (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(parse_request(R"({"model": "m", "prompt": [[3]]})", Endpoint::kCompletions).prompt_ids,
            (std::vector<int32_t>{3}));
}

TEST(ServerApi, ParsesAChatRequestAndRendersTheDefaultTemplate) {
  CompletionRequest r = parse_request(
      R"({"model": "m", "messages": [{"role": "system", "content": "Be brief."},
          {"role": "user", "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}]}],
          "max_completion_tokens": 5})",
      Endpoint::kChatCompletions);
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.max_tokens, 5);
  EXPECT_EQ(render_chat(r.messages), "System: Be brief.\nUser: Hi there\nAssistant:");
}

TEST(ServerApi, RefusesBadFieldsNamingThem) {
  struct Case {
    const char* body;
    const char* param;  // "" for none
    const char* says;
  };
  const Case cases[] = {
      {R"({"model": "m", "prompt": "x",)", "", "not valid JSON"},
      {R"([1, 2])", "", "JSON object"},
      {R"({"prompt": "x"})", "model", "'model' is required"},
      {R"({"model": 3, "prompt": "x"})", "model", "must be a string"},
      {R"({"model": "m"})", "prompt", "'prompt' is required"},
      {R"({"model": "m", "prompt": 5})", "prompt", "must be a string"},
      {R"({"model": "m", "prompt": ["a", "b"]})", "prompt", "one prompt per request"},
      {R"({"model": "m", "prompt": [1, -2]})", "prompt", "token ids"},
      {R"({"model": "m", "prompt": "x", "temperature": "hot"})", "temperature", "a number from 0 to 2"},
      {R"({"model": "m", "prompt": "x", "temperature": 2.5})", "temperature", "a number from 0 to 2"},
      {R"({"model": "m", "prompt": "x", "top_p": 0})", "top_p", "(0, 1]"},
      {R"({"model": "m", "prompt": "x", "top_k": 1.5})", "top_k", "an integer"},
      {R"({"model": "m", "prompt": "x", "max_tokens": 0})", "max_tokens", "an integer >= 1"},
      {R"({"model": "m", "prompt": "x", "max_tokens": "10"})", "max_tokens", "an integer >= 1"},
      {R"({"model": "m", "prompt": "x", "seed": 1.5})", "seed", "an integer"},
      {R"({"model": "m", "prompt": "x", "stream": "yes"})", "stream", "true or false"},
      {R"({"model": "m", "prompt": "x", "stop": ["a", "b", "c", "d", "e"]})", "stop", "up to 4"},
      {R"({"model": "m", "prompt": "x", "stop": ""})", "stop", "non-empty"},
      {R"({"model": "m", "prompt": "x", "n": 2})", "n", "one choice per request"},
      {R"({"model": "m", "prompt": "x", "logprobs": 2})", "logprobs", "not in this build"},
      {R"({"model": "m", "prompt": "x", "echo": true})", "echo", "not in this build"},
      {R"({"model": "m", "prompt": "x", "presence_penalty": 0.5})", "presence_penalty", "not in this build"},
      {R"({"model": "m", "prompt": "x", "logit_bias": {"1": 5}})", "logit_bias", "not in this build"},
      {R"({"model": "m", "prompt": "x", "frobnicate": 1})", "frobnicate", "unknown field 'frobnicate'"},
      {R"({"model": "m", "prompt": "x", "messages": []})", "messages", "unknown field"},
      {R"({"model": "m", "prompt": "x", "stream_options": {"x": 1}})", "stream_options", "stream_options.x"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.body);
    ApiError e = parse_error(c.body);
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, c.param);
    EXPECT_NE(std::string(e.what()).find(c.says), std::string::npos) << e.what();
  }
  const Case chat[] = {
      {R"({"model": "m"})", "messages", "'messages' is required"},
      {R"({"model": "m", "messages": []})", "messages", "non-empty list"},
      {R"({"model": "m", "messages": [{"role": "tool", "content": "x"}]})", "messages[0].role", "one of"},
      {R"({"model": "m", "messages": [{"role": "user"}]})", "messages[0].content", "required"},
      {R"({"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
       "messages[0].content", "text"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "logprobs": true})", "logprobs",
       "not in this build"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": [{}]})", "tools",
       "not in this build"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 3,
           "max_completion_tokens": 4})",
       "max_completion_tokens", "disagree"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "prompt": "x"})", "prompt",
       "unknown field"},
  };
  for (const Case& c : chat) {
    SCOPED_TRACE(c.body);
    ApiError e = parse_error(c.body, Endpoint::kChatCompletions);
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, c.param);
    EXPECT_NE(std::string(e.what()).find(c.says), std::string::npos) << e.what();
  }
}

TEST(ServerApi, RefusesDeeplyNestedJsonBeforeParsingIt) {
  // A million levels would overflow the parser's stack; the depth is checked first.
  const std::string deep =
      R"({"model": "m", "prompt": )" + std::string(1'000'000, '[') + std::string(1'000'000, ']') + "}";
  ApiError e = parse_error(deep);
  EXPECT_EQ(e.status, 400);
  EXPECT_NE(std::string(e.what()).find("more than 32 deep"), std::string::npos) << e.what();
  // Brackets inside strings do not count; 32 levels are fine.
  EXPECT_EQ(parse_error(R"({"model": "m", "prompt": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\"[["})").status,
            0);
  const std::string ok =
      R"({"model": "m", "prompt": "x", "metadata": )" + std::string(31, '[') + std::string(31, ']') + "}";
  EXPECT_EQ(parse_error(ok).status, 0);
}

// A number beyond double's range is valid JSON syntax that nlohmann refuses with out_of_range, not
// parse_error: it was a 500 (found by fuzz/openai_fuzz.cc).
TEST(ServerApi, NumberOutOfRangeIsA400) {
  for (const char* body : {R"({"model": "m", "prompt": "x", "max_tokens": 1e400})",
                           R"({"model": "m", "prompt": "x", "temperature": -2e9999})"}) {
    ApiError e = parse_error(body);
    EXPECT_EQ(e.status, 400) << body;
    EXPECT_NE(std::string(e.what()).find("not valid JSON"), std::string::npos) << e.what();
  }
}

TEST(ServerApi, ErrorAndResponseShapes) {
  json e = json::parse(error_body(400, "bad", "temperature"));
  EXPECT_EQ(e, json::parse(R"({"error": {"message": "bad", "type": "invalid_request_error",
                                           "param": "temperature", "code": null}})"));
  EXPECT_EQ(json::parse(error_body(503, "busy"))["error"]["type"], "server_error");
  const ResponseId chat{Endpoint::kChatCompletions, "chatcmpl-1", 1700000000, "m"};
  json c = json::parse(completion_body(chat, "hé\xff", "stop", {3, 2}));
  EXPECT_EQ(c["object"], "chat.completion");
  EXPECT_EQ(c["choices"][0]["message"]["content"], "hé\xEF\xBF\xBD");  // invalid UTF-8 replaced
  EXPECT_EQ(c["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(c["usage"], json::parse(R"({"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5})"));
  const std::string first = stream_chunk(chat, "", "", true);
  ASSERT_TRUE(first.starts_with("data: ") && first.ends_with("\n\n"));
  json f = json::parse(first.substr(6));
  EXPECT_EQ(f["object"], "chat.completion.chunk");
  EXPECT_EQ(f["choices"][0]["delta"], json::parse(R"({"role": "assistant", "content": ""})"));
  EXPECT_TRUE(f["choices"][0]["finish_reason"].is_null());
  json last = json::parse(stream_chunk(chat, "", "length", false).substr(6));
  EXPECT_EQ(last["choices"][0]["delta"], json::object());
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  const ResponseId text{Endpoint::kCompletions, "cmpl-1", 1700000000, "m"};
  json t = json::parse(stream_chunk(text, "ab", "", false).substr(6));
  EXPECT_EQ(t["object"], "text_completion");
  EXPECT_EQ(t["choices"][0]["text"], "ab");
  json u = json::parse(stream_usage(text, {1, 2}).substr(6));
  EXPECT_EQ(u["choices"], json::array());
  EXPECT_EQ(u["usage"]["total_tokens"], 3);
}

// Records what a handler answers.
struct Recorder : Responder {
  int status = 0;
  std::string content_type, body, headers;
  bool streamed = false, finished = false;
  bool send(int s, std::string_view ct, std::string_view b, std::string_view h) override {
    status = s, content_type = ct, body = b, headers = h;
    return true;
  }
  bool start_stream(int s, std::string_view ct) override {
    status = s, content_type = ct, streamed = true;
    return true;
  }
  bool write(std::string_view d) override {
    body += d;
    return true;
  }
  bool finish() override { return finished = true; }
  bool client_gone() override { return false; }
  bool stopping() const override { return false; }
  json error() const { return json::parse(body)["error"]; }
};

struct ServiceFixture {
  explicit ServiceFixture(int max_queued = 8)
      : engine(2, /*target=*/40, /*prefill=*/16),
        scheduler(engine, tok, {.max_queued = max_queued, .eos_id = 0}) {
    ServiceOptions o;
    o.model_name = "fake";
    o.max_prefill_length = 16;
    o.max_target_length = 40;
    o.model_vocab = FakeEngine::kVocab;
    service = std::make_unique<Service>(scheduler, tok, o);
    scheduler.start();
  }
  Recorder call(std::string method, std::string path, std::string body = {}) {
    HttpRequest r;
    r.method = std::move(method);
    r.path = r.target = std::move(path);
    r.body = std::move(body);
    Recorder out;
    service->handle(r, out);
    return out;
  }
  FakeTokenizer tok;
  FakeEngine engine;
  Scheduler scheduler;
  std::unique_ptr<Service> service;
};

TEST(ServerService, AnswersACompletion) {
  ServiceFixture f;
  Recorder r = f.call("POST", "/v1/completions", R"({"model": "fake", "prompt": "abc", "max_tokens": 4})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.content_type, "application/json");
  json j = json::parse(r.body);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["model"], "fake");
  EXPECT_EQ(j["choices"][0]["text"], "defg");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"], json::parse(R"({"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7})"));
  // The default max_tokens of a completion is OpenAI's 16; "k" reaches 'z' first (EOS: "stop").
  j = json::parse(f.call("POST", "/v1/completions", R"({"model": "fake", "prompt": "k"})").body);
  EXPECT_EQ(j["choices"][0]["text"], "lmnopqrstuvwxyz");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
}

TEST(ServerService, AnswersAChatCompletion) {
  ServiceFixture f;
  // The template gives "User: uv\nAssistant:"; the fake tokenizer drops capitals, ':' and newlines,
  // so the prompt's last token is the 't' of "ssistant" and the fake model continues "uvw".
  Recorder r =
      f.call("POST", "/v1/chat/completions",
             R"({"model": "fake", "messages": [{"role": "user", "content": "uv"}], "max_tokens": 3})");
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"], json::parse(R"({"role": "assistant", "content": "uvw"})"));
}

TEST(ServerService, StreamsServerSentEvents) {
  ServiceFixture f;
  Recorder r = f.call("POST", "/v1/chat/completions",
                      R"({"model": "fake", "messages": [{"role": "user", "content": "q"}], "max_tokens": 5,
                          "stream": true, "stream_options": {"include_usage": true}})");
  EXPECT_EQ(r.status, 200);
  EXPECT_TRUE(r.streamed);
  EXPECT_TRUE(r.finished);
  EXPECT_EQ(r.content_type, "text/event-stream");
  std::vector<json> events;
  std::string text;
  size_t pos = 0;
  bool done = false;
  while (pos < r.body.size()) {
    const size_t end = r.body.find("\n\n", pos);
    ASSERT_NE(end, std::string::npos) << r.body;
    const std::string event = r.body.substr(pos, end - pos);
    pos = end + 2;
    ASSERT_TRUE(event.starts_with("data: ")) << event;
    ASSERT_FALSE(done) << "an event after [DONE]";
    if (event == "data: [DONE]") {
      done = true;
      continue;
    }
    events.push_back(json::parse(event.substr(6)));
  }
  ASSERT_TRUE(done);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.front()["choices"][0]["delta"]["role"], "assistant");
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    const json& e = events[i];
    EXPECT_EQ(e["object"], "chat.completion.chunk");
    EXPECT_EQ(e["id"], events[0]["id"]);
    if (i + 2 < events.size()) {
      EXPECT_TRUE(e["choices"][0]["finish_reason"].is_null());
    }
    text += e["choices"][0]["delta"].value("content", "");
  }
  EXPECT_EQ(text, "uvwxy");
  EXPECT_EQ(events[events.size() - 2]["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(events.back()["usage"]["completion_tokens"], 5);
}

TEST(ServerService, EachClientErrorHasItsStatus) {
  ServiceFixture f;
  Recorder r = f.call("POST", "/v1/completions",
                      R"({"model": "fake", "prompt": "abcdefghijklmnopq", "max_tokens": 1})");
  EXPECT_EQ(r.status, 400);
  std::string msg = r.error()["message"];
  EXPECT_NE(msg.find("17 tokens"), std::string::npos) << msg;  // both numbers are named
  EXPECT_NE(msg.find("limit of 16"), std::string::npos) << msg;
  EXPECT_EQ(r.error()["code"], "context_length_exceeded");

  r = f.call("POST", "/v1/completions", R"({"model": "fake", "prompt": "abc", "max_tokens": 38})");
  EXPECT_EQ(r.status, 400);
  msg = r.error()["message"];
  EXPECT_NE(msg.find("3 tokens + max_tokens 38"), std::string::npos) << msg;
  EXPECT_NE(msg.find("context of 40"), std::string::npos) << msg;
  EXPECT_EQ(r.error()["param"], "max_tokens");

  r = f.call("POST", "/v1/completions", R"({"model": "fake", "prompt": [40]})");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.error()["message"].get<std::string>().find("outside the vocabulary"), std::string::npos);

  r = f.call("POST", "/v1/completions", R"({"model": "fake", "prompt": "ABC"})");  // encodes to nothing
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.error()["message"], "the prompt is empty");

  r = f.call("POST", "/v1/completions", R"({"model": "gpt-4", "prompt": "a"})");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(r.error()["code"], "model_not_found");

  r = f.call("POST", "/v1/completions", "{not json");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.error()["type"], "invalid_request_error");

  r = f.call("GET", "/v1/completions");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.headers, "Allow: POST\r\n");

  r = f.call("POST", "/health");
  EXPECT_EQ(r.status, 405);

  r = f.call("GET", "/v2/everything");
  EXPECT_EQ(r.status, 404);
  EXPECT_NE(r.error()["message"].get<std::string>().find("/v2/everything"), std::string::npos);
}

TEST(ServerService, AFullQueueIs503) {
  ServiceFixture f(/*max_queued=*/0);
  Recorder r = f.call("POST", "/v1/completions", R"({"model": "fake", "prompt": "a"})");
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(r.error()["type"], "server_error");
}

TEST(ServerService, HealthAndModels) {
  ServiceFixture f;
  Recorder r = f.call("GET", "/health");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(json::parse(r.body)["status"], "ok");
  r = f.call("GET", "/v1/models");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(json::parse(r.body)["data"][0]["id"], "fake");
}

}  // namespace
}  // namespace tessera::infer::server
