// The training loop: a NaN loss stops the run naming the step; TFLOP/s and MFU come from the plan's
// FLOPs, which follow MaxText's formula (checked against an analytic count written here); the
// trainer's plan reports what the run then uses (peak RSS is checked in bench/).
#include "tessera/train/trainer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <sstream>

#include "tessera/config/config.h"
#include "tessera/core/error.h"
#include "tessera/core/source_dir.h"

namespace tessera {
namespace {

Config small_config(std::vector<std::string> extra = {}) {
  std::vector<std::string> o = {"model_name=llama-test",
                                "run_name=t",
                                "per_device_batch_size=2",
                                "max_target_length=16",
                                "steps=4",
                                "log_period=1",
                                "device_peak_tflops=0.5",
                                "enable_checkpointing=false",
                                "enable_tensorboard=false"};
  for (const std::string& e : extra) {  // a key in `extra` replaces its default above
    const std::string key = e.substr(0, e.find('=') + 1);
    std::erase_if(o, [&](const std::string& d) { return d.starts_with(key); });
  }
  o.insert(o.end(), extra.begin(), extra.end());
  return load_config(tessera::source_dir().string() + "/configs/base.yml", o);
}

TEST(Trainer, NanLossStopsWithTheStepNumber) {
  std::ostringstream log;
  train::Trainer t(small_config(), log);
  t.step();
  t.step();
  // Poison one weight: the next forward pass produces a NaN loss.
  const auto& values = t.plan().graph().values();
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i].name == "decoder.decoder_norm.scale")
      t.plan().view(static_cast<graph::ValueId>(i)).ptr<float>()[0] = std::numeric_limits<float>::quiet_NaN();
  try {
    t.step();
    FAIL() << "expected the NaN loss to stop the run";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("at step 2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("nan"), std::string::npos) << e.what();
  }
}

TEST(Trainer, MetricsFollowMaxTextsFormula) {
  std::ostringstream log;
  Config cfg = small_config({"gradient_accumulation_steps=2"});
  train::Trainer t(cfg, log);
  train::StepMetrics m = t.step();
  // llama-test: E 64, H 4, K 2, D 16, F 160, L 2, V 512; B 2, S 16.
  const double B = 2, S = 16, E = 64, H = 4, K = 2, D = 16, F = 160, V = 512, L = 2;
  const double fwd = L * (2 * B * S * F * E * 3 + 2 * B * S * E * (H + 2 * K) * D + 2 * B * S * E * H * D +
                          2 * B * S * S * H * D) +
                     2 * B * S * E * V;
  // MaxText: FFN, QKV, out projection and unembedding matmuls, causal attention (2 B S^2 H D), the
  // embedding lookup 0; training = 3 x forward. The plan counts its graph's nodes.
  EXPECT_DOUBLE_EQ(t.plan().flops().model_training(), 3 * fwd);
  EXPECT_EQ(m.total_weights, 2 * 2 * 16);
  EXPECT_NEAR(m.tflops_per_device, 2 * 3 * fwd / m.seconds / 1e12, 1e-9);
  EXPECT_NEAR(m.mfu, m.tflops_per_device / 0.5, 1e-9);
  EXPECT_NEAR(m.tokens_per_device, 64 / m.seconds, 1e-6);
  EXPECT_TRUE(std::isfinite(m.loss));
  EXPECT_GT(m.grad_norm, 0);
}

// The hardware rate counts what a step executes: the backward as run (2 x each matmul, 2.5 x the
// flash attention forward: it recomputes the scores) and the remat recomputation, which full remat
// adds and `none` does not.
TEST(Trainer, HardwareFlopsCountTheBackwardAndTheRecomputation) {
  const double B = 2, S = 16, E = 64, H = 4, K = 2, D = 16, F = 160, V = 512, L = 2;
  const double attention = L * 2 * B * S * S * H * D;
  const double matmul =
      L * (2 * B * S * F * E * 3 + 2 * B * S * E * (H + 2 * K) * D + 2 * B * S * E * H * D) +
      2 * B * S * E * V;
  std::ostringstream log;
  train::Trainer none(small_config({"remat_policy=none"}), log);
  const graph::FlopReport& f = none.plan().flops();
  EXPECT_DOUBLE_EQ(f.recompute, 0);
  EXPECT_DOUBLE_EQ(f.backward, 2 * matmul + 2.5 * attention);
  EXPECT_DOUBLE_EQ(f.executed_training(), 3 * matmul + 3.5 * attention + f.optimizer);
  train::StepMetrics m = none.step();
  EXPECT_NEAR(m.hw_tflops_per_device, f.executed_training() / m.seconds / 1e12, 1e-9);
  EXPECT_NEAR(m.hfu, m.hw_tflops_per_device / 0.5, 1e-9);
  EXPECT_GT(m.hfu, m.mfu);

  train::Trainer full(small_config({"remat_policy=full"}), log);
  const graph::FlopReport& g = full.plan().flops();
  EXPECT_DOUBLE_EQ(g.model_training(), f.model_training());
  // Full remat re-runs each decoder layer's forward from its saved input up to what the backward
  // needs: every matmul and the attention but the MLP's down projection, whose output only feeds
  // the next layer's (saved) input; never the unembedding.
  EXPECT_DOUBLE_EQ(g.recompute, matmul - 2 * B * S * E * V - L * 2 * B * S * F * E + attention);
  EXPECT_DOUBLE_EQ(g.executed_training(), f.executed_training() + g.recompute);
  EXPECT_NE(log.str().find("executed TFLOP per step "), std::string::npos) << log.str();
}

// A step faster than the peak (here a given one far below any CPU) is reported once, and a given
// peak stays what MFU divides by (a calibrated one would be measured again: mfu_peak_test.cc).
TEST(Trainer, AStepFasterThanTheGivenPeakIsReportedOnce) {
  std::ostringstream log;
  train::Trainer t(small_config({"device_peak_tflops=0.000001"}), log);
  const train::StepMetrics m = t.step();
  t.step();
  EXPECT_NEAR(m.mfu, m.tflops_per_device / 1e-6, 1e-6 * m.mfu);
  const std::string text = log.str(), said = "above device_peak_tflops (0.0 GFLOP/s)";
  ASSERT_NE(text.find("peak: step 0 executed "), std::string::npos) << text;
  EXPECT_NE(text.find(said), std::string::npos) << text;
  EXPECT_EQ(text.find(said, text.find(said) + 1), std::string::npos) << text;
}

// A mixture of experts counts active parameters only (MaxText's MoE formula: the router, and the
// k chosen experts' three projections per token), and logs its load-balance loss inside the loss.
TEST(Trainer, MixtureOfExpertsCountsActiveFlopsAndAddsTheLoadBalanceLoss) {
  std::ostringstream log;
  train::Trainer t(small_config({"model_name=mixtral-test", "load_balance_loss_weight=0.01"}), log);
  train::StepMetrics m = t.step();
  // mixtral-test: E 64, H 4, K 2, D 16, X 4 experts of F 96, top-2, L 2, V 512; B 2, S 16.
  const double B = 2, S = 16, E = 64, H = 4, K = 2, D = 16, X = 4, k = 2, F = 96, V = 512, L = 2;
  const double fwd = L * (2 * B * S * E * X + k * 2 * B * S * F * E * 3 + 2 * B * S * E * (H + 2 * K) * D +
                          2 * B * S * E * H * D + 2 * B * S * S * H * D) +
                     2 * B * S * E * V;
  EXPECT_DOUBLE_EQ(t.plan().flops().model_training(), 3 * fwd);
  ASSERT_TRUE(m.moe_lb_loss.has_value());
  // Near-balanced routing at initialisation scores about k * weight.
  EXPECT_GT(*m.moe_lb_loss, 0.5 * k * 0.01);
  EXPECT_LT(*m.moe_lb_loss, 2.0 * k * 0.01);
  // Without the weight there is no aux loss and nothing logged.
  std::ostringstream log2;
  train::Trainer t2(small_config({"model_name=mixtral-test"}), log2);
  EXPECT_FALSE(t2.step().moe_lb_loss.has_value());
}

TEST(Trainer, MixtureOfExpertsKeysAreChecked) {
  std::ostringstream log;
  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"num_experts=4"},  // llama2 has a dense MLP
        {"load_balance_loss_weight=0.01"},          // so its MoE keys would do nothing
        {"num_experts_per_tok=2"},
        {"model_name=mixtral-test", "num_experts=1"},
        {"model_name=mixtral-test", "num_experts_per_tok=5"},
        {"model_name=mixtral-test", "capacity_factor=1.5"}}) {  // sparse_matmul=true is dropless
    SCOPED_TRACE(bad.back());
    try {
      train::Trainer tr(small_config(bad), log);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kConfig) << e.what();
      EXPECT_EQ(std::string(e.what()).find("given twice"), std::string::npos) << e.what();
    }
  }
}

TEST(Trainer, FractionalBatchIsRefused) {
  std::ostringstream log;
  EXPECT_THROW(train::Trainer(small_config({"per_device_batch_size=1.5"}), log), Error);
}

}  // namespace
}  // namespace tessera
