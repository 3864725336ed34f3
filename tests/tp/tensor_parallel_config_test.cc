// The tensor-parallel axes read from logical_axis_rules (models/tensor_parallel.h): MaxText's
// default rules split heads, q_heads, kv_heads, mlp and vocab; the first rule naming an axis
// decides; and the layouts Tessera does not build are refused with kConfig naming what is wrong.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/core/source_dir.h"
#include "tessera/models/tensor_parallel.h"

namespace tessera {
namespace {

Config load(std::vector<std::string> overrides, int64_t devices) {
  overrides.insert(overrides.begin(), "model_name=llama-test");
  return load_config(tessera::source_dir() / "configs" / "base.yml", overrides,
                     DeviceCount{.num_devices = devices, .num_slices = 1});
}

std::string config_error(const std::vector<std::string>& overrides, int64_t devices) {
  try {
    models::tensor_parallel_axes(load(overrides, devices));
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig) << e.what();
    return e.what();
  }
  return "no error";
}

TEST(TensorParallelAxes, DefaultRulesSplitMegatronsAxes) {
  const Config cfg = load({"ici_tensor_parallelism=2", "ici_fsdp_parallelism=1"}, 2);
  EXPECT_EQ(models::tensor_parallel_axes(cfg),
            (std::vector<std::string>{"heads", "q_heads", "kv_heads", "mlp", "vocab"}));
  models::ModelSpec s;
  models::set_tensor_parallel(s, cfg, 1);
  EXPECT_EQ(s.tp_size, 2);
  EXPECT_EQ(s.tp_rank, 1);
  EXPECT_EQ(s.tp_axes.size(), 5u);
  // One device: nothing is split.
  EXPECT_TRUE(models::tensor_parallel_axes(load({}, 1)).empty());
}

TEST(TensorParallelAxes, TheFirstRuleNamingAnAxisDecides) {
  // [mlp, []] placed first keeps the MLP whole on every tensor rank.
  const std::string rules =
      "logical_axis_rules=[[mlp, []], [mlp, [tensor]], [vocab, [tensor]], [heads, [tensor]], "
      "[q_heads, [tensor]], [kv_heads, [tensor]], [embed, [fsdp]]]";
  const Config cfg = load({"ici_tensor_parallelism=2", "ici_fsdp_parallelism=1", rules}, 2);
  EXPECT_EQ(models::tensor_parallel_axes(cfg),
            (std::vector<std::string>{"heads", "q_heads", "kv_heads", "vocab"}));
}

TEST(TensorParallelAxes, RefusesLayoutsTesseraDoesNotBuild) {
  const std::vector<std::string> tp2 = {"ici_tensor_parallelism=2", "ici_fsdp_parallelism=1"};
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), tp2.begin(), tp2.end());
    return more;
  };
  EXPECT_NE(config_error(with({"logical_axis_rules=[[embed, [tensor]], [mlp, [tensor]]]"}), 2)
                .find("put `embed` on the tensor axis"),
            std::string::npos);
  EXPECT_NE(config_error(with({"logical_axis_rules=[[embed, [fsdp]], [norm, [tensor]]]"}), 2)
                .find("put none of heads, q_heads, kv_heads, mlp, vocab on the tensor axis"),
            std::string::npos);
  EXPECT_NE(
      config_error({"ici_tensor_parallelism=2", "ici_sequence_parallelism=2", "ici_fsdp_parallelism=1"}, 4)
          .find("with the sequence axis of size 2"),
      std::string::npos);
  EXPECT_NE(config_error(
                {"ici_tensor_parallelism=2", "ici_fsdp_transpose_parallelism=2", "ici_fsdp_parallelism=1"}, 4)
                .find("with the fsdp_transpose axis of size 2"),
            std::string::npos);
}

}  // namespace
}  // namespace tessera
