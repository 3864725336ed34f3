// Read-only mappings, whole-file reads and durable writes (file.h).
#include "tessera/core/file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "tessera/core/error.h"

namespace tessera {
namespace fs = std::filesystem;

namespace {

constexpr size_t kWriteBuffer = size_t{1} << 20;  // appends are gathered into 1 MiB writes

[[noreturn]] void io_fail(std::string_view what, const fs::path& path) {
  fail(ErrorKind::kIo, "{} '{}': {}", what, path.string(), std::strerror(errno));
}

const char* file_type_name(mode_t mode) {
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

int open_regular_file(const fs::path& path, std::string_view what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) fail(ErrorKind::kIo, "cannot open {} '{}': {}", what, path.string(), std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    fail(ErrorKind::kIo, "cannot stat {} '{}': {}", what, path.string(), std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(ErrorKind::kIo, "{} '{}' is {}; expected a regular file", what, path.string(),
         file_type_name(st.st_mode));
  }
  // Regular files ignore O_NONBLOCK for reads; cleared anyway so the descriptor behaves as usual.
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

MappedFile::MappedFile(const fs::path& path) : path_(path) {
  const int fd = open_regular_file(path);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    io_fail("cannot stat", path);
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    map_ = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map_ == MAP_FAILED) {
      map_ = nullptr;
      ::close(fd);
      io_fail("cannot map", path);
    }
  }
  ::close(fd);
}

MappedFile::~MappedFile() {
  if (map_) ::munmap(map_, size_);
}

AtomicFileWriter::AtomicFileWriter(const fs::path& path) : path_(path) {
  tmp_path_ = path;
  tmp_path_ += fmt::format(".tmp.{}", ::getpid());
  std::error_code ec;
  if (path.has_parent_path()) fs::create_directories(path.parent_path(), ec);
  fd_ = ::open(tmp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) io_fail("cannot create", tmp_path_);
  buffer_.reserve(kWriteBuffer);
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_path_.c_str());
  }
}

void AtomicFileWriter::flush() {
  size_t done = 0;
  while (done < buffer_.size()) {
    const ssize_t n = ::write(fd_, buffer_.data() + done, buffer_.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      io_fail("cannot write", tmp_path_);
    }
    done += static_cast<size_t>(n);
  }
  written_ += buffer_.size();
  buffer_.clear();
}

void AtomicFileWriter::append(const void* data, size_t n) {
  if (buffer_.size() + n > kWriteBuffer) flush();
  if (n > kWriteBuffer) {  // large blocks skip the buffer
    buffer_.assign(static_cast<const char*>(data), n);
    flush();
    return;
  }
  buffer_.append(static_cast<const char*>(data), n);
}

void AtomicFileWriter::write_at(uint64_t offset, const void* data, size_t n) {
  flush();
  TESSERA_ASSERT(offset + n <= written_);
  if (::pwrite(fd_, data, n, static_cast<off_t>(offset)) != static_cast<ssize_t>(n))
    io_fail("cannot write", tmp_path_);
}

void AtomicFileWriter::commit() {
  flush();
  if (::fsync(fd_) != 0) io_fail("cannot fsync", tmp_path_);
  if (::close(fd_) != 0) {
    fd_ = -1;
    io_fail("cannot close", tmp_path_);
  }
  fd_ = -1;
  if (::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp_path_.c_str());
    errno = e;
    io_fail("cannot rename into place", path_);
  }
  const fs::path dir = path_.has_parent_path() ? path_.parent_path() : fs::path(".");
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);  // makes the rename durable; a failure here loses nothing already written
    ::close(dfd);
  }
}

std::string read_file(const fs::path& path, uint64_t max_bytes, std::string_view what) {
  const int fd = open_regular_file(path, what);
  struct stat st {};
  ::fstat(fd, &st);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size > max_bytes) {
    ::close(fd);
    fail(ErrorKind::kIo, "{} '{}' has {} bytes, more than the {} bytes read whole; wrong path?", what,
         path.string(), size, max_bytes);
  }
  std::string text;
  text.reserve(size);
  char buf[65536];
  for (;;) {
    const ssize_t r = ::read(fd, buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      const int e = errno;
      ::close(fd);
      fail(ErrorKind::kIo, "cannot read {} '{}' at offset {}: {}", what, path.string(), text.size(),
           std::strerror(e));
    }
    if (r == 0) break;
    // A file growing while it is read is still held to the limit.
    if (text.size() + static_cast<size_t>(r) > max_bytes) {
      ::close(fd);
      fail(ErrorKind::kIo, "{} '{}' grew past {} bytes while being read", what, path.string(), max_bytes);
    }
    text.append(buf, static_cast<size_t>(r));
  }
  ::close(fd);
  return text;
}

void write_file_atomically(const fs::path& path, std::string_view text) {
  AtomicFileWriter w(path);
  w.append(text);
  w.commit();
}

void fsync_path(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) io_fail("cannot open to fsync", path);
  const int rc = ::fsync(fd);
  if (rc != 0) {
    const int e = errno;
    ::close(fd);
    errno = e;
    io_fail("cannot fsync", path);
  }
  ::close(fd);
}

}  // namespace tessera
