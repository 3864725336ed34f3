// Expert parallelism across processes: `mpirun -np N tessera train ... ici_expert_parallelism=EP`
// (alone and with fsdp, data and tensor parallelism) against the one-process run with the same
// global batch, for the Mixtral and GPT-OSS test models: the same loss at each of 3 steps
// (metrics_file) and the same parameters after them (the saved checkpoints, put back together from
// their pieces' offsets); the all-to-alls' bytes against the analytic figure; the sharded
// checkpoints restored on other meshes; an undersized receive buffer refused with the step, the
// layer and the key; the EP=2 x FSDP=2 job launched by Slurm (`srun -n 4 --mpi=pmix` on the
// one-node cluster tests/dist/slurm_one_node.sh starts from Debian's slurmctld and slurmd) giving
// the mpirun and one-process results. Float32, synthetic data, one thread per rank, SGD (see
// tp_mpirun_test.cc).
//
// Tolerances: the expert axis moves rows without arithmetic, so what differs from one process is
// the order of the sums over ranks (gradients, losses) and of the grouped matmuls' rows within
// a group; as in tp_mpirun_test.cc, 1e-6 relative on the loss and 3 x 2e-5 x lr per parameter
// element after 3 clipped SGD steps. Skipped, visibly, where mpirun or the tessera binary is missing.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <regex>
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
constexpr double kLr = 0.1;
constexpr int kSeq = 32;

struct Model {
  const char* name;
  int layers, emb, k;
};
constexpr Model kMixtral{"mixtral-test", 2, 64, 2};
constexpr Model kGptOss{"gpt-oss-tiny", 4, 256, 2};

class ExpertParallelMpirun : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::is_regular_file(tessera_binary())) GTEST_SKIP() << "no tessera binary at " << tessera_binary();
    if (!testing::have_mpirun()) GTEST_SKIP() << "mpirun is not installed (OpenMPI: scripts/setup.sh)";
  }

  // Trains `run` of `model` for `steps` on `np` ranks (np = 1: the plain process) with a global
  // batch of `batch` sequences, a checkpoint after step 3 and one metrics line per step; started
  // by mpirun, or by `launcher` where one is given.
  testing::CommandResult train(const Model& model, const std::string& run, int np,
                               const std::vector<std::string>& extra, int steps = kSteps, int batch = 4,
                               const std::string& launcher = "") {
    std::string cmd = !launcher.empty() ? launcher + " "
                      : np > 1          ? testing::mpirun(np) + " "
                                        : "OMP_NUM_THREADS=1 ";
    cmd += shell_quote(tessera_binary().string()) + " train " +
           shell_quote((tessera::source_dir() / "configs" / "base.yml").string());
    const std::vector<std::string> args = {"run_name=" + run,
                                           "base_output_directory=" + dir_.path.string(),
                                           std::string("model_name=") + model.name,
                                           "steps=" + std::to_string(steps),
                                           "per_device_batch_size=" + std::to_string(double(batch) / np),
                                           "max_target_length=" + std::to_string(kSeq),
                                           "dtype=float32",
                                           "learning_rate=" + std::to_string(kLr),
                                           "enable_checkpointing=true",
                                           "async_checkpointing=false",
                                           "checkpoint_period=3",
                                           "enable_tensorboard=false",
                                           "opt_type=sgd",
                                           "remat_policy=none",
                                           "metrics_file=" + (dir_.path / (run + ".jsonl")).string(),
                                           "log_period=1",
                                           "num_threads=1",
                                           "device_peak_tflops=1"};
    cmd += shell_words(args);
    cmd += shell_words(extra);
    return testing::run_command(cmd, 300);
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
    ASSERT_EQ(got.size(), want.size()) << many;
    for (auto& [step, loss] : want)
      EXPECT_NEAR(got.at(step), loss, 1e-6 * std::abs(loss)) << many << " step " << step;
    const auto p_one = params(one, kSteps), p_many = params(many, kSteps);
    ASSERT_EQ(p_one.size(), p_many.size());
    for (auto& [name, w] : p_one) {
      ASSERT_TRUE(p_many.count(name)) << name;
      EXPECT_TRUE(testing::all_close(p_many.at(name), w, 0, kSteps * 2e-5 * kLr)) << many << ": " << name;
    }
  }

  // Runs each mesh of `meshes` (np, overrides) against the one-process run.
  void expect_meshes_train_like_one_process(
      const Model& model, const std::vector<std::pair<int, std::vector<std::string>>>& meshes,
      int batch = 4) {
    const auto one = train(model, "one", 1, {}, kSteps, batch);
    ASSERT_EQ(one.exit_code, 0) << one.output;
    for (size_t i = 0; i < meshes.size(); ++i) {
      const std::string run = "mesh" + std::to_string(i);
      const auto r = train(model, run, meshes[i].first, meshes[i].second, kSteps, batch);
      ASSERT_EQ(r.exit_code, 0) << r.output;
      expect_same_training("one", run);
    }
  }

  testing::TempDir dir_{"ep-mpirun"};
};

