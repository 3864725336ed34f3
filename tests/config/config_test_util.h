// Helpers shared by the config and CLI tests: paths of fixtures and presets, a checker for
// Error messages, a value-by-value comparison of two configs, and a fresh temporary folder.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "tessera/config/config.h"
#include "tessera/config/schema.h"
#include "tessera/core/error.h"
#include "tessera/core/source_dir.h"
#include "testing/data_dir.h"

namespace tessera::testing {

inline std::filesystem::path fixture(const std::string& name) {
  return tessera::testing::data_dir() / name;
}
inline std::filesystem::path base_config() {
  return tessera::source_dir() / "configs" / "base.yml";
}

// Runs `body`, expects an Error of `kind` whose message contains every one of `parts`; returns
// the message so that a test can check more.
inline std::string expect_error(const std::function<void()>& body, ErrorKind kind,
                                const std::vector<std::string>& parts) {
  try {
    body();
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_EQ(static_cast<int>(e.kind()), static_cast<int>(kind)) << msg;
    for (const std::string& p : parts)
      EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
    return msg;
  }
  ADD_FAILURE() << "expected an error";
  return "";
}

inline std::string expect_config_error(const std::function<void()>& body,
                                       const std::vector<std::string>& parts) {
  return expect_error(body, ErrorKind::kConfig, parts);
}

// Every key's value as text, one "key: value" per line: equal strings mean equal configs (floats
// are written in their shortest exact form, so this compares them exactly).
inline std::string key_values(const Config& cfg, const std::vector<std::string>& skip = {}) {
  std::string out;
  for (const config::FieldSpec& f : config::schema()) {
    if (std::find(skip.begin(), skip.end(), f.name) != skip.end()) continue;
    out += std::string(f.name) + ": " + config::format_value(f, cfg) + "\n";
  }
  return out;
}

inline Config load(const std::filesystem::path& file, std::vector<std::string> overrides = {},
                   const DeviceCount& devices = {}) {
  return load_config(file, overrides, devices);
}

// A new empty folder under the test temporary directory.
inline std::filesystem::path make_temp_dir() {
  std::string tmpl = (std::filesystem::path(::testing::TempDir()) / "tessera_config_XXXXXX").string();
  char* dir = mkdtemp(tmpl.data());
  EXPECT_NE(dir, nullptr);
  return dir ? std::filesystem::path(dir) : std::filesystem::path();
}

}  // namespace tessera::testing
