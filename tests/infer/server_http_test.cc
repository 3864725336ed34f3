// The HTTP layer: the request parser fed whole, byte by byte and pipelined; each malformed or
// oversized request and its status; and the socket server on a free loopback port (keep-alive,
// chunked streaming, 413 before the body is read, 408 for a request that stalls, a 503 past the
// connection limit, and a prompt stop with idle connections open).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "tessera/infer/server/http.h"
#include "testing/socket_util.h"

namespace tessera::infer::server {
namespace {

using State = RequestParser::State;

constexpr std::string_view kPost =
    "POST /v1/completions?x=1 HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
    "Content-Length: 13\r\n\r\n{\"prompt\": 1}";

TEST(ServerHttp, ParsesARequestInOnePiece) {
  RequestParser p(1024);
  ASSERT_EQ(p.feed(kPost), State::kComplete);
  const HttpRequest& r = p.request();
  EXPECT_EQ(r.method, "POST");
  EXPECT_EQ(r.target, "/v1/completions?x=1");
  EXPECT_EQ(r.path, "/v1/completions");
  EXPECT_EQ(r.minor_version, 1);
  EXPECT_EQ(r.header("content-type"), "application/json");
  EXPECT_EQ(r.body, "{\"prompt\": 1}");
  EXPECT_TRUE(r.keep_alive());
}

TEST(ServerHttp, ParsesARequestSplitIntoSingleBytes) {
  RequestParser p(1024);
  for (size_t i = 0; i + 1 < kPost.size(); ++i)
    ASSERT_EQ(p.feed(kPost.substr(i, 1)), State::kIncomplete) << i;
  ASSERT_EQ(p.feed(kPost.substr(kPost.size() - 1)), State::kComplete);
  EXPECT_EQ(p.request().body, "{\"prompt\": 1}");
}

TEST(ServerHttp, KeepsPipelinedBytesForTheNextRequest) {
  RequestParser p(1024);
  const std::string two = std::string(kPost) + "GET /health HTTP/1.0\nConnection: keep-alive\n\n";
  ASSERT_EQ(p.feed(two), State::kComplete);
  EXPECT_EQ(p.request().method, "POST");
  p.reset();
  ASSERT_EQ(p.feed({}), State::kComplete);  // bare LF line ends are accepted
  EXPECT_EQ(p.request().path, "/health");
  EXPECT_EQ(p.request().minor_version, 0);
  EXPECT_TRUE(p.request().keep_alive());
  EXPECT_TRUE(p.request().body.empty());
}

TEST(ServerHttp, ConnectionHeaderDecidesKeepAlive) {
  RequestParser p(1024);
  ASSERT_EQ(p.feed("GET / HTTP/1.1\r\nConnection: Upgrade, Close\r\n\r\n"), State::kComplete);
  EXPECT_FALSE(p.request().keep_alive());
  RequestParser q(1024);
  ASSERT_EQ(q.feed("GET / HTTP/1.0\r\n\r\n"), State::kComplete);
  EXPECT_FALSE(q.request().keep_alive());
}

TEST(ServerHttp, SeesExpectContinueOnceTheHeadersAreIn) {
  RequestParser p(1024);
  ASSERT_EQ(p.feed("POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n"),
            State::kIncomplete);
  EXPECT_TRUE(p.headers_done());
  EXPECT_TRUE(p.expects_continue());
  EXPECT_EQ(p.feed("{}"), State::kComplete);
}

TEST(ServerHttp, RefusesMalformedRequestsWithTheirStatus) {
  struct Case {
    std::string bytes;
    int status;
  };
  const Case cases[] = {
      {"GARBAGE\r\n\r\n", 400},
      {"GET  /x HTTP/1.1\r\n\r\n", 400},  // two spaces
      {"GET x HTTP/1.1\r\n\r\n", 400},    // target not absolute
      {"G(T / HTTP/1.1\r\n\r\n", 400},
      {"GET / HTTP/1.1 extra\r\n\r\n", 400},
      {"GET / HTTX/1.1\r\n\r\n", 400},
      {"GET / HTTP/2.0\r\n\r\n", 505},
      {"GET / HTTP/1.1\r\nNo colon here\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nBad Name: x\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nA: b\r\n folded\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 501},
      {"POST / HTTP/1.1\r\nContent-Length: 1025\r\n\r\n", 413},
      {"GET / HTTP/1.1\r\nX: " + std::string(kMaxHeaderBytes, 'a') + "\r\n\r\n", 431},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.bytes.substr(0, 60));
    RequestParser p(1024);
    EXPECT_EQ(p.feed(c.bytes), State::kError);
    EXPECT_EQ(p.error_status(), c.status) << p.error_message();
    EXPECT_FALSE(p.error_message().empty());
  }
  // A bad request line is refused as soon as its line ends, before any header arrives.
  RequestParser p(1024);
  EXPECT_EQ(p.feed("NOT A REQUEST LINE\r\n"), State::kError);
  // Endless headers are cut off at the limit, without waiting for the blank line.
  RequestParser q(1024);
  EXPECT_EQ(q.feed("GET / HTTP/1.1\r\n" + std::string(kMaxHeaderBytes, 'a')), State::kError);
  EXPECT_EQ(q.error_status(), 431);
}

TEST(ServerHttp, FormatsAResponse) {
  EXPECT_EQ(format_response(404, "application/json", "{}", false, "Allow: GET\r\n"),
            "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: 2\r\n"
            "Connection: close\r\nAllow: GET\r\n\r\n{}");
}

// ---- over a socket ----

int connect_to(int port) {
  return testing::connect_loopback(port, 5);
}

void send_all(int fd, std::string_view s) {
  ASSERT_EQ(::send(fd, s.data(), s.size(), MSG_NOSIGNAL), ssize_t(s.size()));
}

// Reads until `done` holds for what was read, or the peer closes.
std::string read_until(int fd, const std::function<bool(const std::string&)>& done) {
  std::string got;
  testing::recv_until(fd, done, got);
  return got;
}
std::string read_to_close(int fd) {
  return read_until(fd, [](const std::string&) { return false; });
}

// Echoes the path and body; /stream answers three chunks.
void echo(const HttpRequest& r, Responder& out) {
  if (r.path == "/stream") {
    out.start_stream(200, "text/event-stream");
    for (const char* part : {"data: 1\n\n", "data: 2\n\n", "data: [DONE]\n\n"}) out.write(part);
    out.finish();
    return;
  }
  out.send(200, "text/plain", r.method + " " + r.path + " " + r.body);
}

TEST(ServerHttp, ServesKeepAliveAndChunkedStreams) {
  HttpServer server({.host = "127.0.0.1", .port = 0}, echo);
  server.start();
  ASSERT_GT(server.port(), 0);
  const int fd = connect_to(server.port());
  send_all(fd, "GET /a HTTP/1.1\r\nHost: x\r\n\r\n");
  std::string r = read_until(fd, [](const std::string& s) { return s.ends_with("GET /a "); });
  EXPECT_TRUE(r.starts_with("HTTP/1.1 200 OK\r\n")) << r;
  EXPECT_NE(r.find("Connection: keep-alive"), std::string::npos) << r;
  // The same connection takes a second request, sent in two pieces.
  send_all(fd, "POST /b HTTP/1.1\r\nContent-Length: 5\r\n\r\nhel");
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  send_all(fd, "lo");
  r = read_until(fd, [](const std::string& s) { return s.ends_with("hello"); });
  EXPECT_TRUE(r.ends_with("POST /b hello")) << r;
  send_all(fd, "GET /stream HTTP/1.1\r\nConnection: close\r\n\r\n");
  r = read_to_close(fd);
  EXPECT_NE(r.find("Transfer-Encoding: chunked\r\n"), std::string::npos) << r;
  EXPECT_TRUE(
      r.ends_with("\r\n\r\n9\r\ndata: 1\n\n\r\n9\r\ndata: 2\n\n\r\ne\r\ndata: [DONE]\n\n\r\n0\r\n\r\n"))
      << r;
  ::close(fd);
  server.stop();
}

TEST(ServerHttp, AnHttp10StreamEndsWithTheConnection) {
  HttpServer server({.host = "127.0.0.1", .port = 0}, echo);
  server.start();
  const int fd = connect_to(server.port());
  send_all(fd, "GET /stream HTTP/1.0\r\n\r\n");
  const std::string r = read_to_close(fd);
  EXPECT_EQ(r.find("chunked"), std::string::npos) << r;
  EXPECT_TRUE(r.ends_with("\r\n\r\ndata: 1\n\ndata: 2\n\ndata: [DONE]\n\n")) << r;
  ::close(fd);
}

TEST(ServerHttp, RefusesOversizeBodiesBeforeReadingThemAndStallsWith408) {
  HttpServer server({.host = "127.0.0.1", .port = 0, .max_body_bytes = 100, .timeout_seconds = 0.3}, echo);
  server.start();
  int fd = connect_to(server.port());
  send_all(fd, "POST /x HTTP/1.1\r\nContent-Length: 1000000\r\n\r\n");  // the body never comes
  std::string r = read_to_close(fd);
  EXPECT_TRUE(r.starts_with("HTTP/1.1 413 ")) << r;
  EXPECT_NE(r.find("\"error\""), std::string::npos) << r;
  ::close(fd);
  fd = connect_to(server.port());
  send_all(fd, "POST /x HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc");  // stalls
  r = read_to_close(fd);
  EXPECT_TRUE(r.starts_with("HTTP/1.1 408 ")) << r;
  ::close(fd);
  fd = connect_to(server.port());
  send_all(fd, "BAD\r\n");
  r = read_to_close(fd);
  EXPECT_TRUE(r.starts_with("HTTP/1.1 400 ")) << r;
  ::close(fd);
  // An idle connection that sends nothing is closed without a response.
  fd = connect_to(server.port());
  EXPECT_EQ(read_to_close(fd), "");
  ::close(fd);
}

// Past the limit a connection takes an idle one's place; only when every connection is being
// answered does a new one get a 503.
TEST(ServerHttp, ConnectionsPastTheLimitGet503WhenEveryOneIsBusy) {
  std::atomic<bool> release{false}, entered{false};
  HttpServer server({.host = "127.0.0.1", .port = 0, .max_connections = 1},
                    [&](const HttpRequest& r, Responder& out) {
                      entered = true;
                      while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(5));
                      out.send(200, "text/plain", r.path);
                    });
  server.start();
  const int first = connect_to(server.port());
  send_all(first, "GET /a HTTP/1.1\r\n\r\n");
  while (!entered) std::this_thread::sleep_for(std::chrono::milliseconds(5));  // it is being served
  const int second = connect_to(server.port());
  const std::string r = read_to_close(second);
  EXPECT_TRUE(r.starts_with("HTTP/1.1 503 ")) << r;
  release = true;
  EXPECT_TRUE(read_until(first, [](const std::string& s) { return s.ends_with("/a"); }).ends_with("/a"));
  ::close(second);
  ::close(first);
}

TEST(ServerHttp, StopClosesIdleConnectionsPromptly) {
  HttpServer server({.host = "127.0.0.1", .port = 0, .timeout_seconds = 60}, echo);
  server.start();
  const int fd = connect_to(server.port());
  send_all(fd, "GET /a HTTP/1.1\r\n\r\n");
  read_until(fd, [](const std::string& s) { return s.ends_with("GET /a "); });
  const auto t0 = std::chrono::steady_clock::now();
  server.stop();  // the connection is idle in keep-alive: it must not hold stop() for 60 s
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  EXPECT_EQ(read_to_close(fd), "");
  ::close(fd);
}

// A client that closes its sending side once the request is out (shutdown(SHUT_WR), as `nc -N`
// and some proxies do) still reads the whole answer, also when the handler takes a while and checks
// client_gone() meanwhile.
TEST(ServerHttp, AClientThatHalfClosesAfterItsRequestGetsTheAnswer) {
  HttpServer server({.host = "127.0.0.1", .port = 0}, [](const HttpRequest& r, Responder& out) {
    for (int i = 0; i < 5; ++i) {
      if (out.client_gone()) return;  // would leave no response: a 500 before the fix
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    out.send(200, "text/plain", "answer to " + r.body);
  });
  server.start();
  const int fd = connect_to(server.port());
  send_all(fd, "POST /x HTTP/1.1\r\nContent-Length: 2\r\n\r\nhi");
  ASSERT_EQ(::shutdown(fd, SHUT_WR), 0);
  const std::string r = read_to_close(fd);
  EXPECT_TRUE(r.starts_with("HTTP/1.1 200 OK\r\n")) << r;
  EXPECT_TRUE(r.ends_with("answer to hi")) << r;
  ::close(fd);
}

// Many idle connections (opened and left silent, far more than max_connections) must not lock out a
// client that sends a request: each new connection takes the place of the one idle longest.
TEST(ServerHttp, IdleConnectionsDoNotLockOutAClientWithARequest) {
  HttpServer server({.host = "127.0.0.1", .port = 0, .timeout_seconds = 60, .max_connections = 16}, echo);
  server.start();
  std::vector<int> idle;
  for (int i = 0; i < 200; ++i) idle.push_back(connect_to(server.port()));
  const auto t0 = std::chrono::steady_clock::now();
  const int fd = connect_to(server.port());
  send_all(fd, "GET /a HTTP/1.1\r\nConnection: close\r\n\r\n");
  const std::string r = read_to_close(fd);
  EXPECT_TRUE(r.starts_with("HTTP/1.1 200 OK\r\n")) << r;
  EXPECT_TRUE(r.ends_with("GET /a ")) << r;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));  // not the 60 s idle limit
  ::close(fd);
  for (int c : idle) ::close(c);
  server.stop();
}

TEST(ServerHttp, AnAddressInUseIsAClearError) {
  HttpServer a({.host = "127.0.0.1", .port = 0}, echo);
  a.start();
  HttpServer b({.host = "127.0.0.1", .port = a.port()}, echo);
  try {
    b.start();
    FAIL() << "two servers on one port";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("cannot listen on 127.0.0.1:" + std::to_string(a.port())),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tessera::infer::server