const std::vector<std::string> kEp2 = {"ici_expert_parallelism=2", "ici_fsdp_parallelism=1"};

TEST_F(ExpertParallelMpirun, MixtralEp2AndEp2TimesFsdp2TrainLikeOneProcess) {
  expect_meshes_train_like_one_process(
      kMixtral, {{2, kEp2}, {4, {"ici_expert_parallelism=2", "ici_fsdp_parallelism=2"}}});
}

// As users launch it under Slurm: OpenMPI on Debian is built against PMIx, so srun must offer it
// (--mpi=pmix); OMP_NUM_THREADS travels with srun's environment. Skipped, with the script's
// reason, where Slurm is missing or its one-node cluster cannot start (exit code 77).
TEST_F(ExpertParallelMpirun, MixtralEp2TimesFsdp2UnderSlurmsSrunTrainsLikeMpirun) {
  for (const char* tool : {"srun", "slurmctld", "slurmd"})
    if (std::system(fmt::format("PATH=$PATH:/usr/sbin:/sbin command -v {} > /dev/null 2>&1", tool).c_str()) !=
        0)
      GTEST_SKIP() << tool << " is not installed (Debian: slurm-wlm, scripts/setup.sh)";
  const std::vector<std::string> mesh = {"ici_expert_parallelism=2", "ici_fsdp_parallelism=2"};
  const fs::path script = tessera::source_dir() / "tests" / "dist" / "slurm_one_node.sh";
  const auto srun = train(kMixtral, "srun", 4, mesh, kSteps, 4,
                          "SLURM_ONE_NODE_LIMIT_S=150 OMP_NUM_THREADS=1 " + shell_quote(script.string()) +
                              " srun -n 4 --mpi=pmix");
  if (srun.exit_code == 77) GTEST_SKIP() << srun.output;
  ASSERT_EQ(srun.exit_code, 0) << srun.output;
  // One MPI job of 4 ranks, not 4 one-rank jobs.
  EXPECT_NE(srun.output.find("(4 rank(s) on 1 host(s))"), std::string::npos) << srun.output;
  const auto mpirun = train(kMixtral, "mpirun", 4, mesh);
  ASSERT_EQ(mpirun.exit_code, 0) << mpirun.output;
  const auto one = train(kMixtral, "one", 1, {});
  ASSERT_EQ(one.exit_code, 0) << one.output;
  expect_same_training("mpirun", "srun");
  expect_same_training("one", "srun");
}

TEST_F(ExpertParallelMpirun, MixtralEp4Ep2TimesDp2AndEp2TimesTp2TrainLikeOneProcess) {
  expect_meshes_train_like_one_process(
      kMixtral, {{4, {"ici_expert_parallelism=4", "ici_fsdp_parallelism=1"}},
                 {4, {"ici_expert_parallelism=2", "ici_fsdp_parallelism=1", "ici_data_parallelism=2"}},
                 {4, {"ici_expert_parallelism=2", "ici_fsdp_parallelism=1", "ici_tensor_parallelism=2"}}});
}

TEST_F(ExpertParallelMpirun, MixtralEpTimesFsdpTimesDpOnEightRanksTrainsLikeOneProcess) {
  expect_meshes_train_like_one_process(
      kMixtral, {{8, {"ici_expert_parallelism=2", "ici_fsdp_parallelism=2", "ici_data_parallelism=2"}}},
      /*batch=*/8);
}

TEST_F(ExpertParallelMpirun, GptOssEp2Ep2TimesFsdp2AndEp4TrainLikeOneProcess) {
  expect_meshes_train_like_one_process(kGptOss,
                                       {{2, kEp2},
                                        {4, {"ici_expert_parallelism=2", "ici_fsdp_parallelism=2"}},
                                        {4, {"ici_expert_parallelism=4", "ici_fsdp_parallelism=1"}}});
}

