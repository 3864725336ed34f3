// TensorBoard event files: scalars that TensorBoard (and its Python reader, EventAccumulator)
// read, written without a protobuf or TensorFlow dependency.
//
// File: {dir}/events.out.tfevents.<unix time>.<hostname>, a sequence of TFRecords:
//   uint64 length | uint32 masked_crc32c(length bytes) | data[length] | uint32 masked_crc32c(data)
// (all little-endian). Each record's data is a serialized tensorflow.Event; the few fields used
// are encoded by hand:
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//   Summary { repeated Value value = 1; }
//   Value   { string tag = 1; float simple_value = 2; }
// The first record carries file_version "brain.Event:2" (TensorBoard's marker of the format);
// every later one carries one step's scalars in one Summary. Records are buffered by the C
// library and reach the file on flush() (the trainer flushes every log_period steps) and on
// destruction. Left out: histograms, images, text and the plugin metadata of tensor summaries
// (simple_value is what TensorBoard's scalar dashboard reads).
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>

namespace tessera::train {

struct Scalar {
  std::string_view tag;  // "learning/loss"
  double value;          // stored as float (simple_value is a float)
};

// Serialized tensorflow.Event messages (exposed for tests).
std::string encode_file_version_event(double wall_time);
void encode_scalars_event(double wall_time, int64_t step, std::span<const Scalar> scalars, std::string& out);
// One TFRecord around `data`, appended to `out`.
void append_tfrecord(std::string_view data, std::string& out);

class TensorBoardWriter {
 public:
  // Creates `dir` when needed and a new event file in it; throws kIo naming the path.
  explicit TensorBoardWriter(const std::filesystem::path& dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // One event with these scalars at `step`, stamped with the current wall time. Reuses its
  // buffers: no allocation once they have grown to a step's size.
  void write(int64_t step, std::span<const Scalar> scalars);
  // Pushes buffered records to the file (fflush); throws kIo when the write fails.
  void flush();
  const std::filesystem::path& path() const { return path_; }

 private:
  void put(std::string_view record);
  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
  std::string event_, record_;
};

}  // namespace tessera::train
