// The HTTP/1.1 request parser, response formatting, and the socket server (http.h).
#include "tessera/infer/server/http.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
#include <system_error>

#include "tessera/core/error.h"

namespace tessera::infer::server {
namespace {

using Clock = std::chrono::steady_clock;

// RFC 9110 token characters (methods and header names).
bool is_tchar(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  return std::strchr("!#$%&'*+-.^_`|~", c) != nullptr && c != '\0';
}

bool is_token(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!is_tchar(c)) return false;
  return true;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Whether the comma-separated header value holds `token` (case-insensitive).
bool has_token(std::string_view value, std::string_view token) {
  size_t pos = 0;
  while (pos <= value.size()) {
    size_t end = std::min(value.find(',', pos), value.size());
    if (lower(trim(value.substr(pos, end - pos))) == token) return true;
    pos = end + 1;
  }
  return false;
}

// The end of the header section: the index just past the blank line, or npos. Lines may end in
// CRLF or a bare LF (RFC 9112 lets a recipient accept the latter).
size_t find_head_end(std::string_view buf) {
  size_t pos = 0;
  while ((pos = buf.find('\n', pos)) != std::string_view::npos) {
    ++pos;
    if (pos < buf.size() && buf[pos] == '\n') return pos + 1;
    if (pos + 1 < buf.size() && buf[pos] == '\r' && buf[pos + 1] == '\n') return pos + 2;
  }
  return std::string_view::npos;
}

// The error body the API uses everywhere ({"error": {message, type, param, code}}).
std::string error_json(int status, std::string_view message) {
  nlohmann::json j = {{"error",
                       {{"message", message},
                        {"type", status >= 500 ? "server_error" : "invalid_request_error"},
                        {"param", nullptr},
                        {"code", nullptr}}}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

std::optional<std::string_view> HttpRequest::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (k == name) return std::string_view(v);
  return std::nullopt;
}

bool HttpRequest::keep_alive() const {
  auto c = header("connection");
  if (minor_version == 0) return c && has_token(*c, "keep-alive");
  return !(c && has_token(*c, "close"));
}

RequestParser::State RequestParser::fail(int status, std::string message) {
  error_status_ = status;
  error_message_ = std::move(message);
  return state_ = State::kError;
}

RequestParser::State RequestParser::feed(std::string_view bytes) {
  if (state_ != State::kIncomplete) return state_;
  buffer_.append(bytes);
  return advance();
}

bool RequestParser::expects_continue() const {
  auto e = request_.header("expect");
  return headers_done_ && e && lower(*e) == "100-continue";
}

void RequestParser::reset() {
  request_ = {};
  state_ = State::kIncomplete;
  headers_done_ = false;
  body_length_ = 0;
  error_status_ = 0;
  error_message_.clear();
}

RequestParser::State RequestParser::advance() {
  if (!headers_done_) {
    // Empty lines before a request line are ignored (RFC 9112 2.2).
    size_t skip = 0;
    while (skip < buffer_.size() && (buffer_[skip] == '\r' || buffer_[skip] == '\n')) ++skip;
    buffer_.erase(0, skip);
    // A bad request line is refused as soon as it is complete, without waiting for headers.
    if (size_t eol = buffer_.find('\n'); eol != std::string::npos && request_.method.empty()) {
      std::string_view line(buffer_.data(), eol);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (parse_request_line(line) == State::kError) return state_;
    }
    const size_t end = find_head_end(buffer_);
    if (end == std::string::npos || end > kMaxHeaderBytes) {
      if (buffer_.size() > kMaxHeaderBytes)
        return fail(431, fmt::format("the request line and headers exceed {} bytes", kMaxHeaderBytes));
      return state_;
    }
    if (parse_headers(std::string_view(buffer_).substr(0, end)) == State::kError) return state_;
    buffer_.erase(0, end);
    headers_done_ = true;
  }
  if (buffer_.size() < body_length_) return state_;
  request_.body = buffer_.substr(0, body_length_);
  buffer_.erase(0, body_length_);
  return state_ = State::kComplete;
}

RequestParser::State RequestParser::parse_request_line(std::string_view line) {
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos)
    return fail(400, "malformed request line: expected 'METHOD /path HTTP/1.1'");
  std::string_view method = line.substr(0, sp1), target = line.substr(sp1 + 1, sp2 - sp1 - 1),
                   version = line.substr(sp2 + 1);
  if (!is_token(method)) return fail(400, "malformed request line: bad method");
  if (target.empty() || target.front() != '/')
    return fail(400, "malformed request line: the target must start with '/'");
  for (char c : target)
    if (static_cast<unsigned char>(c) <= ' ' || c == 0x7f)
      return fail(400, "malformed request line: bad target");
  if (version.size() != 8 || version.substr(0, 5) != "HTTP/" || version[6] != '.' || version[5] < '0' ||
      version[5] > '9' || version[7] < '0' || version[7] > '9')
    return fail(400, "malformed request line: bad HTTP version");
  if (version[5] != '1') return fail(505, fmt::format("{} is not supported: use HTTP/1.1", version));
  request_.method = method;
  request_.target = target;
  request_.path = target.substr(0, target.find('?'));
  request_.minor_version = version[7] - '0';
  return state_;
}

RequestParser::State RequestParser::parse_headers(std::string_view head) {
  size_t pos = head.find('\n') + 1;  // past the request line, parsed already
  while (pos < head.size()) {
    size_t eol = head.find('\n', pos);
    std::string_view line = head.substr(pos, eol - pos);
    pos = eol + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) break;
    if (line.front() == ' ' || line.front() == '\t') return fail(400, "folded header lines are not allowed");
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos || !is_token(line.substr(0, colon)))
      return fail(400, fmt::format("malformed header line '{}'", line.substr(0, 64)));
    request_.headers.emplace_back(lower(line.substr(0, colon)), std::string(trim(line.substr(colon + 1))));
  }
  if (request_.header("transfer-encoding"))
    return fail(501, "request bodies with Transfer-Encoding are not supported: send Content-Length");
  std::optional<size_t> length;
  for (const auto& [k, v] : request_.headers) {
    if (k != "content-length") continue;
    size_t n = 0;
    if (v.empty() || v.size() > 18 || v.find_first_not_of("0123456789") != std::string::npos)
      return fail(400, fmt::format("bad Content-Length '{}'", v));
    for (char c : v) n = n * 10 + static_cast<size_t>(c - '0');
    if (length && *length != n) return fail(400, "conflicting Content-Length headers");
    length = n;
  }
  body_length_ = length.value_or(0);
  if (body_length_ > max_body_bytes_)
    return fail(413, fmt::format("the request body has {} bytes; the limit is {} (server_max_request_bytes)",
                                 body_length_, max_body_bytes_));
  return state_;
}

