// Helpers shared by the data tests: a scratch folder removed at the end of the test.
#pragma once

#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <string_view>

namespace tessera::data::testing {

// A fresh folder under the system temp folder, named after the test and the process so that test
// binaries running side by side never share one; removed with its contents on destruction.
class TempDir {
 public:
  explicit TempDir(std::string_view name)
      : path_(std::filesystem::temp_directory_path() / fmt::format("tessera_{}_{}", name, ::getpid())) {
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace tessera::data::testing
