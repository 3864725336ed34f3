// A rank killed in an expert-parallel job ends the whole job quickly, and the same command resumes
// it: `mpirun -np 2 tessera train ... ici_expert_parallelism=2` (Mixtral's test model, checkpoints
// every 4 steps) has one rank SIGKILLed after its first checkpoint. Every step runs 8 ragged
// all-to-alls (2 layers x dispatch and combine x forward and backward), so the surviving rank
// blocks in an exchange with the dead one (or in the next collective); mpirun must exit non-zero
// within 30 seconds, and running the command again resumes from the last complete checkpoint
// and logs the same losses, bit for bit, as a run that was never interrupted (same mesh, same
// threads: the same arithmetic in the same order).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <thread>

#include "dist/dist_test_util.h"
#include "tessera/core/source_dir.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr int kSteps = 40;

std::string train_command(const fs::path& out, const std::string& run) {
  const std::vector<std::string> args = {"model_name=mixtral-test",
                                         "run_name=" + run,
                                         "base_output_directory=" + out.string(),
                                         "metrics_file=" + (out / (run + ".jsonl")).string(),
                                         "ici_expert_parallelism=2",
                                         "ici_fsdp_parallelism=1",
                                         "max_target_length=64",
                                         "per_device_batch_size=2",
                                         "steps=" + std::to_string(kSteps),
                                         "learning_rate_schedule_steps=" + std::to_string(kSteps),
                                         "log_period=1",
                                         "checkpoint_period=4",
                                         "num_threads=1",
                                         "device_peak_tflops=1",
                                         "enable_tensorboard=false"};
  std::string s = testing::mpirun(2) + " " + testing::shell_quote(testing::tessera_binary().string()) +
                  " train " + testing::shell_quote(tessera::source_dir().string() + "/configs/base.yml");
  s += testing::shell_words(args);
  return s;
}

TEST(ExpertParallelKill, JobEndsQuicklyAndTheSameCommandResumes) {
  if (!fs::is_regular_file(testing::tessera_binary()))
    GTEST_SKIP() << "no tessera binary at " << testing::tessera_binary();
  if (!testing::have_mpirun()) GTEST_SKIP() << "mpirun is not installed (Debian: openmpi-bin)";
  testing::TempDir dir("ep-kill");
  const testing::CommandResult straight = testing::run_command(train_command(dir.path, "straight"), 300);
  ASSERT_EQ(straight.exit_code, 0) << straight.output;

  const std::string cmd = train_command(dir.path, "killed");
  testing::PipedChild c = testing::spawn_piped(cmd);
  ASSERT_GT(c.pid, 0);
  const auto deadline = Clock::now() + std::chrono::seconds(120);
  while (c.text.find("checkpoint 4: saved") == std::string::npos && Clock::now() < deadline) {
    if (!c.read_some()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_NE(c.text.find("checkpoint 4: saved"), std::string::npos) << c.text;
  const std::vector<pid_t> ranks = testing::children_named(c.pid, "tessera");
  ASSERT_EQ(ranks.size(), 2u) << "mpirun's children";
  ASSERT_EQ(kill(ranks[1], SIGKILL), 0);
  const auto killed_at = Clock::now();
  int status = 0;
  pid_t done = 0;
  while ((done = waitpid(c.pid, &status, WNOHANG)) == 0 &&
         Clock::now() - killed_at < std::chrono::seconds(30)) {
    c.read_some();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - killed_at).count();
  if (done == 0) {  // a hang: end it (this test's own child) before failing
    kill(c.pid, SIGKILL);
    waitpid(c.pid, &status, 0);
  }
  c.read_some();
  close(c.out);
  ASSERT_EQ(done, c.pid) << "mpirun still running 30 s after a rank was killed:\n" << c.text;
  EXPECT_FALSE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << c.text;
  EXPECT_LT(seconds, 30.0);
  std::cout << "[ kill     ] mpirun exited " << seconds << " s after SIGKILL of expert rank 1 (status "
            << status << ")\n";

  const testing::CommandResult resumed = testing::run_command(cmd, 300);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from checkpoint"), std::string::npos) << resumed.output;
  const auto a = testing::read_metrics(dir.path / "straight.jsonl");
  const auto b = testing::read_metrics(dir.path / "killed.jsonl");
  ASSERT_EQ(a.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(b.size(), static_cast<size_t>(kSteps)) << resumed.output;
  for (int64_t s = 0; s < kSteps; ++s)
    EXPECT_EQ(b.at(s).at("learning/loss"), a.at(s).at("learning/loss")) << s;
}

}  // namespace
}  // namespace tessera
