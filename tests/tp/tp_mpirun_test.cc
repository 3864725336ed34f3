// Tensor parallelism across processes: `mpirun -np 2 tessera train ... ici_tensor_parallelism=2`
// and `mpirun -np 4 --oversubscribe ... ici_fsdp_parallelism=2 ici_tensor_parallelism=2` against
// the one-process run with the same global batch (4 sequences): the same loss at each of 3 steps
// (metrics_file) and the same parameters after them (the saved checkpoints, whose sharded files
// are put back together from their pieces' offsets). Then the tensor-parallel checkpoint resumes
// in one process (another mesh) and continues as the one-process run does. A tiny model in
// float32, synthetic data, one thread per rank; the tolerances are those of the in-process test
// (llama_tp_test.cc), where the split changes only the order of sums; SGD, whose update is linear
// in the gradient (the in-process test covers AdamW).
// Skipped, visibly, where mpirun or the tessera binary is missing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "dist/dist_test_util.h"
#include "tessera/core/safetensors.h"
#include "tessera/core/source_dir.h"
#include "testing/op_test_util.h"
#include "testing/process_util.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using testing::shell_quote;
using testing::shell_words;
using testing::tessera_binary;

constexpr int kSteps = 3;
constexpr double kLr = 0.1;  // SGD: see expect_same_training
constexpr int kGlobalBatch = 4;

class TensorParallelMpirun : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::is_regular_file(tessera_binary())) GTEST_SKIP() << "no tessera binary at " << tessera_binary();
    if (!testing::have_mpirun()) GTEST_SKIP() << "mpirun is not installed (OpenMPI: scripts/setup.sh)";
  }

  // Trains `run` for `steps` on `np` ranks (np = 1: the plain process, no mpirun) with a global
  // batch of kGlobalBatch sequences, a checkpoint after step 3, and one metrics line per step.
  testing::CommandResult train(const std::string& run, int np, const std::vector<std::string>& extra,
                               int steps = kSteps) {
    std::string cmd = np > 1 ? testing::mpirun(np) + " " : "OMP_NUM_THREADS=1 ";
    cmd += shell_quote(tessera_binary().string()) + " train " +
           shell_quote((tessera::source_dir() / "configs" / "base.yml").string());
    const std::vector<std::string> args = {"run_name=" + run,
                                           "base_output_directory=" + dir_.path.string(),
                                           "steps=" + std::to_string(steps),
                                           "per_device_batch_size=" + std::to_string(kGlobalBatch / np),
                                           "max_target_length=32",
                                           "dtype=float32",
                                           "learning_rate=" + std::to_string(kLr),
                                           "enable_checkpointing=true",
                                           "async_checkpointing=false",
                                           "checkpoint_period=3",
                                           "enable_tensorboard=false",
                                           "opt_type=sgd",
                                           "metrics_file=" + (dir_.path / (run + ".jsonl")).string(),
                                           "log_period=1",
                                           "num_threads=1",
                                           "device_peak_tflops=1"};
    cmd += shell_words(args);
    const bool model_named = std::any_of(extra.begin(), extra.end(),
                                         [](const std::string& a) { return a.starts_with("model_name="); });
    if (!model_named) cmd += " model_name=llama-test";
    cmd += shell_words(extra);
    return testing::run_command(cmd, 120);
  }

  std::map<int64_t, double> losses(const std::string& run) {
    std::map<int64_t, double> out;
    for (auto& [step, tags] : testing::read_metrics(dir_.path / (run + ".jsonl")))
      if (tags.count("learning/loss")) out[step] = tags.at("learning/loss");
    return out;
  }

  // Every parameter of the checkpoint after `step`, put together from its files' pieces.
  std::map<std::string, std::vector<double>> params(const std::string& run, int step) {
    return testing::checkpoint_params(dir_.path / run / "checkpoints" / std::to_string(step));
  }

  void expect_same_training(const std::string& one, const std::string& many) {
    const auto want = losses(one), got = losses(many);
    ASSERT_EQ(want.size(), static_cast<size_t>(kSteps));
    ASSERT_EQ(got.size(), want.size());
    // f32, sums reordered by the split (see llama_tp_test.cc): 1e-6 relative.
    for (auto& [step, loss] : want) EXPECT_NEAR(got.at(step), loss, 1e-6 * std::abs(loss)) << "step " << step;
    const auto p_one = params(one, kSteps), p_many = params(many, kSteps);
    ASSERT_EQ(p_one.size(), p_many.size());
    // 3 SGD steps whose clipped gradients (norm <= 1) agree to 2e-5 per element (llama_tp_test.cc
    // derives it; SGD because AdamW's per-element normalisation magnifies the relative error of
    // near-cancelling gradients without bound): within 3 x 2e-5 lr.
    for (auto& [name, w] : p_one) {
      ASSERT_TRUE(p_many.count(name)) << name;
      EXPECT_TRUE(testing::all_close(p_many.at(name), w, 0, kSteps * 2e-5 * kLr)) << name;
    }
  }

  testing::TempDir dir_{"tp-mpirun"};
};

