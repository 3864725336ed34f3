// Helpers for tests that run the built `tessera` program.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

namespace tessera::testing {

// The program under test: $TESSERA_BINARY (CMake sets it), else `tessera` beside the test binary.
inline std::filesystem::path tessera_binary() {
  if (const char* env = std::getenv("TESSERA_BINARY"); env && *env) return env;
  return std::filesystem::read_symlink("/proc/self/exe").parent_path() / "tessera";
}

// `s` as one single-quoted word for /bin/sh.
inline std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace tessera::testing
