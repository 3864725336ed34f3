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
  o.insert(o.end(), extra.begin(), extra.end());
  return load_config(std::string(TESSERA_SOURCE_DIR) + "/configs/base.yml", o);
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

TEST(Trainer, FractionalBatchIsRefused) {
  std::ostringstream log;
  EXPECT_THROW(train::Trainer(small_config({"per_device_batch_size=1.5"}), log), Error);
}

}  // namespace
}  // namespace tessera
