// Inputs a hostile or careless user can hand any reader: paths that are not regular files (a FIFO,
// a device, a folder), files over a reader's limit, safetensors files whose tensors share bytes,
// sizes that overflow 64 bits, and thread counts far past the machine's cores.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "tessera/core/arena.h"
#include "tessera/core/cpu_features.h"
#include "tessera/core/crc32c.h"
#include "tessera/core/error.h"
#include "tessera/core/file.h"
#include "tessera/core/safetensors.h"
#include "tessera/core/tensor.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

fs::path temp_dir() {
  std::string tmpl = (fs::path(::testing::TempDir()) / "tessera_hostile_XXXXXX").string();
  char* dir = mkdtemp(tmpl.data());
  EXPECT_NE(dir, nullptr);
  return fs::path(dir);
}

// Runs `body`, expects an Error of `kind` whose message holds `part`.
template <typename F>
void expect_error(F body, ErrorKind kind, const std::string& part) {
  try {
    body();
    ADD_FAILURE() << "expected an error holding '" << part << "'";
  } catch (const Error& e) {
    EXPECT_EQ(static_cast<int>(e.kind()), static_cast<int>(kind)) << e.what();
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

// Each reader refuses a FIFO (which would block forever waiting for a writer), a device (read
// forever) and a folder, naming the path and what it is.
TEST(HostileInput, ReadersRefuseWhatIsNotARegularFile) {
  const fs::path dir = temp_dir();
  const fs::path fifo = dir / "config.yml";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  expect_error([&] { read_file(fifo); }, ErrorKind::kIo, "is a FIFO");
  expect_error([&] { MappedFile m(fifo); }, ErrorKind::kIo, "is a FIFO");
  expect_error([&] { SafetensorsFile f(fifo.string()); }, ErrorKind::kIo, "is a FIFO");
  expect_error([&] { crc32c_file(fifo.string(), nullptr); }, ErrorKind::kIo, "is a FIFO");
  expect_error([&] { read_file("/dev/zero"); }, ErrorKind::kIo, "'/dev/zero' is a character device");
  expect_error([&] { MappedFile m("/dev/urandom"); }, ErrorKind::kIo, "is a character device");
  expect_error([&] { read_file(dir); }, ErrorKind::kIo, "is a folder; expected a regular file");
  fs::remove_all(dir);
}

TEST(HostileInput, ReadFileRefusesAFileOverItsLimit) {
  const fs::path dir = temp_dir();
  write_file_atomically(dir / "big.json", std::string(1000, 'x'));
  EXPECT_EQ(read_file(dir / "big.json", 1000).size(), 1000u);
  expect_error([&] { read_file(dir / "big.json", 999, "tokenizer file"); }, ErrorKind::kIo,
               "tokenizer file '" + (dir / "big.json").string() + "' has 1000 bytes, more than the 999");
  fs::remove_all(dir);
}

// A crafted safetensors header whose two tensors point at the same bytes.
TEST(HostileInput, SafetensorsRefusesTensorsWhoseBytesOverlap) {
  const fs::path dir = temp_dir();
  auto write = [&](const nlohmann::json& header, size_t data_bytes) {
    std::string h = header.dump();
    h.append((8 - h.size() % 8) % 8, ' ');
    const uint64_t n = h.size();
    std::string bytes(reinterpret_cast<const char*>(&n), 8);
    bytes += h;
    bytes.append(data_bytes, '\0');
    write_file_atomically(dir / "t.safetensors", bytes);
    return (dir / "t.safetensors").string();
  };
  const std::string ok = write({{"a", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0, 8}}}},
                                {"b", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {8, 16}}}}},
                               16);
  EXPECT_EQ(SafetensorsFile(ok).names().size(), 2u);
  const std::string alias = write({{"a", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0, 8}}}},
                                   {"b", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0, 8}}}}},
                                  16);
  expect_error([&] { SafetensorsFile f(alias); }, ErrorKind::kIo, "tensors 'a' (bytes [");
  const std::string overlap = write({{"a", {{"dtype", "F32"}, {"shape", {3}}, {"data_offsets", {0, 12}}}},
                                     {"b", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {8, 16}}}}},
                                    16);
  expect_error([&] { SafetensorsFile f(overlap); }, ErrorKind::kIo,
               "overlap; each tensor needs bytes of its own");
  fs::remove_all(dir);
}

// A product of dimensions past 64 bits used to wrap to a small byte count (and an arena a kernel
// then wrote past); now every derived size is checked.
TEST(HostileInput, SizesThatOverflowAreRefusedNotWrapped) {
  const int64_t big = int64_t{1} << 40;
  expect_error([&] { Shape{big, big}.numel(); }, ErrorKind::kShape, "more elements than fit in 64 bits");
  expect_error(
      [&] {
        aligned_bytes(Shape{int64_t{1} << 62, 4}, DType::kF32);
      },
      ErrorKind::kShape, "more elements than fit in 64 bits");
  expect_error([&] { aligned_bytes(Shape{(int64_t{1} << 62) + 1}, DType::kF32); }, ErrorKind::kShape,
               "overflows 64 bits");
  expect_error([&] { Arena a(~size_t{0} - 8, "huge"); }, ErrorKind::kShape, "arena size");
  EXPECT_EQ(aligned_bytes(Shape{3, 5}, DType::kF32), 64u);
}

// num_threads near its documented maximum (65536) made libgomp abort the process.
TEST(HostileInput, NumThreadsFarPastTheCoresIsAConfigError) {
  const int before = num_threads();
  expect_error([] { set_num_threads(65536); }, ErrorKind::kConfig,
               "num_threads=65536 is more than 8 threads per core");
  expect_error([] { set_num_threads(65535); }, ErrorKind::kConfig, "use at most");
  EXPECT_EQ(num_threads(), before);
  set_num_threads(2);
  EXPECT_EQ(num_threads(), 2);
  set_num_threads(before);
}

}  // namespace
}  // namespace tessera
