// Fuzzes the HTTP/1.1 request parser. The first input byte seeds how the rest is cut into the
// pieces fed one after another (a request may arrive in any split); after each complete request the
// parser is reset() and goes on with the bytes behind it, as a keep-alive connection does. The
// parser must end every feed in a state, never throw, and give an error status in 4xx/5xx.
#include <cstdlib>
#include <string_view>

#include "tessera/infer/server/http.h"

using tessera::infer::server::RequestParser;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  unsigned step = data[0] % 16 + 1;  // piece length; 16 means the rest at once
  std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  RequestParser parser(/*max_body_bytes=*/4096);
  int requests = 0;
  while (!rest.empty() && requests < 64) {
    const size_t n = step == 16 ? rest.size() : std::min<size_t>(step, rest.size());
    RequestParser::State s = parser.feed(rest.substr(0, n));
    rest.remove_prefix(n);
    while (s == RequestParser::State::kComplete && requests < 64) {
      const auto& req = parser.request();
      (void)req.keep_alive();
      (void)req.header("content-type");
      ++requests;
      parser.reset();
      s = parser.feed({});
    }
    if (s == RequestParser::State::kError) {
      if (parser.error_status() < 400 || parser.error_status() > 599) std::abort();
      break;
    }
  }
  return 0;
}
