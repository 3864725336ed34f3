// The hang watchdog (train/diagnostics.h) under `mpirun -np 2 tessera train`: rank 1 sleeps 60 s
// inside its first collective of step 4 (the test hook TESSERA_TEST_SLEEP_IN_COLLECTIVE, before
// the MPI call), rank 0 waits for it inside MPI. With a 2 s floor both watchdogs fire after about
// 2 s: each rank dumps its stacks and writes its report, and the job exits non-zero well before
// the sleep ends, with a message that names rank 1 as the slow one and rank 0 as waiting inside
// MPI.
#include <gtest/gtest.h>

#include <chrono>

#include "dist_test_util.h"
#include "tessera/core/source_dir.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

TEST(HangWatchdog, NamesTheRankThatSleepsInACollective) {
  if (!testing::have_mpirun()) GTEST_SKIP() << "mpirun is not installed (Debian: openmpi-bin)";
  testing::TempDir dir("hang");
  const std::vector<std::string> args = {"model_name=llama-test",
                                         "run_name=hang",
                                         "base_output_directory=" + dir.path.string(),
                                         "max_target_length=32",
                                         "per_device_batch_size=2",
                                         "steps=40",
                                         "log_period=1",
                                         "num_threads=1",
                                         "device_peak_tflops=1",
                                         "enable_checkpointing=false",
                                         "enable_tensorboard=false",
                                         "hang_watchdog_step_multiple=5",
                                         "hang_watchdog_min_seconds=2"};
  std::string cmd = "TESSERA_TEST_SLEEP_IN_COLLECTIVE=1:4:60 " + testing::mpirun(2) +
                    " -x TESSERA_TEST_SLEEP_IN_COLLECTIVE " +
                    testing::shell_quote(testing::tessera_binary().string()) + " train " +
                    testing::shell_quote(tessera::source_dir().string() + "/configs/base.yml");
  cmd += testing::shell_words(args);
  const auto t0 = std::chrono::steady_clock::now();
  const testing::CommandResult r = testing::run_command(cmd, 50);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_NE(r.exit_code, 124) << "the job outlived the watchdog:\n" << r.output;
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_LT(seconds, 40) << "the job ended only when the sleep did";
  const std::string& out = r.output;
  EXPECT_NE(out.find("hang watchdog: step 4 has run"), std::string::npos) << out;
  EXPECT_NE(out.find("slow rank 1: rank 1 of 2 on host"), std::string::npos) << out;
  EXPECT_NE(out.find("called, not yet inside MPI"), std::string::npos) << out;
  EXPECT_NE(out.find("waiting: rank 0 of 2"), std::string::npos) << out;
  EXPECT_NE(out.find("waiting for the other ranks inside MPI"), std::string::npos) << out;
  // Every rank's stacks, with the executor's frames on the main thread.
  EXPECT_NE(out.find("=== stack traces (hang watchdog: step 4"), std::string::npos) << out;
  EXPECT_NE(out.find("Executor::run_range"), std::string::npos) << out;
  for (int rank : {0, 1}) {
    const fs::path report =
        dir.path / "hang" / "diagnostics" / ("hang.rank" + std::to_string(rank) + ".json");
    ASSERT_TRUE(fs::exists(report)) << report;
    std::ifstream in(report);
    const nlohmann::json j = nlohmann::json::parse(in);
    EXPECT_EQ(j.at("rank"), rank);
    EXPECT_EQ(j.at("step"), 4);
    EXPECT_EQ(j.at("in_collective_wait"), rank == 0);
  }
  std::cout << "[ hang     ] the job ended " << seconds << " s after it started (exit " << r.exit_code
            << ")\n";
}

}  // namespace
}  // namespace tessera
