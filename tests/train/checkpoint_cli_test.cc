// Checkpoints through the real program, as a user meets them: `tessera train` killed with SIGKILL
// after step 12 and started again with the same command continues from its last complete
// checkpoint and logs the same float32 losses, bit for bit, as a run that was never interrupted
// (compared through metrics_file, which carries 17 digits); SIGTERM makes a run save and exit 0.
// The binary comes from $TESSERA_BINARY (set by ctest), else from beside this test program.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tessera/checkpoint/checkpoint.h"
#include "tessera/core/source_dir.h"
#include "testing/process_util.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

using testing::Child;
using testing::read_until;
using testing::spawn;
using testing::tessera_binary;

struct Exit {
  bool exited = false;
  int code = -1, signal = 0;
};

Exit wait_for(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  Exit e;
  e.exited = WIFEXITED(status);
  if (e.exited) e.code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) e.signal = WTERMSIG(status);
  return e;
}

// Runs to completion; returns the exit code, the output in `text`.
int run_to_end(const std::vector<std::string>& args, std::string& text) {
  Child c = spawn(args);
  read_until(
      c.out, [](const std::string&) { return false; }, text);
  close(c.out);
  Exit e = wait_for(c.pid);
  return e.exited ? e.code : -1;
}

// metrics_file lines in order: (step, the JSON object).
std::vector<std::pair<int64_t, nlohmann::json>> read_metrics(const fs::path& p) {
  std::vector<std::pair<int64_t, nlohmann::json>> out;
  std::ifstream in(p);
  std::string line;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line);
    out.emplace_back(j["step"].get<int64_t>(), j);
  }
  return out;
}

class CheckpointCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::is_regular_file(tessera_binary())) {
      if (std::getenv("TESSERA_BINARY")) FAIL() << "TESSERA_BINARY=" << tessera_binary() << " is not a file";
      GTEST_SKIP() << "no tessera binary at " << tessera_binary();
    }
    std::string tmpl = (fs::path(::testing::TempDir()) / "tessera_ckpt_cli_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  std::vector<std::string> train_args(const std::string& run, std::vector<std::string> extra) const {
    std::vector<std::string> a = {"train",
                                  (tessera::source_dir() / "configs" / "base.yml").string(),
                                  "run_name=" + run,
                                  "base_output_directory=" + (dir_ / "runs").string(),
                                  "model_name=llama-test",
                                  "metrics_file=" + (dir_ / (run + ".jsonl")).string(),
                                  "log_period=1",
                                  "device_peak_tflops=1",
                                  "num_threads=1"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
  fs::path dir_;
};

TEST_F(CheckpointCli, KilledRunResumesWithBitIdenticalLosses) {
  // ~30 ms steps (batch 4 x 256 tokens on one thread): the kill lands long before the last step.
  const std::vector<std::string> shape = {"steps=20", "checkpoint_period=5", "per_device_batch_size=4",
                                          "max_target_length=256"};
  std::string text;
  ASSERT_EQ(run_to_end(train_args("straight", shape), text), 0) << text;

  Child c = spawn(train_args("killed", shape));
  ASSERT_GT(c.pid, 0);
  text.clear();
  const bool saw = read_until(
      c.out, [](const std::string& l) { return l.starts_with("completed step: 12,"); }, text);
  if (saw) kill(c.pid, SIGKILL);
  close(c.out);
  const Exit e = wait_for(c.pid);
  ASSERT_TRUE(saw) << "the run ended before step 12:\n" << text;
  ASSERT_EQ(e.signal, SIGKILL) << "the run finished before the kill landed:\n" << text;
  const std::vector<int64_t> left = checkpoint::list_checkpoints(dir_ / "runs" / "killed" / "checkpoints");
  ASSERT_FALSE(left.empty());  // 10 if its background write finished before the kill, else 5

  text.clear();
  ASSERT_EQ(run_to_end(train_args("killed", shape), text), 0) << text;
  EXPECT_NE(text.find("resumed from checkpoint " + (dir_ / "runs" / "killed" / "checkpoints").string()),
            std::string::npos)
      << text;

  const auto straight = read_metrics(dir_ / "straight.jsonl");
  const auto resumed = read_metrics(dir_ / "killed.jsonl");
  ASSERT_EQ(straight.size(), 20u);
  ASSERT_EQ(resumed.size(), 20u) << "a resumed run keeps one line per step";
  for (size_t i = 0; i < 20; ++i) {
    SCOPED_TRACE(i);
    ASSERT_EQ(resumed[i].first, static_cast<int64_t>(i));
    // The JSON numbers carry 17 significant digits: equal doubles mean equal bits.
    EXPECT_EQ(resumed[i].second["learning/loss"].get<double>(),
              straight[i].second["learning/loss"].get<double>());
    EXPECT_EQ(resumed[i].second["learning/grad_norm"].get<double>(),
              straight[i].second["learning/grad_norm"].get<double>());
  }
}

TEST_F(CheckpointCli, SigtermSavesAndExitsZero) {
  const std::vector<std::string> shape = {"steps=100000", "checkpoint_period=100000",
                                          "per_device_batch_size=2", "max_target_length=16"};
  Child c = spawn(train_args("term", shape));
  ASSERT_GT(c.pid, 0);
  std::string text;
  const bool saw = read_until(
      c.out, [](const std::string& l) { return l.starts_with("completed step: 3,"); }, text);
  if (saw) kill(c.pid, SIGTERM);
  read_until(
      c.out, [](const std::string&) { return false; }, text);
  close(c.out);
  const Exit e = wait_for(c.pid);
  ASSERT_TRUE(saw) << text;
  ASSERT_TRUE(e.exited) << "killed by signal " << e.signal << ":\n" << text;
  EXPECT_EQ(e.code, 0) << text;
  EXPECT_NE(text.find("received SIGTERM during step"), std::string::npos) << text;
  const size_t at = text.find("stopped by SIGTERM after ");
  ASSERT_NE(at, std::string::npos) << text;
  const int64_t steps = std::stoll(text.substr(at + std::strlen("stopped by SIGTERM after ")));
  EXPECT_GE(steps, 4);
  const fs::path ckpt = dir_ / "runs" / "term" / "checkpoints" / std::to_string(steps);
  EXPECT_NE(text.find("checkpoint " + std::to_string(steps) + ": saved to " + ckpt.string()),
            std::string::npos)
      << text;
  const nlohmann::json m = checkpoint::verify_checkpoint(ckpt);
  EXPECT_EQ(m["step"].get<int64_t>(), steps);
  // Started again, it continues from there.
  std::vector<std::string> again = train_args(
      "term", {"steps=" + std::to_string(steps + 2), "per_device_batch_size=2", "max_target_length=16"});
  text.clear();
  ASSERT_EQ(run_to_end(again, text), 0) << text;
  EXPECT_NE(text.find("continuing with step " + std::to_string(steps)), std::string::npos) << text;
  EXPECT_NE(text.find("completed step: " + std::to_string(steps + 1) + ","), std::string::npos) << text;
}

}  // namespace
}  // namespace tessera
