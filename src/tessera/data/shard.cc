// Token shard writer and reader (shard.h).
#include "tessera/data/shard.h"

#include <bit>
#include <cstring>

#include "tessera/core/crc32c.h"
#include "tessera/core/error.h"

namespace tessera::data {
namespace {

static_assert(std::endian::native == std::endian::little,
              "shards are little-endian; so is every host we build for");

constexpr uint64_t align8(uint64_t n) {
  return (n + 7) & ~uint64_t{7};
}

template <typename T>
void put(uint8_t* h, size_t off, T v) {
  std::memcpy(h + off, &v, sizeof(T));
}
template <typename T>
T get(const uint8_t* h, size_t off) {
  T v;
  std::memcpy(&v, h + off, sizeof(T));
  return v;
}

}  // namespace

int token_bytes_for(int64_t vocab_size) {
  return vocab_size <= 65536 ? 2 : 4;
}

ShardWriter::ShardWriter(const std::filesystem::path& path, const TokenSpace& space)
    : path_(path), space_(space), token_bytes_(token_bytes_for(space.vocab_size)), out_(path) {
  TESSERA_CHECK(space.vocab_size > 0 && space.vocab_size <= (int64_t{1} << 32), ErrorKind::kConfig,
                "shard '{}': vocab_size {} is outside [1, 2^32]", path.string(), space.vocab_size);
  const uint8_t zeros[kShardHeaderBytes] = {};
  out_.append(zeros, sizeof(zeros));  // the header is written last, when the counts are known
}

void ShardWriter::add_document(std::span<const int32_t> tokens) {
  scratch_.resize(tokens.size() * static_cast<size_t>(token_bytes_));
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int32_t t = tokens[i];
    TESSERA_CHECK(t >= 0 && t < space_.vocab_size, ErrorKind::kShape,
                  "shard '{}': token id {} at position {} of document {} is outside [0, {})", path_.string(),
                  t, i, document_count(), space_.vocab_size);
    if (token_bytes_ == 2) {
      const auto v = static_cast<uint16_t>(t);
      std::memcpy(scratch_.data() + 2 * i, &v, 2);
    } else {
      const auto v = static_cast<uint32_t>(t);
      std::memcpy(scratch_.data() + 4 * i, &v, 4);
    }
  }
  out_.append(scratch_.data(), scratch_.size());
  crc_ = crc32c(scratch_.data(), scratch_.size(), crc_);
  doc_offsets_.push_back(doc_offsets_.back() + tokens.size());
}

void ShardWriter::finish() {
  const uint64_t token_payload = token_count() * static_cast<uint64_t>(token_bytes_);
  const uint8_t pad[8] = {};
  const size_t pad_bytes = static_cast<size_t>(align8(token_payload) - token_payload);
  out_.append(pad, pad_bytes);
  crc_ = crc32c(pad, pad_bytes, crc_);
  const size_t index_bytes = doc_offsets_.size() * sizeof(uint64_t);
  out_.append(doc_offsets_.data(), index_bytes);
  crc_ = crc32c(doc_offsets_.data(), index_bytes, crc_);

  uint8_t h[kShardHeaderBytes] = {};
  std::memcpy(h, kShardMagic, 8);
  put<uint32_t>(h, 8, kShardVersion);
  put<uint32_t>(h, 12, static_cast<uint32_t>(token_bytes_));
  put<uint64_t>(h, 16, token_count());
  put<uint64_t>(h, 24, document_count());
  put<uint64_t>(h, 32, static_cast<uint64_t>(space_.vocab_size));
  put<int32_t>(h, 40, space_.bos_id);
  put<int32_t>(h, 44, space_.eos_id);
  put<int32_t>(h, 48, space_.pad_id);
  put<uint32_t>(h, 52, crc_);
  put<uint32_t>(h, 56, crc32c(h, 56));
  out_.write_at(0, h, sizeof(h));
  out_.commit();
}

