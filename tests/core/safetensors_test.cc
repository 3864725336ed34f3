// The safetensors reader against malformed headers (each case one the fuzzer in
// fuzz/safetensors_fuzz.cc reached): every one is refused with kIo naming the file, never with
// another exception, a wrapped size or a leaked mapping.
#include "tessera/core/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "tessera/core/error.h"

namespace tessera {
namespace {

// The file is named per process: TempDir() is /tmp, shared with whatever else runs there at once.
std::filesystem::path write_file(const std::string& name, const std::string& header, size_t data_bytes) {
  const auto path = std::filesystem::path(::testing::TempDir()) / (std::to_string(::getpid()) + "-" + name);
  std::string bytes(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(bytes.data(), &n, 8);
  bytes += header + std::string(data_bytes, '\0');
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

// The lines of /proc/self/maps that name `path`: the file's live mappings.
int mappings_of(const std::filesystem::path& path) {
  std::ifstream maps("/proc/self/maps");
  int n = 0;
  for (std::string line; std::getline(maps, line);) n += line.find(path.string()) != std::string::npos;
  return n;
}

void expect_io_error(const std::string& header, const std::string& says) {
  const auto path = write_file("bad.safetensors", header, 64);
  try {
    SafetensorsFile f(path.string());
    ADD_FAILURE() << "opened a file with header " << header;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo) << e.what();
    EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
  }
  EXPECT_EQ(mappings_of(path), 0) << "the refused file is still mapped";
  std::filesystem::remove(path);
}

TEST(SafetensorsErrors, MalformedEntriesAreRefusedWithTheFileNamed) {
  expect_io_error(R"({"a": {"dtype": "F32", "data_offsets": [0, 4]}})", "shape");
  expect_io_error(R"({"a": {"dtype": "F32", "shape": "x", "data_offsets": [0, 4]}})", "shape");
  expect_io_error(R"({"a": {"dtype": "F32", "shape": ["1"], "data_offsets": [0, 4]}})", "shape");
  expect_io_error(R"({"a": {"dtype": "F32", "shape": [1e300], "data_offsets": [0, 4]}})", "shape");
  expect_io_error(R"({"a": {"dtype": "F32", "shape": [1, 1, 1, 1, 1, 1, 1], "data_offsets": [0, 4]}})",
                  "shape");
  expect_io_error(R"({"a": {"dtype": "F32", "shape": [1]}})", "data_offsets");
  expect_io_error(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4.5]}})", "data_offsets");
  expect_io_error(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]}})", "data_offsets");
  expect_io_error(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": 3}})", "data_offsets");
  expect_io_error(R"({"__metadata__": 3})", "__metadata__");
}

// 2^32 x 2^32 elements wrap int64 to 0 bytes: with an empty data range the size check passed and
// the tensor claimed 2^64 elements over no bytes.
TEST(SafetensorsErrors, ShapeWhoseSizeWrapsIsRefused) {
  expect_io_error(R"({"a": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]}})",
                  "too large");
  expect_io_error(R"({"a": {"dtype": "F32", "shape": [-1, -4], "data_offsets": [0, 16]}})", "negative");
}

TEST(SafetensorsErrors, RefusedFileLeavesNoMapping) {
  expect_io_error(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 400]}})", "truncated");
}

TEST(Safetensors, AWellFormedFileOpens) {
  const auto path = write_file("good.safetensors",
                               R"({"a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},)"
                               R"( "e": {"dtype": "I32", "shape": [0], "data_offsets": [24, 24]},)"
                               R"( "__metadata__": {"step": "3"}})",
                               24);
  SafetensorsFile f(path.string());
  EXPECT_EQ(f.get("a").shape(), (Shape{2, 3}));
  EXPECT_EQ(f.get("e").numel(), 0);
  EXPECT_EQ(f.metadata().at("step"), "3");
  EXPECT_EQ(mappings_of(path), 1);
}

}  // namespace
}  // namespace tessera
