// Size arithmetic that refuses to wrap. Every byte count and element count derived from user input
// (model dimensions, batch, sequence length) goes through these: a wrapped product would size an
// arena at a few bytes and let a kernel write past it. An overflow is a user error (kShape) that
// names what was being sized; the caller adds the config keys when it knows them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tessera/core/error.h"

namespace tessera {

inline int64_t checked_mul(int64_t a, int64_t b, std::string_view what) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r))
    fail(ErrorKind::kShape, "{}: {} x {} overflows 64 bits (a dimension far too large?)", what, a, b);
  return r;
}

inline size_t checked_mul(size_t a, size_t b, std::string_view what) {
  size_t r;
  if (__builtin_mul_overflow(a, b, &r))
    fail(ErrorKind::kShape, "{}: {} x {} bytes overflows 64 bits (a dimension far too large?)", what, a, b);
  return r;
}

inline size_t checked_add(size_t a, size_t b, std::string_view what) {
  size_t r;
  if (__builtin_add_overflow(a, b, &r))
    fail(ErrorKind::kShape, "{}: {} + {} bytes overflows 64 bits (a dimension far too large?)", what, a, b);
  return r;
}

}  // namespace tessera
