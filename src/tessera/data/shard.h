// Token shards: the binary files `tessera prepare-data` writes and the `tokens` dataset reads.
//
// Layout (all integers little-endian; docs/data.md has the same table):
//   offset  size  field
//        0     8  magic "TESSTOKS"
//        8     4  u32 version (1)
//       12     4  u32 token_bytes: 2 (u16 tokens, vocab_size <= 65536) or 4 (u32)
//       16     8  u64 token_count
//       24     8  u64 document_count
//       32     8  u64 vocab_size of the tokenizer that wrote the shard
//       40     4  i32 bos_id (-1: none)
//       44     4  i32 eos_id (-1: none)
//       48     4  i32 pad_id (-1: none)
//       52     4  u32 payload_crc32c: CRC32C of every byte after the header
//       56     4  u32 header_crc32c: CRC32C of bytes 0..55
//       60     4  u32 reserved, 0
//       64        tokens: token_count x token_bytes
//                 zero padding to a multiple of 8 bytes
//                 document index: (document_count + 1) x u64, the token offset where each document
//                 starts, then token_count; offsets never decrease
// The file size is exactly 64 + align8(token_count x token_bytes) + 8 x (document_count + 1).
//
// Why an index of document offsets rather than EOS separators: document boundaries stay exact
// whatever the tokenizer's special tokens are (or whether it has any), and BOS/EOS become a choice
// of the reader (add_bos, add_eos) instead of being baked into the shards. A reader finds the
// document holding a token by binary search over the mapped index.
//
// Left out: compression (tokens are already dense; a u16 shard of English is about 2 bytes per
// 4.5 characters of text) and in-place appends (a shard is written once).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tessera/core/file.h"

namespace tessera::data {

inline constexpr char kShardMagic[8] = {'T', 'E', 'S', 'S', 'T', 'O', 'K', 'S'};
inline constexpr uint32_t kShardVersion = 1;
inline constexpr uint64_t kShardHeaderBytes = 64;
inline constexpr std::string_view kShardExtension = ".tokens";

// What the tokenizer that wrote a shard says about its ids; stored in every shard's header.
struct TokenSpace {
  int64_t vocab_size = 0;
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  int32_t pad_id = -1;
  bool operator==(const TokenSpace&) const = default;
};

// 2 when every id fits in u16 (vocab_size <= 65536), else 4.
int token_bytes_for(int64_t vocab_size);

// Writes one shard. Tokens stream to a temporary file as documents arrive; only the document index
// (8 bytes per document) stays in memory. finish() writes the index and the header and renames the
// file into place; a writer destroyed before finish() leaves nothing under `path`.
class ShardWriter {
 public:
  ShardWriter(const std::filesystem::path& path, const TokenSpace& space);

  // Appends one document; throws kShape for an id outside [0, vocab_size).
  void add_document(std::span<const int32_t> tokens);
  uint64_t token_count() const { return doc_offsets_.back(); }
  uint64_t document_count() const { return doc_offsets_.size() - 1; }
  void finish();

 private:
  std::filesystem::path path_;
  TokenSpace space_;
  int token_bytes_;
  AtomicFileWriter out_;
  uint32_t crc_ = 0;
  std::vector<uint64_t> doc_offsets_{0};
  std::vector<uint8_t> scratch_;
};

// A shard mapped read-only. Opening checks the magic, version, header checksum and the file size
// the header implies, and (unless verify_payload is false) the payload checksum; any mismatch
// throws kIo naming the file and the offset (or byte range) at fault.
class ShardReader {
 public:
  explicit ShardReader(const std::filesystem::path& path, bool verify_payload = true);

  const std::filesystem::path& path() const { return file_.path(); }
  const TokenSpace& space() const { return space_; }
  uint64_t token_count() const { return token_count_; }
  uint64_t document_count() const { return document_count_; }
  int token_bytes() const { return token_bytes_; }

  // Document d covers tokens [doc_begin(d), doc_begin(d + 1)); doc_begin(document_count()) is
  // token_count().
  uint64_t doc_begin(uint64_t d) const;
  // Copies tokens [begin, begin + out.size()) as int32.
  void read(uint64_t begin, std::span<int32_t> out) const;
  // The document holding token `pos`, found by binary search: the last d with doc_begin(d) <= pos
  // whose document is not empty.
  uint64_t document_at(uint64_t pos) const;

 private:
  MappedFile file_;
  TokenSpace space_;
  int token_bytes_ = 2;
  uint64_t token_count_ = 0;
  uint64_t document_count_ = 0;
  const uint8_t* tokens_ = nullptr;
  const uint8_t* index_ = nullptr;
};

}  // namespace tessera::data
