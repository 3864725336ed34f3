// Metric outputs: CRC32C against published check values and its table reference; TensorBoard
// event files decoded here field by field and read by TensorBoard's own Python reader
// (tools/read_tensorboard.py, run by $TESSERA_PYTHON or python3; skipped with the reason when
// `tensorboard` cannot be imported);
// metrics_file JSON lines at full precision, trimmed on resume.
#include "tessera/train/tensorboard.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "tessera/core/crc32c.h"
#include "tessera/core/source_dir.h"
#include "tessera/train/metrics_writer.h"
#include "tessera/train/trainer.h"
#include "testing/process_util.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

fs::path make_temp_dir() {
  std::string tmpl = (fs::path(::testing::TempDir()) / "tessera_tb_XXXXXX").string();
  char* dir = mkdtemp(tmpl.data());
  EXPECT_NE(dir, nullptr);
  return dir ? fs::path(dir) : fs::path();
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(Crc32c, CheckValues) {
  // RFC 3720 B.4 and the CRC catalogue's check value ("123456789").
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  std::vector<uint8_t> zeros(32, 0), ones(32, 0xff), inc(32);
  for (int i = 0; i < 32; ++i) inc[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(crc32c(zeros.data(), 32), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones.data(), 32), 0x62A8AB43u);
  EXPECT_EQ(crc32c(inc.data(), 32), 0x46DD794Eu);
  EXPECT_EQ(crc32c(nullptr, 0), 0u);
}

TEST(Crc32c, MatchesTheTableAtEveryAlignmentAndChains) {
  std::mt19937 rng(3);
  std::vector<uint8_t> buf(4099 + 8);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  for (size_t offset : {0, 1, 3, 7})
    for (size_t n : {1, 7, 8, 9, 67, 4099}) {
      const uint8_t* p = buf.data() + offset;
      EXPECT_EQ(crc32c(p, n), crc32c_ref(p, n)) << offset << " " << n;
      const size_t cut = n / 3;
      EXPECT_EQ(crc32c(p + cut, n - cut, crc32c(p, cut)), crc32c_ref(p, n)) << n;
    }
}

// A minimal protobuf reader, written from the wire-format spec, to check the writer's bytes.
struct Reader {
  std::string_view s;
  size_t pos = 0;
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
      const auto b = static_cast<uint8_t>(s.at(pos++));
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
  }
  template <typename T>
  T fixed() {
    T v;
    std::memcpy(&v, s.substr(pos, sizeof(T)).data(), sizeof(T));
    pos += sizeof(T);
    return v;
  }
  std::string_view bytes() {
    const size_t n = varint();
    std::string_view out = s.substr(pos, n);
    pos += n;
    return out;
  }
  bool done() const { return pos >= s.size(); }
};

// The TFRecords of a file: checks the length and data CRCs, returns the payloads.
std::vector<std::string> records(const std::string& file) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < file.size()) {
    uint64_t len;
    uint32_t len_crc, data_crc;
    std::memcpy(&len, file.data() + pos, 8);
    std::memcpy(&len_crc, file.data() + pos + 8, 4);
    EXPECT_EQ(len_crc, masked_crc32c(crc32c_ref(file.data() + pos, 8)));
    std::string data = file.substr(pos + 12, len);
    std::memcpy(&data_crc, file.data() + pos + 12 + len, 4);
    EXPECT_EQ(data_crc, masked_crc32c(crc32c_ref(data.data(), data.size())));
    out.push_back(data);
    pos += 12 + len + 4;
  }
  EXPECT_EQ(pos, file.size());
  return out;
}

TEST(TensorBoard, EventFileDecodesFieldByField) {
  const fs::path dir = make_temp_dir();
  fs::path path;
  {
    train::TensorBoardWriter w(dir / "tb");
    path = w.path();
    const train::Scalar s[] = {{"learning/loss", 6.5}, {"perf/step_time_seconds", 0.125}};
    w.write(300, s);  // 300 takes a two-byte varint
  }
  EXPECT_TRUE(path.filename().string().starts_with("events.out.tfevents.")) << path;
  const std::vector<std::string> recs = records(read_file(path));
  ASSERT_EQ(recs.size(), 2u);
  Reader first{recs[0]};
  EXPECT_EQ(first.varint(), (1u << 3) | 1);  // wall_time, fixed64
  EXPECT_GT(first.fixed<double>(), 1.6e9);
  EXPECT_EQ(first.varint(), (2u << 3) | 0);  // step
  EXPECT_EQ(first.varint(), 0u);
  EXPECT_EQ(first.varint(), (3u << 3) | 2);  // file_version
  EXPECT_EQ(first.bytes(), "brain.Event:2");
  EXPECT_TRUE(first.done());

  Reader ev{recs[1]};
  EXPECT_EQ(ev.varint(), (1u << 3) | 1);
  ev.fixed<double>();
  EXPECT_EQ(ev.varint(), (2u << 3) | 0);
  EXPECT_EQ(ev.varint(), 300u);
  EXPECT_EQ(ev.varint(), (5u << 3) | 2);  // summary
  Reader summary{ev.bytes()};
  EXPECT_TRUE(ev.done());
  std::map<std::string, float> got;
  while (!summary.done()) {
    EXPECT_EQ(summary.varint(), (1u << 3) | 2);  // value
    Reader value{summary.bytes()};
    EXPECT_EQ(value.varint(), (1u << 3) | 2);  // tag
    std::string tag(value.bytes());
    EXPECT_EQ(value.varint(), (2u << 3) | 5);  // simple_value, fixed32
    got[tag] = value.fixed<float>();
    EXPECT_TRUE(value.done());
  }
  EXPECT_EQ(got, (std::map<std::string, float>{{"learning/loss", 6.5f}, {"perf/step_time_seconds", 0.125f}}));
  fs::remove_all(dir);
}