TEST_F(TensorParallelMpirun, TwoTensorRanksTrainLikeOneProcess) {
  const auto one = train("one", 1, {});
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const auto tp = train("tp2", 2, {"ici_tensor_parallelism=2"});
  ASSERT_EQ(tp.exit_code, 0) << tp.output;
  EXPECT_NE(tp.output.find("tensor slice [0:32] of dim 1 (q_heads) of [64, 64]"), std::string::npos)
      << tp.output;
  expect_same_training("one", "tp2");

  // The tensor-parallel checkpoint restores in one process and continues like the one-process run.
  const auto more = train("one", 1, {}, kSteps + 1);
  ASSERT_EQ(more.exit_code, 0) << more.output;
  const auto resumed =
      train("resumed", 1, {"load_full_state_path=" + (dir_.path / "tp2" / "checkpoints" / "3").string()},
            kSteps + 1);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  const double want = losses("one").at(kSteps), got = losses("resumed").at(kSteps);
  EXPECT_NEAR(got, want, 1e-5 * std::abs(want));
}

TEST_F(TensorParallelMpirun, FsdpTimesTensorOnFourRanksTrainsLikeOneProcess) {
  const auto one = train("one", 1, {});
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const auto both = train("fsdp2_tp2", 4, {"ici_fsdp_parallelism=2", "ici_tensor_parallelism=2"});
  ASSERT_EQ(both.exit_code, 0) << both.output;
  expect_same_training("one", "fsdp2_tp2");
}

// Gemma 2 (soft-capped attention and logits, (1 + w) norms, post norms, local and global layers):
// the heads and MLP split over two tensor ranks, and FSDP x tensor on four, train like one process.
TEST_F(TensorParallelMpirun, Gemma2TrainsLikeOneProcessOverTensorAndFsdpTimesTensor) {
  const std::vector<std::string> gemma2 = {"model_name=gemma-test",       "override_model_config=true",
                                           "decoder_block=gemma2",        "base_num_decoder_layers=3",
                                           "local_rope_max_timescale=-1", "rope_linear_scaling_factor=1",
                                           "rope_max_timescale=10000",    "query_pre_attn_scalar=24"};
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), gemma2.begin(), gemma2.end());
    return more;
  };
  const auto one = train("gemma2_one", 1, with({}));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const auto tp = train("gemma2_tp2", 2, with({"ici_tensor_parallelism=2"}));
  ASSERT_EQ(tp.exit_code, 0) << tp.output;
  expect_same_training("gemma2_one", "gemma2_tp2");
  const auto both =
      train("gemma2_fsdp2_tp2", 4, with({"ici_fsdp_parallelism=2", "ici_tensor_parallelism=2"}));
  ASSERT_EQ(both.exit_code, 0) << both.output;
  expect_same_training("gemma2_one", "gemma2_fsdp2_tp2");
}

}  // namespace
}  // namespace tessera
