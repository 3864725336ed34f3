// CRC32C and token shards: known checksum values, write/read round trips for both token widths,
// and every way a shard file can be damaged (truncated, flipped bits, bad magic, extra bytes)
// reported as kIo naming the file and the offset.
#include "tessera/data/shard.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "data_test_util.h"
#include "tessera/core/crc32c.h"
#include "tessera/core/error.h"

namespace tessera::data {
namespace {

namespace fs = std::filesystem;
using Docs = std::vector<std::vector<int32_t>>;

using testing::TempDir;

fs::path write_shard(const fs::path& path, const Docs& docs, TokenSpace space) {
  ShardWriter w(path, space);
  for (const auto& d : docs) w.add_document(d);
  w.finish();
  return path;
}

std::string expect_io_error(const fs::path& path, bool verify = true) {
  try {
    ShardReader r(path, verify);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo) << e.what();
    EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos)
        << "message must name the file: " << e.what();
    return e.what();
  }
  ADD_FAILURE() << "expected opening " << path << " to fail";
  return {};
}

void patch_byte(const fs::path& path, uint64_t offset, uint8_t xor_mask) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c;
  f.get(c);
  f.seekp(static_cast<std::streamoff>(offset));
  f.put(static_cast<char>(c ^ xor_mask));
}

TEST(Crc32c, KnownValues) {
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);  // the standard check value of CRC-32C
  EXPECT_EQ(crc32c(""), 0u);
  EXPECT_EQ(crc32c_ref("123456789", 9), 0xE3069283u);
  // 32 bytes of zeros: a value from RFC 3720 (iSCSI), appendix B.4.
  const std::string zeros(32, '\0');
  EXPECT_EQ(crc32c(zeros), 0x8A9136AAu);
}

TEST(Crc32c, HardwareMatchesPortableAndChains) {
  std::mt19937 rng(3);
  std::string data(4099, '\0');
  for (char& c : data) c = static_cast<char>(rng());
  for (size_t n : {0u, 1u, 7u, 8u, 9u, 67u, 4099u}) {
    EXPECT_EQ(crc32c(data.data(), n), crc32c_ref(data.data(), n)) << n;
    for (size_t split : {size_t{0}, n / 3, n}) {
      const uint32_t a = crc32c(data.data(), split);
      EXPECT_EQ(crc32c(data.data() + split, n - split, a), crc32c(data.data(), n)) << n << " split " << split;
    }
  }
}

TEST(Shard, RoundTripBothTokenWidths) {
  TempDir dir("shard_rt");
  const Docs docs = {{5, 6, 7}, {}, {65535, 0}, {42}, {}};
  for (int64_t vocab : {int64_t{65536}, int64_t{200019}}) {
    const TokenSpace space{vocab, 1, 2, -1};
    Docs d = docs;
    if (vocab > 65536) d.push_back({200000, 131072});  // needs u32
    const fs::path p = write_shard(dir.path() / fmt::format("v{}.tokens", vocab), d, space);
    ShardReader r(p);
    EXPECT_EQ(r.token_bytes(), vocab <= 65536 ? 2 : 4);
    EXPECT_EQ(r.space(), space);
    EXPECT_EQ(r.document_count(), d.size());
    uint64_t pos = 0;
    for (size_t i = 0; i < d.size(); ++i) {
      EXPECT_EQ(r.doc_begin(i), pos);
      std::vector<int32_t> got(d[i].size());
      r.read(pos, got);
      EXPECT_EQ(got, d[i]);
      for (size_t k = 0; k < d[i].size(); ++k) EXPECT_EQ(r.document_at(pos + k), i);
      pos += d[i].size();
    }
    EXPECT_EQ(r.token_count(), pos);
    EXPECT_EQ(r.doc_begin(d.size()), pos);
  }
}

TEST(Shard, EmptyShard) {
  TempDir dir("shard_empty");
  ShardReader r(write_shard(dir.path() / "e.tokens", {}, {10, -1, -1, -1}));
  EXPECT_EQ(r.token_count(), 0u);
  EXPECT_EQ(r.document_count(), 0u);
}

TEST(Shard, WriterRejectsIdsOutsideTheVocabularyAndLeavesNoFile) {
  TempDir dir("shard_oov");
  const fs::path p = dir.path() / "x.tokens";
  try {
    ShardWriter w(p, {100, -1, -1, -1});
    w.add_document(std::vector<int32_t>{1, 2, 100});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kShape);
  }
  EXPECT_TRUE(fs::is_empty(dir.path()));  // neither the shard nor its temporary file
}

TEST(Shard, TruncationNamesFileAndOffset) {
  TempDir dir("shard_trunc");
  const fs::path good = write_shard(dir.path() / "good.tokens", {{1, 2, 3}, {4, 5}}, {100, -1, 2, -1});
  const auto size = fs::file_size(good);
  // 64 header + 5 tokens x 2 bytes = 10 -> padded to 16, + 3 index entries x 8 = 24: 104 bytes.
  ASSERT_EQ(size, 104u);
  for (uint64_t cut : {uint64_t{0}, uint64_t{30}, uint64_t{64}, uint64_t{80}, size - 1}) {
    const fs::path p = dir.path() / fmt::format("cut{}.tokens", cut);
    fs::copy_file(good, p);
    fs::resize_file(p, cut);
    const std::string msg = expect_io_error(p);
    EXPECT_NE(msg.find(fmt::format("truncated at offset {}", cut)), std::string::npos) << msg;
  }
  const fs::path longer = dir.path() / "longer.tokens";
  fs::copy_file(good, longer);
  fs::resize_file(longer, size + 3);
  EXPECT_NE(expect_io_error(longer).find("after offset 104"), std::string::npos);
}

TEST(Shard, CorruptionIsCaughtByTheChecksums) {
  TempDir dir("shard_corrupt");
  const fs::path good = write_shard(dir.path() / "good.tokens", {{1, 2, 3}, {4, 5}}, {100, -1, 2, -1});
  auto copy = [&](std::string_view name) {
    const fs::path p = dir.path() / name;
    fs::copy_file(good, p);
    return p;
  };
  const fs::path payload = copy("payload.tokens");
  patch_byte(payload, 64 + 3, 0x10);  // one bit of the second token
  EXPECT_NE(expect_io_error(payload).find("payload checksum"), std::string::npos);
  EXPECT_NO_THROW(ShardReader(payload, /*verify_payload=*/false));  // the header is intact

  const fs::path index = copy("index.tokens");
  patch_byte(index, 104 - 8, 0x01);  // the last index entry
  EXPECT_NE(expect_io_error(index).find("payload checksum"), std::string::npos);

  const fs::path header = copy("header.tokens");
  patch_byte(header, 16, 0x01);  // token_count
  EXPECT_NE(expect_io_error(header).find("header checksum at offset 56"), std::string::npos);

  const fs::path magic = copy("magic.tokens");
  patch_byte(magic, 0, 0x20);
  EXPECT_NE(expect_io_error(magic).find("bad magic at offset 0"), std::string::npos);

  EXPECT_NE(expect_io_error(dir.path() / "missing.tokens").find("cannot open"), std::string::npos);
}

}  // namespace
}  // namespace tessera::data
