// CRC32C (Castagnoli, polynomial 0x1EDC6F41, reflected), the checksum of Tessera's token shards.
//
// Why CRC32C: it detects every burst error up to 32 bits and every 1-3 bit error in files of the
// sizes shards have, and x86-64 computes it in hardware (SSE4.2 `crc32`, about 8 bytes per cycle
// per stream), so checking a shard costs less than reading it from disk. The hardware path is chosen
// at run time; CPUs without SSE4.2 use a table-driven software path that gives the same values.
// Left out: the three-stream interleaved hardware loop (another 3x); checksums are not on the step
// path, only on shard open and write.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tessera::data {

// Extends `crc` (the value returned for the bytes before; 0 for none) over n bytes, so that
// crc32c(b, crc32c(a)) == crc32c(a + b). crc32c("123456789") == 0xE3069283.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);
inline uint32_t crc32c(std::string_view s, uint32_t crc = 0) {
  return crc32c(s.data(), s.size(), crc);
}

// The software path, always available; tests compare it with the dispatched one.
uint32_t crc32c_portable(const void* data, size_t n, uint32_t crc = 0);

}  // namespace tessera::data
