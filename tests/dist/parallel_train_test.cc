// One rank against N ranks, through the real program: `mpirun -np N tessera train` with data
// parallelism, FSDP, ZeRO-1 and their products gives the losses and, after 3 AdamW steps, the
// parameters of the one-process run with the same global batch (llama-test in float32, synthetic
// data, one thread per rank). The final checkpoints are read back through restore_checkpoint into a
// one-process plan, which also checks that sharded checkpoints reassemble whole tensors.
//
// Tolerances (float32, u = 2^-24 = 6e-8): the ranks sum the same per-token gradients in another
// order (each rank's rows, then the reduction over ranks), so gradients differ by a few ulps of
// their magnitude. Losses of steps 1-2 inherit that through parameters that moved by lr x (Adam's
// normalised step): observed differences are below 2e-8 relative (a few ulps of the sum over
// 128 tokens); we allow 1e-6 relative (16 ulps), also for the gradient norm. Parameters:
// AdamW divides m by sqrt(v), so a gradient that is pure rounding noise (|g| within a few ulps
// of 0) can flip its update's sign: each step moves a parameter by at most lr (1e-3) beyond the
// matching run, bounding the difference by 3 x 2 x lr in the worst case; the test asks for 1e-5
// absolute on all but a 1e-4 fraction of the elements and 6e-3 (that worst case) on every one.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "dist_test_util.h"
#include "tessera/checkpoint/checkpoint.h"
#include "tessera/core/source_dir.h"
#include "tessera/graph/plan.h"
#include "tessera/models/decoder.h"
#include "tessera/train/trainer.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using testing::CommandResult;

constexpr int kSteps = 3;
constexpr int kGlobalBatch = 8;

std::vector<std::string> common_overrides(const fs::path& out, const std::string& run) {
  return {"model_name=llama-test",
          "run_name=" + run,
          "base_output_directory=" + out.string(),
          "metrics_file=" + (out / (run + ".jsonl")).string(),
          "dtype=float32",
          "max_target_length=16",
          "steps=" + std::to_string(kSteps),
          "learning_rate=1e-3",
          "learning_rate_schedule_steps=3",
          "warmup_steps_fraction=0",
          "log_period=1",
          "num_threads=1",
          "device_peak_tflops=1",
          "enable_tensorboard=false",
          "async_checkpointing=false",
          "checkpoint_period=100",
          "eval_interval=3",  // after the last step: forward passes of the sharded plans
          "eval_steps=2"};
}

// Runs `tessera train` on `np` ranks (one process when np = 1).
CommandResult train(int np, const fs::path& out, const std::string& run, std::vector<std::string> extra) {
  std::vector<std::string> args = common_overrides(out, run);
  args.push_back("per_device_batch_size=" + std::to_string(kGlobalBatch / np));
  for (const std::string& e : extra) {  // an extra setting replaces a common one of the same key
    const std::string key = e.substr(0, e.find('=') + 1);
    std::erase_if(args, [&](const std::string& a) { return a.starts_with(key); });
    args.push_back(e);
  }
  const std::string bin = testing::shell_quote(testing::tessera_binary().string());
  const std::string cfg = testing::shell_quote(tessera::source_dir().string() + "/configs/base.yml");
  const std::string launch = np == 1 ? "" : testing::mpirun(np) + " ";
  return testing::run_command(launch + bin + " train " + cfg + testing::shell_words(args), 120);
}

// A one-process plan of `model` (float32) holding the checkpoint's parameters.
std::unique_ptr<graph::Plan> load_params(const fs::path& dir, const std::string& model = "llama-test") {
  std::vector<std::string> o = {"model_name=" + model, "dtype=float32", "max_target_length=16",
                                "per_device_batch_size=1"};
  Config cfg = load_config(tessera::source_dir() / "configs" / "base.yml", o);
  graph::Graph g;
  models::build_decoder(g, models::model_spec_from_config(cfg));
  auto plan = std::make_unique<graph::Plan>(std::move(g), graph::PlanOptions{});
  checkpoint::restore_checkpoint(*plan, dir, checkpoint::RestoreKind::kFullState);
  return plan;
}

// The one-process run a test compares with: the suite's reference, or one with extra settings.
struct Reference {
  std::string run = "one";
  std::vector<std::string> extra;  // also given to the N-rank run
  double loss_rtol = 1e-6;
  // A parameter "differs" by more than this; at most 1 in 10,000 may.
  double param_tol = 1e-5;
};

