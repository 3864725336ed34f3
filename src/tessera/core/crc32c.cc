#include "tessera/core/crc32c.h"

#include <fcntl.h>
#include <nmmintrin.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/core/file.h"

namespace tessera {

namespace {

// Reflected polynomial: 0x82F63B78 is 0x1EDC6F41 with its 32 bits reversed.
constexpr uint32_t kPolyReflected = 0x82F63B78u;

constexpr std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPolyReflected : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kTable = make_table();

// The `crc32` instruction computes the same reflected CRC32C step over 1 or 8 bytes; the
// pre- and post-inversion (~crc) are the caller's, as in the table version.
__attribute__((target("sse4.2"))) uint32_t crc32c_sse42(const uint8_t* p, size_t n, uint32_t crc) {
  uint64_t c = ~crc;
  while (n > 0 && (reinterpret_cast<uintptr_t>(p) & 7) != 0) {
    c = _mm_crc32_u8(static_cast<uint32_t>(c), *p++);
    --n;
  }
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    c = _mm_crc32_u64(c, w);
  }
  for (; n > 0; --n) c = _mm_crc32_u8(static_cast<uint32_t>(c), *p++);
  return ~static_cast<uint32_t>(c);
}

bool have_sse42() {
  static const bool ok = __builtin_cpu_supports("sse4.2");
  return ok;
}

}  // namespace

uint32_t crc32c_ref(const void* data, size_t n, uint32_t crc) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
  for (size_t i = 0; i < n; ++i) c = kTable[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return ~c;
}

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
  if (have_sse42()) return crc32c_sse42(static_cast<const uint8_t*>(data), n, crc);
  return crc32c_ref(data, n, crc);
}

uint32_t crc32c_file(const std::string& path, uint64_t* bytes) {
  int fd = open_regular_file(path);
  // 1 MiB reads: large enough that the system call cost vanishes, small enough to stay in L2/L3.
  std::vector<uint8_t> buf(size_t{1} << 20);
  uint32_t crc = 0;
  uint64_t total = 0;
  for (;;) {
    ssize_t r = ::read(fd, buf.data(), buf.size());
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int err = errno;
      ::close(fd);
      fail(ErrorKind::kIo, "{}: read failed at offset {}: {}", path, total, std::strerror(err));
    }
    if (r == 0) break;
    crc = crc32c(buf.data(), static_cast<size_t>(r), crc);
    total += static_cast<uint64_t>(r);
  }
  ::close(fd);
  if (bytes) *bytes = total;
  return crc;
}

}  // namespace tessera
