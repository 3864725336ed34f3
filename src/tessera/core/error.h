// Errors. Two kinds of failure (STYLE.md 6):
//   - a user error (bad config, bad file, bad shape passed by a caller) throws tessera::Error with a
//     message that says what was expected and what was found;
//   - an internal invariant that cannot fail unless Tessera itself is wrong is TESSERA_ASSERT,
//     which also throws (library code never calls exit or abort; only cli/ chooses exit codes).
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace tessera {

// The kind lets cli/ choose an exit code and tests assert on the category of a failure.
enum class ErrorKind {
  kConfig,    // bad key, bad value, bad YAML
  kShape,     // tensors whose shapes or dtypes do not fit an op
  kIo,        // file missing, truncated, corrupt
  kRuntime,   // a library call failed (oneDNN, MPI, ...)
  kInternal,  // an invariant broke: a bug in Tessera
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& what) : std::runtime_error(what), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

template <typename... Args>
[[noreturn]] void fail(ErrorKind kind, fmt::format_string<Args...> f, Args&&... args) {
  throw Error(kind, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace tessera

// Checks a condition a caller is responsible for; the message says what was expected.
#define TESSERA_CHECK(cond, kind, ...)                 \
  do {                                                 \
    if (!(cond)) ::tessera::fail((kind), __VA_ARGS__); \
  } while (0)

#define TESSERA_CHECK_SHAPE(cond, ...) TESSERA_CHECK(cond, ::tessera::ErrorKind::kShape, __VA_ARGS__)

// An internal invariant. Kept in release builds: the cost is a predictable branch.
#define TESSERA_ASSERT(cond)                                                                          \
  do {                                                                                                \
    if (!(cond))                                                                                      \
      ::tessera::fail(::tessera::ErrorKind::kInternal, "internal error: {} ({}:{})", #cond, __FILE__, \
                      __LINE__);                                                                      \
  } while (0)
