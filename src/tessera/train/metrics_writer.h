// metrics_file: one JSON object per training step, one per line (JSON Lines), keyed as MaxText's
// metrics_file is: "step" and the TensorBoard tag of each scalar:
//   {"step": 12, "learning/loss": 6.8450336456298828, "learning/grad_norm": 0.72..., ...}
// Every number is written with 17 significant digits, so a double reads back bit for bit (the
// resume tests compare losses this way); a non-finite value is written as null (JSON has no NaN).
//
// A fresh run (start step 0) truncates the file, as MaxText does. A resumed run first drops the
// lines of the steps it is about to repeat (and a partial last line left by a killed process), so
// the file holds each step once, in order. Lines are buffered and reach the file on flush() (every
// log_period steps) and on destruction; sync() also fsyncs them, and the trainer calls it before it
// saves a checkpoint, so that a process killed after the checkpoint is published has the lines of
// every step the checkpoint covers on disk (the resume then repeats none and loses none).
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <span>
#include <string>

#include "tessera/train/tensorboard.h"

namespace tessera::train {

class MetricsFile {
 public:
  // Opens `path` (creating its folder) for a run that starts at `start_step`; throws kIo.
  MetricsFile(const std::filesystem::path& path, int64_t start_step);
  ~MetricsFile();
  MetricsFile(const MetricsFile&) = delete;
  MetricsFile& operator=(const MetricsFile&) = delete;

  void write(int64_t step, std::span<const Scalar> scalars);
  void flush();
  void sync();  // flush() and fsync
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
  std::string line_;
};

}  // namespace tessera::train