ShardReader::ShardReader(const std::filesystem::path& path, bool verify_payload) : file_(path) {
  const std::string name = path.string();
  const uint8_t* h = file_.data();
  const uint64_t size = file_.size();
  if (size < kShardHeaderBytes)
    fail(ErrorKind::kIo, "token shard '{}' is truncated at offset {}: the header alone is {} bytes", name,
         size, kShardHeaderBytes);
  if (std::memcmp(h, kShardMagic, 8) != 0)
    fail(ErrorKind::kIo, "'{}' is not a Tessera token shard: bad magic at offset 0 (expected \"TESSTOKS\")",
         name);
  const auto version = get<uint32_t>(h, 8);
  if (version != kShardVersion)
    fail(ErrorKind::kIo, "token shard '{}': version {} at offset 8; this build reads version {}", name,
         version, kShardVersion);
  const auto header_crc = get<uint32_t>(h, 56);
  if (crc32c(h, 56) != header_crc)
    fail(ErrorKind::kIo,
         "token shard '{}' is corrupt: the header checksum at offset 56 does not match bytes 0..55", name);
  token_bytes_ = static_cast<int>(get<uint32_t>(h, 12));
  if (token_bytes_ != 2 && token_bytes_ != 4)
    fail(ErrorKind::kIo, "token shard '{}': token_bytes {} at offset 12 (expected 2 or 4)", name,
         token_bytes_);
  token_count_ = get<uint64_t>(h, 16);
  document_count_ = get<uint64_t>(h, 24);
  space_.vocab_size = static_cast<int64_t>(get<uint64_t>(h, 32));
  space_.bos_id = get<int32_t>(h, 40);
  space_.eos_id = get<int32_t>(h, 44);
  space_.pad_id = get<int32_t>(h, 48);

  // Counts bounded first so that the size arithmetic below cannot overflow.
  if (token_count_ > (uint64_t{1} << 56) || document_count_ > (uint64_t{1} << 56))
    fail(ErrorKind::kIo, "token shard '{}' is corrupt: counts at offsets 16 and 24 are out of range", name);
  const uint64_t index_offset =
      kShardHeaderBytes + align8(token_count_ * static_cast<uint64_t>(token_bytes_));
  const uint64_t expected = index_offset + 8 * (document_count_ + 1);
  if (size < expected)
    fail(ErrorKind::kIo,
         "token shard '{}' is truncated at offset {}: the header promises {} bytes ({} tokens, {} documents)",
         name, size, expected, token_count_, document_count_);
  if (size > expected)
    fail(ErrorKind::kIo, "token shard '{}' has {} unexpected bytes after offset {}", name, size - expected,
         expected);
  tokens_ = h + kShardHeaderBytes;
  index_ = h + index_offset;
  if (verify_payload && crc32c(tokens_, size - kShardHeaderBytes) != get<uint32_t>(h, 52))
    fail(ErrorKind::kIo,
         "token shard '{}' is corrupt: the payload checksum (bytes {}..{}) does not match the header", name,
         kShardHeaderBytes, size);
  if (doc_begin(0) != 0 || doc_begin(document_count_) != token_count_)
    fail(ErrorKind::kIo,
         "token shard '{}' is corrupt: the document index at offset {} does not span the tokens", name,
         index_offset);
}

uint64_t ShardReader::doc_begin(uint64_t d) const {
  return get<uint64_t>(index_, 8 * d);
}

void ShardReader::read(uint64_t begin, std::span<int32_t> out) const {
  TESSERA_ASSERT(begin + out.size() <= token_count_);
  if (token_bytes_ == 2) {
    const uint8_t* p = tokens_ + 2 * begin;
    for (size_t i = 0; i < out.size(); ++i) out[i] = get<uint16_t>(p, 2 * i);
  } else {
    const uint8_t* p = tokens_ + 4 * begin;
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<int32_t>(get<uint32_t>(p, 4 * i));
  }
}

uint64_t ShardReader::document_at(uint64_t pos) const {
  // Largest d with doc_begin(d) <= pos < doc_begin(d + 1).
  uint64_t lo = 0, hi = document_count_;  // answer in [lo, hi)
  while (hi - lo > 1) {
    const uint64_t mid = lo + (hi - lo) / 2;
    if (doc_begin(mid) <= pos)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

}  // namespace tessera::data