TEST(TensorBoard, TensorBoardsOwnReaderReadsTheTrainersScalars) {
  const std::string py = testing::test_python();
  if (!testing::python_imports("tensorboard"))
    GTEST_SKIP()
        << "'" << py << " -c \"import tensorboard\"' fails: install the reader with `" << py
        << " -m pip install tensorboard` (scripts/setup.sh does) or point TESSERA_PYTHON at a Python "
           "that has it";
  const fs::path dir = make_temp_dir();
  Config cfg =
      load_config(tessera::source_dir() / "configs" / "base.yml",
                  std::vector<std::string>{
                      "run_name=tb", "base_output_directory=" + (dir / "runs").string(),
                      "model_name=llama-test", "per_device_batch_size=2", "max_target_length=16", "steps=7",
                      "log_period=3", "enable_checkpointing=false", "device_peak_tflops=1", "num_threads=1"});
  std::vector<train::StepMetrics> ms;
  {
    std::ostringstream log;
    train::Trainer t(cfg, log);
    t.run([&](const train::StepMetrics& m) { ms.push_back(m); });
  }
  const std::string cmd = py + " " + tessera::source_dir().string() + "/tools/read_tensorboard.py " +
                          (dir / "runs" / "tb" / "tensorboard").string() + " >" +
                          (dir / "read.txt").string() + " 2>" + (dir / "read.err").string();
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << cmd << "\n" << read_file(dir / "read.err");
  std::map<std::string, std::map<int64_t, double>> got;
  std::istringstream in(read_file(dir / "read.txt"));
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "file_version\t2.0");
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string tag, value;
    int64_t step;
    std::getline(f, tag, '\t');
    f >> step;
    f.ignore(1);
    std::getline(f, value);
    got[tag][step] = std::strtod(value.c_str(), nullptr);
  }
  ASSERT_EQ(ms.size(), 7u);
  // simple_value is a float: TensorBoard reads back exactly the float nearest each value.
  auto expect_series = [&](const std::string& tag, auto value_of, const std::vector<int64_t>& steps) {
    SCOPED_TRACE(tag);
    ASSERT_EQ(got[tag].size(), steps.size());
    for (int64_t s : steps)
      EXPECT_EQ(got[tag][s], static_cast<double>(static_cast<float>(value_of(ms[s])))) << s;
  };
  const std::vector<int64_t> all = {0, 1, 2, 3, 4, 5, 6};
  expect_series(
      "learning/loss", [](auto& m) { return m.loss; }, all);
  expect_series(
      "learning/grad_norm", [](auto& m) { return m.grad_norm; }, all);
  expect_series(
      "learning/current_learning_rate", [](auto& m) { return m.learning_rate; }, all);
  expect_series(
      "learning/total_weights", [](auto& m) { return static_cast<double>(m.total_weights); }, all);
  expect_series(
      "perf/step_time_seconds", [](auto& m) { return m.seconds; }, all);
  expect_series(
      "perf/per_device_tflops_per_sec", [](auto& m) { return m.tflops_per_device; }, all);
  expect_series(
      "perf/per_device_tokens_per_sec", [](auto& m) { return m.tokens_per_device; }, all);
  expect_series(
      "perf/per_device_hardware_tflops_per_sec", [](auto& m) { return m.hw_tflops_per_device; }, all);
  expect_series(
      "perf/hfu", [](auto& m) { return m.hfu; }, all);
  // The parameter norm is computed on log steps only: 0, 3 and the last.
  expect_series("learning/param_norm", [](auto& m) { return *m.param_norm; }, {0, 3, 6});
  fs::remove_all(dir);
}

TEST(MetricsFile, FullPrecisionLinesTrimmedOnResume) {
  const fs::path dir = make_temp_dir();
  const fs::path p = dir / "sub" / "m.jsonl";
  const double loss = 6.123456789012345678;
  {
    train::MetricsFile f(p, 0);
    for (int64_t s = 0; s < 5; ++s) {
      const train::Scalar sc[] = {{"learning/loss", loss + s}, {"perf/mfu", s == 2 ? std::nan("") : 0.5}};
      f.write(s, sc);
    }
  }
  std::string text = read_file(p);
  EXPECT_NE(text.find("{\"step\": 2, \"learning/loss\": 8.1234567890123444, \"perf/mfu\": null}\n"),
            std::string::npos)
      << text;
  {  // A killed run can leave half a line: a resumed run from step 3 keeps steps 0..2 and drops it.
    std::ofstream(p, std::ios::app) << "{\"step\": 5, \"learning/lo";
  }
  {
    train::MetricsFile f(p, 3);
    const train::Scalar sc[] = {{"learning/loss", 1.0}};
    f.write(3, sc);
  }
  std::istringstream in(read_file(p));
  std::vector<int64_t> steps;
  for (std::string line; std::getline(in, line);) {
    nlohmann::json j = nlohmann::json::parse(line);
    steps.push_back(j["step"].get<int64_t>());
    if (j["step"] == 1) {
      EXPECT_EQ(j["learning/loss"].get<double>(), loss + 1);  // bit for bit
    }
  }
  EXPECT_EQ(steps, (std::vector<int64_t>{0, 1, 2, 3}));
  {  // A fresh run (step 0) starts the file again.
    train::MetricsFile f(p, 0);
  }
  EXPECT_EQ(read_file(p), "");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tessera
