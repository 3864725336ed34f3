// Reading the documents of .txt and .jsonl files (documents.h).
#include "tessera/data/documents.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "tessera/core/error.h"
#include "tessera/core/file.h"
#include "tessera/data/files.h"

namespace tessera::data {
namespace fs = std::filesystem;

namespace {

bool is_jsonl(const fs::path& p) {
  return p.extension() == ".jsonl";
}

void check_text_extension(const fs::path& p) {
  const auto ext = p.extension().string();
  if (ext != ".txt" && ext != ".jsonl")
    fail(ErrorKind::kIo,
         "'{}': text datasets read .txt files (one document each) and .jsonl files (one "
         "document per line, in a \"text\" field); this file is neither",
         p.string());
}

uint64_t size_of(const fs::path& p) {
  std::error_code ec;
  const auto n = fs::file_size(p, ec);
  if (ec) fail(ErrorKind::kIo, "cannot stat '{}': {}", p.string(), ec.message());
  return n;
}

}  // namespace

std::string jsonl_text(std::string_view line, std::string_view where) {
  nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) fail(ErrorKind::kIo, "{}: not valid JSON", where);
  if (!j.is_object()) fail(ErrorKind::kIo, "{}: expected a JSON object with a \"text\" field", where);
  auto it = j.find("text");
  if (it == j.end()) fail(ErrorKind::kIo, "{}: the object has no \"text\" field", where);
  if (!it->is_string())
    fail(ErrorKind::kIo, "{}: \"text\" is a {}, expected a string", where, it->type_name());
  return it->get<std::string>();
}

std::vector<fs::path> resolve_text_files(const std::vector<std::string>& specs) {
  std::vector<fs::path> out;
  for (const std::string& s : specs)
    for (fs::path& p : resolve_data_files(s, kTextExtensions)) {
      check_text_extension(p);
      if (std::find(out.begin(), out.end(), p) == out.end()) out.push_back(std::move(p));
    }
  return out;
}

DocumentReader::DocumentReader(std::vector<fs::path> files) : files_(std::move(files)) {
  for (const fs::path& p : files_) {
    check_text_extension(p);
    bytes_total_ += size_of(p);
  }
}

const fs::path& DocumentReader::current_file() const {
  static const fs::path none;
  return last_file_ < files_.size() ? files_[last_file_] : none;
}

bool DocumentReader::next(std::string& text) {
  while (file_ < files_.size()) {
    const fs::path& p = files_[file_];
    last_file_ = file_;
    if (!is_jsonl(p)) {
      text = read_file(p);
      bytes_done_ += text.size();
      ++file_;
      return true;
    }
    if (!jsonl_.is_open()) {
      jsonl_.open(p, std::ios::binary);
      if (!jsonl_) fail(ErrorKind::kIo, "cannot open '{}'", p.string());
      line_ = 0;
      line_bytes_ = 0;
    }
    std::string line;
    while (std::getline(jsonl_, line)) {
      ++line_;
      line_bytes_ += line.size() + 1;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      text = jsonl_text(line, fmt::format("{}:{}", p.string(), line_));
      return true;
    }
    if (jsonl_.bad()) fail(ErrorKind::kIo, "cannot read '{}' after line {}", p.string(), line_);
    jsonl_.close();
    bytes_done_ += size_of(p);
    line_bytes_ = 0;
    ++file_;
  }
  return false;
}

DocumentIndex::DocumentIndex(std::vector<fs::path> files) : files_(std::move(files)) {
  for (uint32_t f = 0; f < files_.size(); ++f) {
    const fs::path& p = files_[f];
    check_text_extension(p);
    if (!is_jsonl(p)) {
      docs_.push_back({f, 0, size_of(p)});
      continue;
    }
    // One pass over the mapped file: each non-blank line is a document.
    MappedFile m(p);
    const char* s = reinterpret_cast<const char*>(m.data());
    uint64_t begin = 0;
    while (begin < m.size()) {
      const char* nl = static_cast<const char*>(std::memchr(s + begin, '\n', m.size() - begin));
      const uint64_t end = nl ? static_cast<uint64_t>(nl - s) : m.size();
      std::string_view line(s + begin, end - begin);
      if (line.find_first_not_of(" \t\r") != std::string_view::npos) docs_.push_back({f, begin, end - begin});
      begin = end + 1;
    }
  }
}

std::string DocumentIndex::read(uint64_t d) const {
  TESSERA_ASSERT(d < docs_.size());
  const Entry& e = docs_[d];
  const fs::path& p = files_[e.file];
  std::string bytes(e.length, '\0');
  std::ifstream in(p, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(e.offset));
  in.read(bytes.data(), static_cast<std::streamsize>(e.length));
  if (!in) fail(ErrorKind::kIo, "cannot read {} bytes at offset {} of '{}'", e.length, e.offset, p.string());
  if (!is_jsonl(p)) return bytes;
  return jsonl_text(bytes, fmt::format("{} (byte offset {})", p.string(), e.offset));
}

}  // namespace tessera::data