std::string_view status_reason(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 413:
      return "Content Too Large";
    case 422:
      return "Unprocessable Content";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Unknown";
  }
}

std::string format_response(int status, std::string_view content_type, std::string_view body, bool keep_alive,
                            std::string_view extra_headers) {
  return fmt::format("HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: {}\r\n{}\r\n{}",
                     status, status_reason(status), content_type, body.size(),
                     keep_alive ? "keep-alive" : "close", extra_headers, body);
}

namespace {

// Writes all of `data`; false when the peer is gone or the send timeout passed.
bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// A Responder over one connection's socket.
class SocketResponder final : public Responder {
 public:
  SocketResponder(int fd, const std::atomic<bool>& stopping) : fd_(fd), stopping_(stopping) {}

  void begin(bool keep_alive, bool chunked_ok) {
    keep_alive_ = keep_alive;
    chunked_ok_ = chunked_ok;
    responded_ = streaming_ = false;
  }
  bool responded() const { return responded_; }
  bool broken() const { return broken_; }
  // After this response, must the connection close? (close-delimited stream, error, or asked)
  bool must_close() const { return broken_ || !keep_alive_ || (streaming_ && !chunked_ok_); }

  bool send(int status, std::string_view content_type, std::string_view body,
            std::string_view extra_headers) override {
    TESSERA_ASSERT(!responded_);
    responded_ = true;
    return ok(write_all(fd_, format_response(status, content_type, body, keep_alive_, extra_headers)));
  }