TEST_F(ExpertParallelMpirun, GptOssEp2TimesDp2AndEp2TimesTp2TrainLikeOneProcess) {
  expect_meshes_train_like_one_process(
      kGptOss, {{4, {"ici_expert_parallelism=2", "ici_fsdp_parallelism=1", "ici_data_parallelism=2"}},
                {4, {"ici_expert_parallelism=2", "ici_fsdp_parallelism=1", "ici_tensor_parallelism=2"}}});
}

// Each rank's all-to-alls move its own tokens' rows: N_loc x k x emb_dim x 4 bytes per exchange,
// and a step without remat has 4 per layer (dispatch and combine, forward and backward).
TEST_F(ExpertParallelMpirun, AllToAllBytesEqualTheAnalyticFigure) {
  for (const auto& [np, mesh] : std::vector<std::pair<int, std::vector<std::string>>>{
           {2, kEp2}, {4, {"ici_expert_parallelism=2", "ici_fsdp_parallelism=2"}}}) {
    const auto r = train(kMixtral, "bytes" + std::to_string(np), np, mesh, 1);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const int64_t tokens = 4 / np * kSeq;  // this rank's N
    const int64_t analytic = int64_t{kMixtral.layers} * 4 * tokens * kMixtral.k * kMixtral.emb * 4;
    std::smatch m;
    const std::regex line(
        R"(all-to-alls in step 0 \(this rank's rows of its own tokens\): (\d+) bytes, of which (\d+) to or from other ranks; expected from the plan: (\d+) bytes)");
    ASSERT_TRUE(std::regex_search(r.output, m, line)) << r.output;
    EXPECT_EQ(std::stoll(m[1]), analytic) << r.output;
    EXPECT_EQ(std::stoll(m[3]), analytic);
    EXPECT_LE(std::stoll(m[2]), analytic);
    std::cout << "[ bytes    ] np " << np << ": all-to-alls " << m[1] << " bytes (analytic " << analytic
              << "), " << m[2] << " of them to or from other ranks\n";
    EXPECT_NE(r.output.find(" all-to-alls, "), std::string::npos) << r.output;
  }
}

// A checkpoint sharded by expert (and fsdp) restores in one process and on another expert mesh,
// and continues as the one-process run does.
TEST_F(ExpertParallelMpirun, ShardedCheckpointsRestoreOnAnyMesh) {
  // One learning-rate schedule for the 3-step run that saves and the 4-step runs.
  const std::string schedule = "learning_rate_schedule_steps=" + std::to_string(kSteps + 1);
  const auto more = train(kMixtral, "one", 1, {schedule}, kSteps + 1);
  ASSERT_EQ(more.exit_code, 0) << more.output;
  const auto saved =
      train(kMixtral, "ep2_fsdp2", 4, {schedule, "ici_expert_parallelism=2", "ici_fsdp_parallelism=2"});
  ASSERT_EQ(saved.exit_code, 0) << saved.output;
  const std::string from = "load_full_state_path=" + (dir_.path / "ep2_fsdp2" / "checkpoints" / "3").string();
  const auto in_one = train(kMixtral, "in_one", 1, {schedule, from}, kSteps + 1);
  ASSERT_EQ(in_one.exit_code, 0) << in_one.output;
  const auto on_ep4 =
      train(kMixtral, "on_ep4", 4, {schedule, from, "ici_expert_parallelism=4", "ici_fsdp_parallelism=1"},
            kSteps + 1);
  ASSERT_EQ(on_ep4.exit_code, 0) << on_ep4.output;
  const double want = losses("one").at(kSteps);
  EXPECT_NEAR(losses("in_one").at(kSteps), want, 1e-5 * std::abs(want));
  EXPECT_NEAR(losses("on_ep4").at(kSteps), want, 1e-5 * std::abs(want));
}

// A receive buffer below the step's load fails on every rank, naming the step, layer and key.
TEST_F(ExpertParallelMpirun, AnOverflowingBufferNamesStepLayerAndKey) {
  const auto r = train(kMixtral, "small", 2,
                       {"ici_expert_parallelism=2", "ici_fsdp_parallelism=1", "ragged_buffer_factor=0.25"});
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("(step 0, layer 0)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("raise ragged_buffer_factor"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace tessera