class ParallelTraining : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir("dist-train");
    reference_ = new CommandResult(train(1, dir_->path, "one", {}));
  }
  static void TearDownTestSuite() {
    delete reference_;
    delete dir_;
  }

  // Trains `run` on np ranks and compares it with the one-process run `ref` (which is trained
  // first when it is not the suite's reference).
  void expect_same_as_one_process(int np, const std::string& run, std::vector<std::string> extra,
                                  const Reference& ref = {}) {
    if (!testing::have_mpirun()) GTEST_SKIP() << "mpirun is not installed (Debian: openmpi-bin)";
    ASSERT_EQ(reference_->exit_code, 0) << reference_->output;
    if (ref.run != "one") {
      CommandResult r = train(1, dir_->path, ref.run, ref.extra);
      ASSERT_EQ(r.exit_code, 0) << r.output;
      extra.insert(extra.end(), ref.extra.begin(), ref.extra.end());
    }
    CommandResult r = train(np, dir_->path, run, extra);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("mesh: "), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("collectives in step 0"), std::string::npos) << r.output;
    const auto one = testing::read_metrics(dir_->path / (ref.run + ".jsonl"));
    const auto many = testing::read_metrics(dir_->path / (run + ".jsonl"));
    ASSERT_EQ(one.size(), static_cast<size_t>(kSteps));
    ASSERT_EQ(many.size(), static_cast<size_t>(kSteps)) << r.output;
    double loss_diff = 0;
    for (int64_t s = 0; s < kSteps; ++s) {
      const double a = one.at(s).at("learning/loss"), b = many.at(s).at("learning/loss");
      loss_diff = std::max(loss_diff, std::abs(a - b) / std::abs(a));
      EXPECT_NEAR(b, a, ref.loss_rtol * std::abs(a)) << "step " << s;
      EXPECT_EQ(many.at(s).at("learning/total_weights"), one.at(s).at("learning/total_weights"));
      const double ga = one.at(s).at("learning/grad_norm"), gb = many.at(s).at("learning/grad_norm");
      EXPECT_NEAR(gb, ga, ref.loss_rtol * ga) << "step " << s;
    }
    const double ea = one.at(kSteps - 1).at("eval/avg_loss"), eb = many.at(kSteps - 1).at("eval/avg_loss");
    EXPECT_NEAR(eb, ea, ref.loss_rtol * ea);
    std::string model = "llama-test";
    for (const std::string& e : extra)
      if (e.starts_with("model_name=")) model = e.substr(std::string("model_name=").size());
    const auto pa = load_params(dir_->path / ref.run / "checkpoints" / std::to_string(kSteps), model);
    const auto pb = load_params(dir_->path / run / "checkpoints" / std::to_string(kSteps), model);
    int64_t total = 0, loose = 0;
    double worst = 0;
    for (graph::ValueId p : pa->graph().params()) {
      // The key projection's bias (gpt3) has a gradient of exactly zero (the softmax cancels it):
      // AdamW's m / sqrt(v) turns each run's rounding noise there into full-size steps of either
      // sign, so its values are not comparable between runs.
      if (pa->graph().value(p).name.ends_with("key.bias")) continue;
      const Tensor& a = pa->view(p);
      const Tensor& b = pb->view(p);
      for (int64_t i = 0; i < a.numel(); ++i) {
        const double d = std::abs(double{a.ptr<float>()[i]} - double{b.ptr<float>()[i]});
        worst = std::max(worst, d);
        loose += d > ref.param_tol;
        ++total;
      }
    }
    EXPECT_LE(worst, 6e-3);
    EXPECT_LE(loose, total / 10000) << loose << " of " << total << " parameters differ by more than "
                                    << ref.param_tol;
    std::cout << "[ compare  ] " << run << ": largest relative loss difference " << loss_diff
              << ", largest parameter difference " << worst << ", " << loose << " above " << ref.param_tol
              << " of " << total << "\n";
  }

  static testing::TempDir* dir_;
  static CommandResult* reference_;
};

testing::TempDir* ParallelTraining::dir_ = nullptr;
CommandResult* ParallelTraining::reference_ = nullptr;

TEST_F(ParallelTraining, DataParallelOnTwoRanks) {
  expect_same_as_one_process(2, "dp2", {"ici_fsdp_parallelism=1", "ici_data_parallelism=2"});
}

TEST_F(ParallelTraining, FsdpOnTwoRanks) {
  expect_same_as_one_process(2, "fsdp2", {});
}

TEST_F(ParallelTraining, Zero1OnTwoRanks) {
  expect_same_as_one_process(
      2, "zero1_2", {"ici_fsdp_parallelism=1", "ici_data_parallelism=2", "shard_optimizer_over_data=true"});
}

TEST_F(ParallelTraining, FsdpOnFourRanks) {
  expect_same_as_one_process(4, "fsdp4", {});
}

TEST_F(ParallelTraining, FsdpTimesDataParallelOnFourRanks) {
  expect_same_as_one_process(4, "fsdp2_dp2", {"ici_fsdp_parallelism=2", "ici_data_parallelism=2"});
}

TEST_F(ParallelTraining, Zero1TimesFsdpOnFourRanks) {
  expect_same_as_one_process(
      4, "zero1_fsdp",
      {"ici_fsdp_parallelism=2", "ici_data_parallelism=2", "shard_optimizer_over_data=true"});
}

