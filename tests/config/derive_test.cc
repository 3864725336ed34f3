// Derived values and cross-key checks (finalize_config), and the resolved dump: it round-trips
// through load_config and is written atomically to {base_output_directory}/{run_name}/config.yml.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "config_test_util.h"

namespace tessera {
namespace {

using testing::base_config;
using testing::expect_config_error;
using testing::load;

int64_t ici(const Config& c, MeshAxis a) {
  return c.ici_parallelism[static_cast<int>(a)];
}
int64_t dcn(const Config& c, MeshAxis a) {
  return c.dcn_parallelism[static_cast<int>(a)];
}

// MaxText's get_individual_scales, by hand for each scale:
//   log2 s = 3*base + rem; heads = mlp = base + (rem > 0); emb = base + (rem > 1); layers = base.
TEST(Derive, DimsFromGlobalParameterScale) {
  struct Case {
    int scale;
    int64_t emb, heads, kv, mlp, layers;
  };
  // Base: emb 2048, heads 16/16, mlp 7168, layers 16.
  const Case cases[] = {
      {1, 2048, 16, 16, 7168, 16},    // 2^0: base 0 rem 0
      {2, 2048, 32, 32, 14336, 16},   // 2^1: rem 1 -> heads, mlp
      {4, 4096, 32, 32, 14336, 16},   // 2^2: rem 2 -> heads, mlp, emb
      {8, 4096, 32, 32, 14336, 32},   // 2^3: base 1 -> all four once
      {16, 4096, 64, 64, 28672, 32},  // 2^4: base 1 rem 1
      {64, 8192, 64, 64, 28672, 64},  // 2^6: base 2
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.scale);
    Config c = load(base_config(), {"global_parameter_scale=" + std::to_string(k.scale)});
    EXPECT_EQ(c.emb_dim, k.emb);
    EXPECT_EQ(c.num_query_heads, k.heads);
    EXPECT_EQ(c.num_kv_heads, k.kv);
    EXPECT_EQ(c.mlp_dim, k.mlp);
    EXPECT_EQ(c.num_decoder_layers, k.layers);
    EXPECT_EQ(c.head_dim, 128);  // never scaled
  }
}

TEST(Derive, GlobalParameterScaleMustBeAPowerOfTwo) {
  for (const char* s : {"3", "6", "12"})
    expect_config_error([&] { load(base_config(), {std::string("global_parameter_scale=") + s}); },
                        {"'global_parameter_scale'", std::string(s) + " is not a power of 2"});
}

TEST(Derive, KvHeadsMustDivideQueryHeads) {
  expect_config_error(
      [] {
        load(base_config(), {"base_num_query_heads=12", "base_num_kv_heads=5"});
      },
      {"num_query_heads 12 is not a multiple of num_kv_heads 5"});
}

TEST(Derive, BatchSizes) {
  Config c = load(base_config(), {"per_device_batch_size=4", "gradient_accumulation_steps=3"}, {8, 1});
  EXPECT_EQ(c.micro_batch_size_to_train_on, 32);
  EXPECT_EQ(c.global_batch_size_to_train_on, 96);
  EXPECT_EQ(c.global_batch_size_to_eval_on, 32);  // eval_per_device_batch_size 0 = the training one
  // Fractional per-device batches are fine when the devices add up to whole sequences.
  c = load(base_config(), {"per_device_batch_size=0.25", "eval_per_device_batch_size=0.5"}, {8, 1});
  EXPECT_EQ(c.micro_batch_size_to_train_on, 2);
  EXPECT_EQ(c.global_batch_size_to_eval_on, 4);
  expect_config_error([] { load(base_config(), {"per_device_batch_size=0.5"}); },
                      {"per_device_batch_size 0.5 x 1 device(s)", "not a whole number"});
  expect_config_error([] { load(base_config(), {"eval_per_device_batch_size=1.5"}); },
                      {"eval_per_device_batch_size 1.5"});
}

TEST(Derive, ScheduleStepsDefaultToSteps) {
  EXPECT_EQ(load(base_config(), {"steps=500"}).lr_schedule_steps, 500);
  EXPECT_EQ(load(base_config(), {"steps=500", "learning_rate_schedule_steps=800"}).lr_schedule_steps, 800);
}

TEST(Derive, MeshFillsTheMinusOneAxis) {
  // Defaults: ici_fsdp -1 takes every device of the slice, dcn_data -1 every slice.
  Config c = load(base_config(), {}, {8, 1});
  EXPECT_EQ(ici(c, MeshAxis::kFsdp), 8);
  EXPECT_EQ(dcn(c, MeshAxis::kData), 1);
  c = load(base_config(), {"ici_tensor_parallelism=2"}, {8, 1});
  EXPECT_EQ(ici(c, MeshAxis::kFsdp), 4);
  EXPECT_EQ(ici(c, MeshAxis::kTensor), 2);
  c = load(base_config(), {"ici_fsdp_parallelism=2", "ici_data_parallelism=-1", "ici_pipeline_parallelism=2"},
           {16, 2});
  EXPECT_EQ(ici(c, MeshAxis::kData), 2);  // 16 devices / 2 slices = 8 per slice = 2 x 2 x 2
  EXPECT_EQ(ici(c, MeshAxis::kStage), 2);
  EXPECT_EQ(dcn(c, MeshAxis::kData), 2);
  // No -1 at all: the product must match exactly.
  c = load(base_config(), {"ici_fsdp_parallelism=2", "ici_tensor_parallelism=2"}, {4, 1});
  EXPECT_EQ(ici(c, MeshAxis::kFsdp) * ici(c, MeshAxis::kTensor), 4);
}

TEST(Derive, MeshErrorsNameKeysAndNumbers) {
  expect_config_error(
      [] {
        load(base_config(), {"ici_fsdp_parallelism=2", "ici_tensor_parallelism=2"}, {8, 1});
      },
      {"ici parallelism does not match", "ici_fsdp_parallelism=2 x ici_tensor_parallelism=2 = 4",
       "8 device(s) per slice"});
  expect_config_error(
      [] {
        load(base_config(), {"ici_tensor_parallelism=3"}, {8, 1});
      },
      {"ici_fsdp_parallelism=-1 cannot be filled", "multiply to 3", "ici_tensor_parallelism=3"});
  expect_config_error(
      [] {
        load(base_config(), {"ici_data_parallelism=-1"}, {8, 1});
      },
      {"ici_data_parallelism and ici_fsdp_parallelism are both -1"});
  expect_config_error(
      [] {
        load(base_config(), {"dcn_data_parallelism=2"}, {8, 1});
      },
      {"dcn parallelism does not match", "dcn_data_parallelism=2 = 2", "1 slice(s)"});
  expect_config_error([] { load(base_config(), {}, {6, 4}); }, {"6 device(s) cannot be split into 4"});
}

TEST(Derive, CrossKeyChecks) {
  expect_config_error(
      [] {
        load(base_config(), {"load_parameters_path=a", "load_full_state_path=b"});
      },
      {"load_parameters_path ('a') and load_full_state_path ('b') are both set"});
  expect_config_error([] { load(base_config(), {"dataset_type=tokens"}); },
                      {"dataset_type 'tokens' needs dataset_path"});
  expect_config_error(
      [] {
        load(base_config(), {"dataset_type=text", "dataset_path=x.jsonl"});
      },
      {"needs tokenizer_path"});
  expect_config_error([] { load(base_config(), {"attention_type=local_sliding"}); },
                      {"sliding_window_size > 0"});
  expect_config_error([] { load(base_config(), {"decode_sampling_strategy=nucleus"}); },
                      {"decode_sampling_nucleus_p in (0, 1]"});
  expect_config_error([] { load(base_config(), {"decode_sampling_strategy=topk"}); },
                      {"decode_sampling_top_k >= 1"});
  expect_config_error(
      [] {
        load(base_config(),
             {"lr_schedule_type=wsd", "warmup_steps_fraction=0.5", "wsd_decay_steps_fraction=0.6"});
      },
      {"exceeds 1"});
  expect_config_error([] { load(base_config(), {"mlp_activations=[]"}); },
                      {"'mlp_activations': the list is empty"});
  expect_config_error([] { load(base_config(), {"run_name=a/b"}); },
                      {"'run_name'", "not a plain folder name"});
}

TEST(Dump, RoundTripsThroughLoadConfig) {
  const std::vector<std::string> overrides = {"model_name=llama-test",
                                              "run_name=round trip",
                                              "steps=123",
                                              "learning_rate=0.000123456789",
                                              "prompt=say \"hi\": # not a comment",
                                              "logical_axis_rules=[[embed, [fsdp, tensor]], [kv, []]]",
                                              "override_model_config=true",
                                              "base_emb_dim=96",
                                              "per_device_batch_size=0.5",
                                              "ici_fsdp_parallelism=2"};
  const Config original = load(base_config(), overrides, {2, 1});
  const std::filesystem::path dir = testing::make_temp_dir();
  const std::filesystem::path file = dir / "resolved.yml";
  std::ofstream(file) << config_to_yaml(original);
  const Config again = load(file, {}, {2, 1});
  // The dump names no preset (its values are written out), so only model_name differs.
  EXPECT_EQ(testing::key_values(again, {"model_name"}), testing::key_values(original, {"model_name"}));
  EXPECT_EQ(again.model_name, "default");
  EXPECT_EQ(again.emb_dim, 96);
  EXPECT_EQ(again.global_batch_size_to_train_on, original.global_batch_size_to_train_on);
  EXPECT_EQ(again.ici_parallelism, original.ici_parallelism);
  EXPECT_NE(config_to_yaml(original).find("# resolved from preset \"llama-test\""), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(Dump, WritesAtomicallyIntoTheRunFolder) {
  const std::filesystem::path dir = testing::make_temp_dir();
  Config c =
      load(base_config(), {"run_name=r1", "base_output_directory=" + (dir / "out").string(), "steps=9"});
  const std::filesystem::path path = write_resolved_config(c);
  EXPECT_EQ(path, dir / "out" / "r1" / "config.yml");
  ASSERT_TRUE(std::filesystem::is_regular_file(path));
  // Nothing but the file is left in the folder (no temporary).
  int entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(path.parent_path())) ++entries;
  EXPECT_EQ(entries, 1);
  EXPECT_EQ(load(path).steps, 9);
  // Writing again replaces the file.
  c.steps = 10;
  write_resolved_config(c);
  EXPECT_EQ(load(path).steps, 10);
  std::filesystem::remove_all(dir);
}

TEST(Dump, NeedsARunNameAndAWritableFolder) {
  Config c = load(base_config());
  expect_config_error([&] { write_resolved_config(c); }, {"run_name is empty", "run_name=my_run"});
  const std::filesystem::path dir = testing::make_temp_dir();
  std::ofstream(dir / "file") << "x";
  c.run_name = "r";
  c.base_output_directory = (dir / "file").string();  // a file where a folder should be
  testing::expect_error([&] { write_resolved_config(c); }, ErrorKind::kIo, {"cannot create the run folder"});
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessera
