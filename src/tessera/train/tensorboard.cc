#include "tessera/train/tensorboard.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "tessera/core/crc32c.h"
#include "tessera/core/error.h"

namespace tessera::train {

namespace {

// Protobuf wire types (the low 3 bits of a field's key).
constexpr uint32_t kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5;

void put_varint(uint64_t v, std::string& out) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void put_key(uint32_t field, uint32_t wire_type, std::string& out) {
  put_varint((field << 3) | wire_type, out);
}
template <typename T>
void put_le(T v, std::string& out) {  // x86-64 is little-endian, as the wire format is
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}
void put_bytes(uint32_t field, std::string_view s, std::string& out) {
  put_key(field, kLengthDelimited, out);
  put_varint(s.size(), out);
  out.append(s);
}

size_t varint_size(uint64_t v) {
  size_t n = 1;
  for (; v >= 0x80; v >>= 7) ++n;
  return n;
}

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Event.wall_time (field 1, double) and Event.step (field 2, int64 as a varint; a negative step
// would take 10 bytes as in protobuf, but steps are >= 0).
void put_event_header(double wall_time, int64_t step, std::string& out) {
  put_key(1, kFixed64, out);
  put_le(wall_time, out);
  put_key(2, kVarint, out);
  put_varint(static_cast<uint64_t>(step), out);
}

}  // namespace

std::string encode_file_version_event(double wall_time) {
  std::string out;
  put_event_header(wall_time, 0, out);
  put_bytes(3, "brain.Event:2", out);
  return out;
}

void encode_scalars_event(double wall_time, int64_t step, std::span<const Scalar> scalars, std::string& out) {
  out.clear();
  put_event_header(wall_time, step, out);
  // Summary (field 5) is length-delimited, so its size comes first: each Value is
  // key(1) + len + tag, then key(1) + 4-byte float, wrapped as key(1) + len + value.
  size_t summary_size = 0;
  for (const Scalar& s : scalars) {
    const size_t value_size = 1 + varint_size(s.tag.size()) + s.tag.size() + 1 + 4;
    summary_size += 1 + varint_size(value_size) + value_size;
  }
  put_key(5, kLengthDelimited, out);
  put_varint(summary_size, out);
  for (const Scalar& s : scalars) {
    const size_t value_size = 1 + varint_size(s.tag.size()) + s.tag.size() + 1 + 4;
    put_key(1, kLengthDelimited, out);
    put_varint(value_size, out);
    put_bytes(1, s.tag, out);
    put_key(2, kFixed32, out);
    put_le(static_cast<float>(s.value), out);
  }
}

void append_tfrecord(std::string_view data, std::string& out) {
  const uint64_t len = data.size();
  char len_bytes[8];
  std::memcpy(len_bytes, &len, 8);
  out.append(len_bytes, 8);
  put_le(masked_crc32c(crc32c(len_bytes, 8)), out);
  out.append(data);
  put_le(masked_crc32c(crc32c(data.data(), data.size())), out);
}

TensorBoardWriter::TensorBoardWriter(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail(ErrorKind::kIo, "cannot create the TensorBoard folder '{}': {}", dir.string(), ec.message());
  char host[256] = "localhost";
  if (gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "localhost");
  const double now = unix_seconds();
  path_ = dir / fmt::format("events.out.tfevents.{}.{}", static_cast<int64_t>(now), host);
  // A run restarted within the same second on the same host would pick the same name: never
  // append to another writer's file, add the process id instead.
  int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0 && errno == EEXIST) {
    path_ += fmt::format(".{}", ::getpid());
    fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  }
  if (fd < 0) fail(ErrorKind::kIo, "{}: cannot create: {}", path_.string(), std::strerror(errno));
  file_ = ::fdopen(fd, "wb");
  if (!file_) {
    ::close(fd);
    fail(ErrorKind::kIo, "{}: fdopen failed: {}", path_.string(), std::strerror(errno));
  }
  put(encode_file_version_event(now));
  flush();
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_) std::fclose(file_);
}

void TensorBoardWriter::put(std::string_view data) {
  record_.clear();
  append_tfrecord(data, record_);
  if (std::fwrite(record_.data(), 1, record_.size(), file_) != record_.size())
    fail(ErrorKind::kIo, "{}: write failed: {}", path_.string(), std::strerror(errno));
}

void TensorBoardWriter::write(int64_t step, std::span<const Scalar> scalars) {
  encode_scalars_event(unix_seconds(), step, scalars, event_);
  put(event_);
}

void TensorBoardWriter::flush() {
  if (std::fflush(file_) != 0)
    fail(ErrorKind::kIo, "{}: flush failed: {}", path_.string(), std::strerror(errno));
}

}  // namespace tessera::train
