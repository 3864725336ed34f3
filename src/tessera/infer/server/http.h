// A small HTTP/1.1 server on POSIX sockets, enough for an OpenAI-compatible API on a trusted
// network: a request line, headers, and a Content-Length body; responses with a Content-Length,
// or streamed with chunked transfer encoding (server-sent events ride on that); keep-alive.
//
// Threads: one accept thread (poll() on the listening socket and a wake-up pipe) and one thread
// per connection, which parses requests and calls the handler. These threads only do I/O and wait;
// compute happens elsewhere (the server's scheduler thread). At max_connections, a new connection
// takes the place of the one that has waited longest for a request (idle in keep-alive, or slow to
// send one): idle clients, however many, cannot lock out a client that sends a request. Only when
// every connection is being answered does a new one get a 503.
//
// A client that closes its sending side after its request (shutdown(SHUT_WR)) still gets the
// answer: the end of its stream only means no further requests come. A client that is gone (a
// reset, or both sides closed) is noticed when a write fails or poll() reports the hang-up.
//
// Limits, each answered with a status and a JSON error body before the connection closes:
//   400 malformed request line or header, 408 a request not complete within timeout_seconds,
//   413 a body over max_body_bytes (seen from Content-Length, before the body is read),
//   431 a header section over kMaxHeaderBytes, 501 a request body with Transfer-Encoding,
//   505 an HTTP version other than 1.0 or 1.1.
// Left out: TLS, HTTP/2, chunked request bodies, multipart, compression.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace tessera::infer::server {

inline constexpr size_t kMaxHeaderBytes = 16 * 1024;  // request line + headers
inline constexpr int kMaxConnections = 256;           // open connections served at once

struct HttpRequest {
  std::string method;                                        // "GET", "POST", ...
  std::string target;                                        // as sent: "/v1/completions?x=1"
  std::string path;                                          // target without the query: "/v1/completions"
  int minor_version = 1;                                     // HTTP/1.<minor_version>
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased, values trimmed
  std::string body;

  // The first header called `name` (lower case), if any.
  std::optional<std::string_view> header(std::string_view name) const;
  // Whether the connection stays open after the response (HTTP/1.1 unless "Connection: close";
  // HTTP/1.0 only with "Connection: keep-alive").
  bool keep_alive() const;
};

// Incremental request parser: feed() the bytes as they arrive (any split), until it says
// kComplete or kError. Bytes past the end of a request stay buffered for the next one (reset()).
class RequestParser {
 public:
  enum class State { kIncomplete, kComplete, kError };

  explicit RequestParser(size_t max_body_bytes) : max_body_bytes_(max_body_bytes) {}

  State feed(std::string_view bytes);
  State state() const { return state_; }
  // True once the header section is parsed (the body may still be arriving).
  bool headers_done() const { return headers_done_; }
  // Whether the client waits for "100 Continue" before sending the body.
  bool expects_continue() const;

  // The parsed request (valid when kComplete; headers also valid once headers_done()).
  const HttpRequest& request() const { return request_; }
  // For kError: the status to answer with and why.
  int error_status() const { return error_status_; }
  const std::string& error_message() const { return error_message_; }
  // True when bytes of a request have been received (a timeout then deserves a 408).
  bool started() const { return !buffer_.empty() || headers_done_; }

  // Drops the finished request; bytes already received past it start the next one.
  void reset();

 private:
  State fail(int status, std::string message);
  State parse_headers(std::string_view head);
  State parse_request_line(std::string_view line);
  State advance();

  size_t max_body_bytes_;
  std::string buffer_;
  HttpRequest request_;
  State state_ = State::kIncomplete;
  bool headers_done_ = false;
  size_t body_length_ = 0;
  int error_status_ = 0;
  std::string error_message_;
};

// The reason phrase of a status code ("Not Found").
std::string_view status_reason(int status);

// A whole response: status line, Content-Type, Content-Length, Connection, then the body.
std::string format_response(int status, std::string_view content_type, std::string_view body, bool keep_alive,
                            std::string_view extra_headers = {});

// How a handler answers. send() for a whole response (extra_headers: "Name: value\r\n" lines);
// or start_stream(), write() chunks, then finish(). Each returns false once the client is gone
// (the handler should stop its work).
class Responder {
 public:
  virtual ~Responder() = default;
  virtual bool send(int status, std::string_view content_type, std::string_view body,
                    std::string_view extra_headers = {}) = 0;
  virtual bool start_stream(int status, std::string_view content_type) = 0;
  virtual bool write(std::string_view data) = 0;
  virtual bool finish() = 0;
  // True when the client has closed its end (checked without blocking).
  virtual bool client_gone() = 0;
  // True when the server is shutting down.
  virtual bool stopping() const = 0;
};

using Handler = std::function<void(const HttpRequest&, Responder&)>;

struct HttpServerOptions {
  std::string host = "127.0.0.1";   // numeric IPv4 or IPv6 address, or a name getaddrinfo knows
  int port = 8000;                  // 0: a free port chosen by the system (see port())
  size_t max_body_bytes = 1 << 20;  // larger bodies get 413
  double timeout_seconds = 30;      // to receive one request; also the keep-alive idle limit
  int max_connections = kMaxConnections;
};

class HttpServer {
 public:
  HttpServer(HttpServerOptions options, Handler handler);
  ~HttpServer();  // stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and listens (throws kIo naming the address when it cannot), then starts accepting.
  void start();
  // The bound port (the chosen one when options.port was 0).
  int port() const { return port_; }
  // Stops accepting, tells connection threads to finish (an idle one closes at once, a busy one
  // after its current response), and waits for them.
  void stop();

 private:
  // One open connection; `waiting` while it waits for (the rest of) a request, when it may be
  // evicted for a new one. Guarded by mu_.
  struct Connection {
    int fd;
    bool waiting = true, evicted = false;
    std::chrono::steady_clock::time_point since;
  };
  void accept_loop();
  void serve_connection(Connection* c);
  void connection_done(Connection* c);
  bool evict_longest_waiting();  // with mu_ held; false when none waits

  HttpServerOptions options_;
  Handler handler_;
  int listen_fd_ = -1;
  int wake_pipe_[2] = {-1, -1};
  int port_ = 0;
  std::thread accept_thread_;
  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  std::condition_variable all_closed_;
  std::list<Connection> connections_;  // guarded by mu_; a list, so that pointers stay valid
};

}  // namespace tessera::infer::server
