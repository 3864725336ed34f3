// Across hosts: netns_two_hosts.sh runs one `tessera train` job over two network namespaces joined
// by a veth pair (two hosts as OpenMPI and Tessera see them: two host names, TCP between them),
// with dcn_data_parallelism=2. Its losses must equal those of the same job on one host
// (ici_data_parallelism=2): the same two ranks sum the same gradients, only the wire differs.
// Where the script cannot run (not root, no network namespaces) the test is skipped with the
// script's reason.
#include <gtest/gtest.h>

#include "dist_test_util.h"
#include "tessera/core/source_dir.h"
#include "testing/data_dir.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> overrides(const fs::path& out, const std::string& run) {
  return {"model_name=llama-test",
          "run_name=" + run,
          "base_output_directory=" + out.string(),
          "metrics_file=" + (out / (run + ".jsonl")).string(),
          "dtype=float32",
          "max_target_length=16",
          "per_device_batch_size=4",
          "steps=3",
          "log_period=1",
          "num_threads=1",
          "device_peak_tflops=1",
          "enable_tensorboard=false",
          "enable_checkpointing=false"};
}

TEST(TwoHosts, DcnDataParallelOverVethEqualsOneHost) {
  if (!testing::have_mpirun()) GTEST_SKIP() << "mpirun is not installed (Debian: openmpi-bin)";
  testing::TempDir dir("dist-netns");
  const std::string bin = testing::shell_quote(testing::tessera_binary().string());
  const std::string cfg = testing::shell_quote(tessera::source_dir().string() + "/configs/base.yml");
  const std::string script =
      testing::shell_quote(tessera::testing::data_dir().string() + "/netns_two_hosts.sh");

  std::vector<std::string> two = overrides(dir.path, "two_hosts");
  two.push_back("dcn_data_parallelism=2");
  const testing::CommandResult r = testing::run_command(
      script + " " + bin + " " + cfg + " " + testing::shell_quote((dir.path / "netns").string()) +
          testing::shell_words(two),
      120);
  if (r.exit_code == 77) GTEST_SKIP() << r.output;
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("on 2 host(s)"), std::string::npos) << r.output;

  std::vector<std::string> one = overrides(dir.path, "one_host");
  one.insert(one.end(), {"ici_fsdp_parallelism=1", "ici_data_parallelism=2"});
  const testing::CommandResult s =
      testing::run_command(testing::mpirun(2) + " " + bin + " train " + cfg + testing::shell_words(one));
  ASSERT_EQ(s.exit_code, 0) << s.output;

  const auto a = testing::read_metrics(dir.path / "one_host.jsonl");
  const auto b = testing::read_metrics(dir.path / "two_hosts.jsonl");
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(b.size(), 3u) << r.output;
  // The same two partial sums reduced by the same algorithm: equal up to the last ulp or two.
  for (int64_t step = 0; step < 3; ++step)
    EXPECT_NEAR(b.at(step).at("learning/loss"), a.at(step).at("learning/loss"),
                1e-6 * a.at(step).at("learning/loss"))
        << step;
}

}  // namespace
}  // namespace tessera
