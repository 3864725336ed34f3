#include "tessera/train/metrics_writer.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tessera/core/error.h"
#include "tessera/core/file.h"

namespace tessera::train {

namespace fs = std::filesystem;

namespace {

// The lines of `path` whose step is below `start_step`; lines that do not parse (a partial line
// left by a killed run) are dropped.
std::string kept_lines(const fs::path& path, int64_t start_step) {
  std::ifstream in(path);
  std::string kept, line;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("step") && j["step"].is_number_integer() &&
        j["step"].get<int64_t>() < start_step)
      kept.append(line).push_back('\n');
  }
  return kept;
}

}  // namespace

MetricsFile::MetricsFile(const fs::path& path, int64_t start_step) : path_(path) {
  std::error_code ec;
  if (path.has_parent_path()) fs::create_directories(path.parent_path(), ec);
  if (ec)
    fail(ErrorKind::kIo, "metrics_file '{}': cannot create its folder: {}", path.string(), ec.message());
  if (start_step > 0 && fs::exists(path)) {
    // Keep the earlier steps' lines: write them to a temporary name and rename it over the file,
    // so that a crash here leaves the old file or the new one, never a half-written one.
    const std::string kept = kept_lines(path, start_step);
    write_file_atomically(path, kept);
  }
  file_ = std::fopen(path.c_str(), start_step > 0 ? "ab" : "wb");
  if (!file_) fail(ErrorKind::kIo, "metrics_file '{}': cannot open: {}", path.string(), std::strerror(errno));
}

MetricsFile::~MetricsFile() {
  if (file_) std::fclose(file_);
}

void MetricsFile::write(int64_t step, std::span<const Scalar> scalars) {
  line_.clear();
  fmt::format_to(std::back_inserter(line_), "{{\"step\": {}", step);
  for (const Scalar& s : scalars) {
    if (std::isfinite(s.value))
      fmt::format_to(std::back_inserter(line_), ", \"{}\": {:.17g}", s.tag, s.value);
    else
      fmt::format_to(std::back_inserter(line_), ", \"{}\": null", s.tag);
  }
  line_ += "}\n";
  if (std::fwrite(line_.data(), 1, line_.size(), file_) != line_.size())
    fail(ErrorKind::kIo, "metrics_file '{}': write failed: {}", path_.string(), std::strerror(errno));
}

void MetricsFile::flush() {
  if (std::fflush(file_) != 0)
    fail(ErrorKind::kIo, "metrics_file '{}': flush failed: {}", path_.string(), std::strerror(errno));
}

void MetricsFile::sync() {
  flush();
  if (::fsync(::fileno(file_)) != 0)
    fail(ErrorKind::kIo, "metrics_file '{}': fsync failed: {}", path_.string(), std::strerror(errno));
}

}  // namespace tessera::train
