// Helpers for tests that talk to a server over loopback TCP: a connection with a receive time
// limit, and reading until a condition holds.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <functional>
#include <string>

namespace tessera::testing {

// A connection to 127.0.0.1:`port` whose reads give up after `timeout_s` (a hung server fails the
// test instead of hanging it).
inline int connect_loopback(int port, int timeout_s) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{timeout_s, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  return fd;
}

// Appends to `got` what arrives on `fd` until `done(got)` holds (returns true) or the peer closes
// or the read times out (returns false).
inline bool recv_until(int fd, const std::function<bool(const std::string&)>& done, std::string& got) {
  char buf[4096];
  while (!done(got)) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return false;
    got.append(buf, static_cast<size_t>(n));
  }
  return true;
}

}  // namespace tessera::testing