  // HTTP/1.1 streams in chunks (the connection may stay open); HTTP/1.0 streams until close.
  bool start_stream(int status, std::string_view content_type) override {
    TESSERA_ASSERT(!responded_);
    responded_ = streaming_ = true;
    const bool keep = keep_alive_ && chunked_ok_;
    return ok(write_all(fd_, fmt::format("HTTP/1.1 {} {}\r\nContent-Type: {}\r\nCache-Control: no-cache\r\n{}"
                                         "Connection: {}\r\n\r\n",
                                         status, status_reason(status), content_type,
                                         chunked_ok_ ? "Transfer-Encoding: chunked\r\n" : "",
                                         keep ? "keep-alive" : "close")));
  }

  bool write(std::string_view data) override {
    if (broken_) return false;
    if (data.empty()) return true;  // an empty chunk would end the stream
    if (!chunked_ok_) return ok(write_all(fd_, data));
    chunk_.clear();
    fmt::format_to(std::back_inserter(chunk_), "{:x}\r\n", data.size());
    chunk_.append(data);
    chunk_.append("\r\n");
    return ok(write_all(fd_, chunk_));
  }

  bool finish() override {
    if (broken_) return false;
    return chunked_ok_ ? ok(write_all(fd_, "0\r\n\r\n")) : true;
  }

  // The end of the client's stream (read gives 0, POLLRDHUP) is not "gone": a client may close its
  // sending side after the request and still read the answer. Gone is a hang-up or an error.
  bool client_gone() override {
    if (broken_) return true;
    pollfd p{fd_, 0, 0};  // POLLHUP and POLLERR are reported whatever is asked
    if (::poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLHUP | POLLERR)) return broken_ = true;
    return false;
  }

  bool stopping() const override { return stopping_.load(); }

 private:
  bool ok(bool written) {
    if (!written) broken_ = true;
    return written;
  }

  int fd_;
  const std::atomic<bool>& stopping_;
  bool keep_alive_ = true, chunked_ok_ = true, responded_ = false, streaming_ = false, broken_ = false;
  std::string chunk_;
};

}  // namespace

HttpServer::HttpServer(HttpServerOptions options, Handler handler)
    : options_(std::move(options)), handler_(std::move(handler)) {}

HttpServer::~HttpServer() {
  stop();
}

void HttpServer::start() {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(options_.port);
  if (int rc = ::getaddrinfo(options_.host.c_str(), port.c_str(), &hints, &found); rc != 0)
    fail(ErrorKind::kIo, "server_host '{}': {}", options_.host, ::gai_strerror(rc));
  std::string last_error = "no address";
  for (addrinfo* a = found; a && listen_fd_ < 0; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 128) == 0) {
      listen_fd_ = fd;
    } else {
      last_error = std::strerror(errno);
      ::close(fd);
    }
  }
  ::freeaddrinfo(found);
  if (listen_fd_ < 0)
    fail(ErrorKind::kIo, "cannot listen on {}:{}: {}", options_.host, options_.port, last_error);
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                           : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  if (::pipe2(wake_pipe_, O_CLOEXEC) != 0) fail(ErrorKind::kIo, "pipe: {}", std::strerror(errno));
  accept_thread_ = std::thread([this] { accept_loop(); });
}

