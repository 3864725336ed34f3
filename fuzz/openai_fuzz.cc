// Fuzzes the OpenAI request parser: the first input byte chooses the endpoint (even: completions,
// odd: chat completions), the rest is the JSON body. Parsing must either give a request or throw
// ApiError with a 4xx status; a chat request's messages then go through the chat template.
#include <cstdlib>
#include <string_view>

#include "tessera/infer/server/openai_api.h"

using namespace tessera::infer::server;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const Endpoint endpoint = data[0] % 2 ? Endpoint::kChatCompletions : Endpoint::kCompletions;
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    CompletionRequest req = parse_request(body, endpoint);
    if (endpoint == Endpoint::kChatCompletions) (void)render_chat(req.messages);
  } catch (const ApiError& e) {
    if (e.status < 400 || e.status > 499) std::abort();
    (void)error_body(e);
  }
  return 0;
}