// The gpt3 block (GPT-2): its biases and LayerNorm scales are sharded by FSDP like the kernels.
TEST_F(ParallelTraining, Gpt2FsdpOnTwoRanks) {
  expect_same_as_one_process(2, "gpt2_fsdp2", {}, {.run = "one_gpt2", .extra = {"model_name=gpt2-test"}});
}

// gemma-test: Gemma 3's layers (five local, one global, two RoPE tables, QK-norm) with both soft caps.
TEST_F(ParallelTraining, GemmaFsdpOnTwoRanks) {
  expect_same_as_one_process(2, "gemma_fsdp2", {}, {.run = "one_gemma", .extra = {"model_name=gemma-test"}});
}

TEST_F(ParallelTraining, FsdpWithGradientAccumulation) {
  // Each micro-step reduce-scatters every layer's gradients into the pieces, which accumulate.
  expect_same_as_one_process(2, "fsdp2_ga", {},
                             {.run = "one_ga", .extra = {"gradient_accumulation_steps=2"}});
}

TEST_F(ParallelTraining, FsdpInBfloat16) {
  // bf16 compute copies are gathered (the f32 masters stay in pieces). The masters agree as in
  // float32, but a master that differs by an ulp can round to a neighbouring bf16 value (relative
  // step 2^-8), so losses get a bf16-sized tolerance: 4 x 2^-8 x 1e-2 (the share of such flips
  // in a loss is far below 1%). After such a flip the steps that follow see bf16-sized differences
  // in every gradient, and AdamW turns those of gradients near zero into steps of either sign: with
  // init_weights_seed 0 one flip left 1381 of 151872 parameters more than 1e-5 apart after 3 steps,
  // 38 more than 1e-4 and 7 more than 1e-3 (seeds 1-4: no flip, every parameter within 1e-6). So
  // a parameter differs here when it is a whole step (the learning rate, 1e-3) apart.
  expect_same_as_one_process(
      2, "fsdp2_bf16", {},
      {.run = "one_bf16", .extra = {"dtype=bfloat16"}, .loss_rtol = 1.6e-4, .param_tol = 1e-3});
}

// One run moved between meshes through its checkpoints: 2 steps as FSDP on 2 ranks, 2 more as
// ZeRO-1 x FSDP on 4 (data 2 x fsdp 2), the last 2 on one process; every restore reshards the
// parameters and moments, and the data position carries over between 2, 4 and 1 readers. Its
// losses are those of one process trained straight through.
TEST_F(ParallelTraining, CheckpointsMoveBetweenMeshes) {
  if (!testing::have_mpirun()) GTEST_SKIP() << "mpirun is not installed (Debian: openmpi-bin)";
  const std::vector<std::string> six = {"steps=6", "learning_rate_schedule_steps=6", "checkpoint_period=2",
                                        "eval_interval=-1"};
  CommandResult r = train(1, dir_->path, "straight6", six);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto with = [&](std::vector<std::string> v, const std::vector<std::string>& more) {
    v.insert(v.end(), more.begin(), more.end());
    return v;
  };
  r = train(2, dir_->path, "moved", with(six, {"steps=2"}));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = train(4, dir_->path, "moved",
            with(six, {"steps=4", "ici_fsdp_parallelism=2", "ici_data_parallelism=2",
                       "shard_optimizer_over_data=true"}));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resumed from checkpoint"), std::string::npos) << r.output;
  r = train(1, dir_->path, "moved", six);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("continuing with step 4"), std::string::npos) << r.output;
  const auto a = testing::read_metrics(dir_->path / "straight6.jsonl");
  const auto b = testing::read_metrics(dir_->path / "moved.jsonl");
  ASSERT_EQ(a.size(), 6u);
  ASSERT_EQ(b.size(), 6u);
  for (int64_t s = 0; s < 6; ++s)
    EXPECT_NEAR(b.at(s).at("learning/loss"), a.at(s).at("learning/loss"), 1e-6 * a.at(s).at("learning/loss"))
        << s;
}

TEST_F(ParallelTraining, MeshThatDoesNotMatchTheRanksIsAConfigError) {
  if (!testing::have_mpirun()) GTEST_SKIP() << "mpirun is not installed";
  CommandResult r = train(2, dir_->path, "bad", {"ici_fsdp_parallelism=1", "ici_data_parallelism=4"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("the ici parallelism does not match"), std::string::npos) << r.output;
  r = train(2, dir_->path, "bad", {"ici_fsdp_parallelism=1", "ici_sequence_parallelism=2"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("sequence parallelism is not in this build yet"), std::string::npos) << r.output;
}

TEST_F(ParallelTraining, OneProcessRefusesAMultiDeviceMesh) {
  CommandResult r = train(1, dir_->path, "alone", {"ici_fsdp_parallelism=2"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
}

}  // namespace
}  // namespace tessera