void HttpServer::stop() {
  if (stopping_.exchange(true)) {
    // A second call waits like the first.
  } else if (wake_pipe_[1] >= 0) {
    char c = 0;
    [[maybe_unused]] ssize_t n = ::write(wake_pipe_[1], &c, 1);
  }
  if (accept_thread_.joinable()) accept_thread_.join();
  if (listen_fd_ >= 0) ::close(listen_fd_);
  listen_fd_ = -1;
  std::unique_lock lock(mu_);
  all_closed_.wait(lock, [&] { return connections_.empty(); });
  lock.unlock();
  for (int& fd : wake_pipe_) {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
}

void HttpServer::accept_loop() {
  for (;;) {
    pollfd p[2] = {{listen_fd_, POLLIN, 0}, {wake_pipe_[0], POLLIN, 0}};
    if (::poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (p[1].revents || stopping_) return;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      // Out of descriptors: the pending connection stays readable, so wait rather than spin.
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;  // otherwise the client gave up before it was accepted
    }
    Connection* c = nullptr;
    {
      std::lock_guard lock(mu_);
      int live = 0;
      for (const Connection& o : connections_) live += o.evicted ? 0 : 1;
      if (live >= options_.max_connections && !evict_longest_waiting()) {
        write_all(fd, format_response(503, "application/json",
                                      error_json(503, "too many open connections; try again later"), false));
        ::close(fd);
        continue;
      }
      c = &connections_.emplace_back(Connection{fd, true, false, Clock::now()});
    }
    try {
      std::thread([this, c] { serve_connection(c); }).detach();
    } catch (const std::system_error&) {  // no thread to be had: refuse this one
      write_all(fd, format_response(503, "application/json", error_json(503, "the server is out of threads"),
                                    false));
      connection_done(c);
    }
  }
}

bool HttpServer::evict_longest_waiting() {
  Connection* oldest = nullptr;
  for (Connection& o : connections_)
    if (o.waiting && !o.evicted && (!oldest || o.since < oldest->since)) oldest = &o;
  if (!oldest) return false;
  oldest->evicted = true;
  ::shutdown(oldest->fd, SHUT_RDWR);  // its thread's poll() wakes, reads the end and closes
  return true;
}

// Closes the connection's socket with mu_ held, so that an eviction never shuts down a descriptor
// number already reused by another connection.
void HttpServer::connection_done(Connection* c) {
  std::lock_guard lock(mu_);
  ::close(c->fd);
  connections_.remove_if([c](const Connection& o) { return &o == c; });
  if (connections_.empty()) all_closed_.notify_all();
}

void HttpServer::serve_connection(Connection* c) {
  const int fd = c->fd;
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // stream chunks leave at once
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(options_.timeout_seconds);
  tv.tv_usec = static_cast<suseconds_t>((options_.timeout_seconds - static_cast<double>(tv.tv_sec)) * 1e6);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);  // a client that stops reading is dropped

  SocketResponder responder(fd, stopping_);
  RequestParser parser(options_.max_body_bytes);
  const auto timeout =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options_.timeout_seconds));
  char buf[16 * 1024];
  bool open = true;
  while (open) {
    // Read until one request is complete (it may already be buffered).
    RequestParser::State state = parser.feed({});
    const Clock::time_point deadline = Clock::now() + timeout;
    {
      std::lock_guard lock(mu_);
      if (c->evicted) break;
      c->waiting = true;
      c->since = Clock::now();
    }
    bool sent_continue = false;
    while (state == RequestParser::State::kIncomplete) {
      if (stopping_ && !parser.started()) {
        open = false;
        break;
      }
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) {
        if (parser.started())
          write_all(fd, format_response(408, "application/json",
                                        error_json(408, "the request did not arrive in time"), false));
        open = false;
        break;
      }
      pollfd p{fd, POLLIN, 0};
      const int rc =
          ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 100)));  // 100 ms: see stopping_
      if (rc < 0 && errno != EINTR) {
        open = false;
        break;
      }
      if (rc <= 0) continue;
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        open = false;
        break;
      }
      state = parser.feed(std::string_view(buf, static_cast<size_t>(n)));
      if (state == RequestParser::State::kIncomplete && parser.expects_continue() && !sent_continue)
        sent_continue = write_all(fd, "HTTP/1.1 100 Continue\r\n\r\n");
    }
    if (!open) break;
    {
      std::lock_guard lock(mu_);
      if (c->evicted) break;  // shut down for a newer connection as the request completed
      c->waiting = false;     // being answered: never evicted
    }
    if (state == RequestParser::State::kError) {
      write_all(fd, format_response(parser.error_status(), "application/json",
                                    error_json(parser.error_status(), parser.error_message()), false));
      break;
    }
    const HttpRequest& request = parser.request();
    responder.begin(request.keep_alive() && !stopping_, request.minor_version >= 1);
    try {
      handler_(request, responder);
    } catch (const std::exception& e) {
      if (!responder.responded()) responder.send(500, "application/json", error_json(500, e.what()), {});
    }
    if (!responder.responded())
      responder.send(500, "application/json", error_json(500, "the handler sent no response"), {});
    open = !responder.must_close();
    parser.reset();
  }
  ::shutdown(fd, SHUT_WR);
  connection_done(c);
}

}  // namespace tessera::infer::server
