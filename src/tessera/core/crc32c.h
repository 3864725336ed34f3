// CRC32C (Castagnoli, polynomial 0x1EDC6F41, reflected; the checksum of iSCSI, ext4 and
// TFRecord): checksums of checkpoint files (checkpoint/checkpoint.h), of token shards (data/shard.h)
// and the record framing of TensorBoard event files (train/tensorboard.h).
//
// Two implementations of the same function: the SSE4.2 `crc32` instruction, 8 bytes per
// instruction (every x86-64 CPU that runs Tessera's AVX2 kernels has it), chosen at run time, and
// a byte-wise table (the reference the test compares against). Left out: the three-stream
// interleaving that hides the instruction's 3-cycle latency (about 3x faster again); checkpoint
// files are checksummed on the background writer, where ~8 GB/s is not the bottleneck.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tessera {

// The CRC32C of `n` bytes, continuing from `crc` (the value returned for the bytes before; 0 to
// start): crc32c(ab) == crc32c(b, crc32c(a)).
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);
// The byte-wise table version (the reference).
uint32_t crc32c_ref(const void* data, size_t n, uint32_t crc = 0);

// TFRecord's masked CRC: a CRC stored next to the data it covers is rotated and offset so that
// the CRC of a buffer that contains CRCs stays well distributed.
inline uint32_t crc32c(std::string_view s, uint32_t crc = 0) {
  return crc32c(s.data(), s.size(), crc);
}

inline uint32_t masked_crc32c(uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

// The CRC32C of a whole file and its size in bytes; throws kIo naming the file.
uint32_t crc32c_file(const std::string& path, uint64_t* bytes);

}  // namespace tessera
