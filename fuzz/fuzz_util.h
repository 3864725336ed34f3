// What the libFuzzer harnesses in fuzz/ share: a scratch folder of this process for the readers
// that take a path (removed at exit), and the input split into parts.
//
// Each harness feeds its bytes to the real reader, through a file when the reader takes a path, and
// accepts only tessera::Error (a user error, STYLE.md 6) as an outcome other than success: any other
// exception escapes and libFuzzer reports it as a crash, like a signal, a sanitizer report, a leak
// or a timeout.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::fuzz {

// This process's scratch folder under $TMPDIR (or /tmp), created on first use.
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/tessera-fuzz-XXXXXX";
    if (!::mkdtemp(pattern.data())) std::abort();
    std::filesystem::path p = pattern;
    static struct Remover {
      std::filesystem::path p;
      ~Remover() {
        std::error_code ec;
        std::filesystem::remove_all(p, ec);
      }
    } remover{p};
    return p;
  }();
  return dir;
}

// Writes `bytes` to `name` in the scratch folder (replacing it) and returns its path.
inline std::filesystem::path write_scratch(const std::string& name, std::string_view bytes) {
  const std::filesystem::path p = scratch_dir() / name;
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) std::abort();
  return p;
}

// The input cut at every `sep` byte (the separators dropped); always at least one part.
inline std::vector<std::string_view> split_input(const uint8_t* data, size_t size, char sep) {
  std::string_view s(reinterpret_cast<const char*>(data), size);
  std::vector<std::string_view> parts;
  for (size_t at; (at = s.find(sep)) != std::string_view::npos;) {
    parts.push_back(s.substr(0, at));
    s.remove_prefix(at + 1);
  }
  parts.push_back(s);
  return parts;
}

}  // namespace tessera::fuzz
