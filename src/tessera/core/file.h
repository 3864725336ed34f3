// Files: a read-only memory mapping, the whole-file read, and the one durable write of Tessera: a
// writer that never leaves a half-written file under the final name (temporary name in the same
// folder, fsync, rename, fsync of the folder). Checkpoints, configs, safetensors files, shards,
// tokenizer files and converted models are all written through it.
//
// Every failure throws tessera::Error(kIo) naming the file and what went wrong.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace tessera {

// A whole file mapped read-only. Empty files map to an empty span.
class MappedFile {
 public:
  explicit MappedFile(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return static_cast<const uint8_t*>(map_); }
  size_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  void* map_ = nullptr;
  size_t size_ = 0;
};

// Writes `path` through a temporary file in the same folder; commit() flushes, fsyncs and renames
// it into place. Destroyed without commit() (an exception on the way), it removes the temporary
// file and leaves any previous file at `path` untouched. Appends are buffered.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(const std::filesystem::path& path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void append(const void* data, size_t n);
  void append(std::string_view s) { append(s.data(), s.size()); }
  // Overwrites bytes already appended (e.g. a header written last); flushes the buffer first.
  void write_at(uint64_t offset, const void* data, size_t n);
  uint64_t size() const { return written_ + buffer_.size(); }
  void commit();

 private:
  void flush();
  std::filesystem::path path_, tmp_path_;
  int fd_ = -1;
  uint64_t written_ = 0;
  std::string buffer_;
};

// Inputs are read only from regular files: a FIFO, a device or a folder given where a file is
// expected would block or read forever, so it is refused with an error naming the path and what it
// is. The file is opened without blocking (O_NONBLOCK: opening a FIFO does not wait for a writer),
// checked with fstat, and the descriptor returned (the caller closes it). `what` names the input in
// the message ("config file", "token shard"). Throws kIo.
int open_regular_file(const std::filesystem::path& path, std::string_view what = "input file");

// The largest file read_file reads whole unless told otherwise: configs, manifests, tokenizer files
// and JSON sidecars are far smaller; a larger one is a wrong path, not an input.
inline constexpr uint64_t kReadFileLimit = uint64_t{1} << 30;  // 1 GiB

// The whole of a regular file as bytes; a file over max_bytes is refused naming its size and the
// limit. Throws kIo.
std::string read_file(const std::filesystem::path& path, uint64_t max_bytes = kReadFileLimit,
                      std::string_view what = "input file");
// Writes `text` to `path` atomically (through AtomicFileWriter).
void write_file_atomically(const std::filesystem::path& path, std::string_view text);
// fsync of a file or a folder (a folder's fsync makes the names in it durable: the renames).
void fsync_path(const std::filesystem::path& path);

}  // namespace tessera
