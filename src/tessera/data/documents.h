// Documents of a text dataset: what `prepare-data`, tokenizer training and the `text` dataset read.
//   - a .txt file is one document (its whole text);
//   - each non-empty line of a .jsonl file is one document: the string in its "text" field.
// Other extensions are refused, so that a stray binary file is never read as text.
//
// DocumentReader streams documents in file order holding one document at a time. DocumentIndex
// scans the files once and keeps (file, byte offset, byte length) per document, 24 bytes each, so
// documents can be read in any order without holding the corpus in memory.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::data {

inline constexpr std::string_view kTextExtensions[] = {".txt", ".jsonl"};

// resolve_data_files with the text extensions, for each of `specs` in turn (duplicates removed).
std::vector<std::filesystem::path> resolve_text_files(const std::vector<std::string>& specs);

class DocumentReader {
 public:
  explicit DocumentReader(std::vector<std::filesystem::path> files);

  // The next document's text; false after the last. Throws kIo for an unreadable file or a .jsonl
  // line that is not a JSON object with a string "text" field (naming file and line).
  bool next(std::string& text);

  uint64_t bytes_read() const { return bytes_done_ + line_bytes_; }  // of the files, so far
  uint64_t bytes_total() const { return bytes_total_; }
  // The file the last document came from.
  const std::filesystem::path& current_file() const;

 private:
  bool open_next_file();
  std::vector<std::filesystem::path> files_;
  size_t file_ = 0;
  size_t last_file_ = 0;
  std::ifstream jsonl_;  // the open .jsonl file, read line by line
  uint64_t line_ = 0;
  uint64_t bytes_done_ = 0, line_bytes_ = 0, bytes_total_ = 0;
};

class DocumentIndex {
 public:
  explicit DocumentIndex(std::vector<std::filesystem::path> files);

  uint64_t size() const { return docs_.size(); }
  // Document d's text. Throws kIo as DocumentReader does.
  std::string read(uint64_t d) const;
  const std::vector<std::filesystem::path>& files() const { return files_; }

 private:
  struct Entry {
    uint32_t file;
    uint64_t offset, length;
  };
  std::vector<std::filesystem::path> files_;
  std::vector<Entry> docs_;
};

// The "text" field of one .jsonl line; `where` ("file.jsonl:12") goes into error messages.
std::string jsonl_text(std::string_view line, std::string_view where);

}  // namespace tessera::data
