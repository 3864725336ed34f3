// Loading: precedence (defaults < file < model preset < command line), MaxText's
// override_model_config rule, the spellings MaxText's YAML files use, and every kind of error with
// its message (key named, where it came from, closest key, value and what is allowed).
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>

#include "config_test_util.h"

namespace tessera {
namespace {

using testing::base_config;
using testing::expect_config_error;
using testing::fixture;
using testing::load;

TEST(Load, BaseConfigGivesTheDefaults) {
  Config c = load(base_config());
  EXPECT_EQ(testing::key_values(c), testing::key_values(default_config()));
  EXPECT_EQ(c.emb_dim, 2048);
}

TEST(Load, PrecedenceIsFileThenPresetThenCommandLine) {
  Config c = load(fixture("precedence.yml"), {"log_period=9", "max_target_length=64"});
  EXPECT_EQ(c.model_name, "fixture-model");
  EXPECT_EQ(c.base_emb_dim, 128);        // file 100 < preset 128
  EXPECT_EQ(c.base_num_query_heads, 8);  // preset
  EXPECT_EQ(c.base_mlp_dim, 300);        // file only
  EXPECT_EQ(c.steps, 7);                 // file only
  EXPECT_EQ(c.log_period, 9);            // file 3 < command line 9
  EXPECT_EQ(c.max_target_length, 64);    // command line only
  EXPECT_EQ(c.learning_rate, 3e-5);      // schema default
  EXPECT_EQ(c.emb_dim, 128);
  EXPECT_EQ(c.num_kv_heads, 4);
}

TEST(Load, ModelNameOnTheCommandLineChoosesThePreset) {
  Config c = load(base_config(), {"model_name=llama-test"});
  EXPECT_EQ(c.emb_dim, 64);
  EXPECT_EQ(c.num_query_heads, 4);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.mlp_dim, 160);
  EXPECT_EQ(c.num_decoder_layers, 2);
  EXPECT_EQ(c.vocab_size, 512);
  // The command line's model_name wins over the file's.
  EXPECT_EQ(load(fixture("precedence.yml"), {"model_name=llama-test"}).base_emb_dim, 64);
}

TEST(Load, PresetsHaveTheirPublishedShapes) {
  struct Shape {
    const char* name;
    int64_t emb, heads, kv, mlp, layers, vocab, theta;
    const char* block;
    const char* rope;
  };
  const Shape shapes[] = {
      {"llama2-7b", 4096, 32, 32, 11008, 32, 32000, 10000, "llama2", "default"},
      {"llama2-13b", 5120, 40, 40, 13824, 40, 32000, 10000, "llama2", "default"},
      {"llama2-70b", 8192, 64, 8, 28672, 80, 32000, 10000, "llama2", "default"},
      {"llama3-8b", 4096, 32, 8, 14336, 32, 128256, 500000, "llama2", "default"},
      {"llama3.1-8b", 4096, 32, 8, 14336, 32, 128256, 500000, "llama2", "llama3.1"},
      {"mistral-7b", 4096, 32, 8, 14336, 32, 32000, 1000000, "mistral", "default"},
      {"llama-test", 64, 4, 2, 160, 2, 512, 10000, "llama2", "default"},
      {"llama-125m", 768, 12, 12, 2048, 12, 32000, 10000, "llama2", "default"},
  };
  for (const Shape& s : shapes) {
    SCOPED_TRACE(s.name);
    Config c = load(base_config(), {std::string("model_name=") + s.name});
    EXPECT_EQ(c.emb_dim, s.emb);
    EXPECT_EQ(c.num_query_heads, s.heads);
    EXPECT_EQ(c.num_kv_heads, s.kv);
    EXPECT_EQ(c.mlp_dim, s.mlp);
    EXPECT_EQ(c.num_decoder_layers, s.layers);
    EXPECT_EQ(c.vocab_size, s.vocab);
    EXPECT_EQ(c.rope_max_timescale, s.theta);
    EXPECT_EQ(c.decoder_block, s.block);
    EXPECT_EQ(c.rope_type, s.rope);
    EXPECT_EQ(c.head_dim, std::string(s.name) == "llama-test"   ? 16
                          : std::string(s.name) == "llama-125m" ? 64
                                                                : 128);
    EXPECT_EQ(c.normalization_layer_epsilon, 1e-5);
    EXPECT_FALSE(c.logits_via_embedding);
    EXPECT_EQ(c.mlp_activations, (std::vector<std::string>{"silu", "linear"}));
  }
}

TEST(Load, PresetKeysNeedOverrideModelConfigOnTheCommandLine) {
  std::string msg = expect_config_error(
      [] {
        load(base_config(), {"model_name=llama2-7b", "base_emb_dim=512"});
      },
      {"'base_emb_dim'", "llama2-7b.yml", "override_model_config=true"});
  // With the switch, in either order.
  EXPECT_EQ(
      load(base_config(), {"base_emb_dim=512", "model_name=llama2-7b", "override_model_config=true"}).emb_dim,
      512);
  // Keys the preset does not set are free.
  EXPECT_EQ(load(base_config(), {"model_name=llama2-7b", "steps=5"}).steps, 5);
}

TEST(Load, PresetsCannotSetModelName) {
  expect_config_error([] { load(fixture("precedence.yml"), {"model_name=bad-preset"}); },
                      {"bad-preset.yml:2", "cannot set model_name"});
}

TEST(Load, ReadsMaxTextSpellings) {
  Config c = load(fixture("maxtext_style.yml"));
  EXPECT_TRUE(c.enable_checkpointing);
  EXPECT_FALSE(c.async_checkpointing);
  EXPECT_EQ(c.checkpoint_period, 10000);
  EXPECT_EQ(c.normalization_layer_epsilon, 1e-5);
  EXPECT_EQ(c.learning_rate, 3e-5);
  EXPECT_EQ(c.load_parameters_path, "");
  ASSERT_EQ(c.logical_axis_rules.size(), 2u);
  EXPECT_EQ(c.logical_axis_rules[0], (AxisRule{"embed", {"fsdp"}}));
  EXPECT_EQ(c.logical_axis_rules[1], (AxisRule{"mlp", {"tensor", "fsdp_transpose"}}));
}

TEST(Load, CommandLineValuesAreYamlScalarsOrFlowSequences) {
  Config c =
      load(base_config(), {"logical_axis_rules=[['embed','fsdp'], [kv, []]]", "mlp_activations=[gelu,linear]",
                           "per_device_batch_size=2", "learning_rate=1e-3", "enable_dropout=False",
                           "prompt=Q: what is 1 # 2? A:", "run_name='quoted name'", "dataset_path="});
  EXPECT_EQ(c.logical_axis_rules, (std::vector<AxisRule>{{"embed", {"fsdp"}}, {"kv", {}}}));
  EXPECT_EQ(c.mlp_activations, (std::vector<std::string>{"gelu", "linear"}));
  EXPECT_EQ(c.per_device_batch_size, 2.0);
  EXPECT_EQ(c.learning_rate, 1e-3);
  EXPECT_FALSE(c.enable_dropout);
  EXPECT_EQ(c.prompt, "Q: what is 1 # 2? A:");  // strings are taken verbatim
  EXPECT_EQ(c.run_name, "quoted name");         // unless quoted
  EXPECT_EQ(c.dataset_path, "");
}

TEST(LoadErrors, UnknownKeyInAFileNamesFileLineAndClosestKey) {
  expect_config_error(
      [] { load(fixture("typo_key.yml")); },
      {"unknown config key 'lerning_rate'", "typo_key.yml:3", "did you mean 'learning_rate'?"});
}

TEST(LoadErrors, UnknownKeyOnTheCommandLine) {
  expect_config_error([] { load(base_config(), {"stpes=10"}); },
                      {"unknown config key 'stpes'", "(command line)", "did you mean 'steps'?"});
  expect_config_error([] { load(base_config(), {"qqqqqqqqqqqqqq=1"}); }, {"'qqqqqqqqqqqqqq'", "help-config"});
  expect_config_error([] { load(base_config(), {"emb_dim=10"}); },
                      {"'emb_dim'", "is derived", "base_emb_dim"});
  expect_config_error([] { load(base_config(), {"dataset_name=x"}); },
                      {"MaxText key that Tessera does not support", "dataset_path"});
}

// The closest-key hint compares the unknown key with every key: a huge one must not cost its
// length times every key's length (it took minutes and gigabytes of small allocations).
TEST(LoadErrors, HugeUnknownKeyIsRefusedAtOnce) {
  const std::string key(400'000, 'q');
  const auto start = std::chrono::steady_clock::now();
  expect_config_error([&] { load(base_config(), {key + "=1"}); },
                      {"unknown config key 'qqqq", "help-config"});
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(LoadErrors, WrongTypeNamesKeyValueAndType) {
  expect_config_error([] { load(base_config(), {"steps=ten"}); },
                      {"'steps'", "(command line)", "expected an int", "'ten'"});
  expect_config_error([] { load(base_config(), {"steps=1.5"}); }, {"'steps'", "expected an int", "'1.5'"});
  expect_config_error([] { load(base_config(), {"learning_rate=fast"}); },
                      {"'learning_rate'", "expected a float"});
  expect_config_error([] { load(base_config(), {"learning_rate=.nan"}); }, {"expected a float"});
  expect_config_error([] { load(base_config(), {"packing=yes"}); },
                      {"'packing'", "expected a bool", "'yes'"});
  expect_config_error([] { load(base_config(), {"mlp_activations=silu"}); },
                      {"'mlp_activations'", "expected a list of strings"});
  expect_config_error([] { load(base_config(), {"steps="}); },
                      {"'steps'", "expected an int", "an empty value"});
  expect_config_error([] { load(base_config(), {"steps=[1, 2]"}); }, {"expected an int", "[1, 2]"});
  expect_config_error([] { load(base_config(), {"logical_axis_rules=[[embed, fsdp, x]]"}); },
                      {"'logical_axis_rules'", "[embed, fsdp, x]", "[logical_axis, mesh_axis]"});
  expect_config_error([] { load(base_config(), {"logical_axis_rules=[[embed, fdsp]]"}); },
                      {"unknown mesh axis 'fdsp'", "did you mean 'fsdp'?"});
  expect_config_error([] { load(base_config(), {"logical_axis_rules=[[embedding, fsdp]]"}); },
                      {"unknown logical axis 'embedding'"});
  expect_config_error([] { load(base_config(), {"steps=[1"}); }, {"'steps'", "cannot parse '[1'"});
}

TEST(LoadErrors, OutOfRangeNamesValueAndAllowedRange) {
  expect_config_error([] { load(fixture("out_of_range.yml")); },
                      {"'adam_b1'", "out_of_range.yml:2", "1.5 is out of range", "allowed: [0, 1)"});
  expect_config_error([] { load(base_config(), {"steps=0"}); }, {"'steps'", "0 is out of range", ">= 1"});
  expect_config_error([] { load(base_config(), {"ici_fsdp_parallelism=0"}); },
                      {"0 is out of range", "-1 (fill: the devices the other axes leave) or >= 1"});
  expect_config_error([] { load(base_config(), {"warmup_steps_fraction=1.5"}); }, {"allowed: [0, 1]"});
}

TEST(LoadErrors, ChoiceNamesValueAndChoices) {
  expect_config_error([] { load(base_config(), {"opt_type=adamx"}); },
                      {"'opt_type'", "'adamx' is not one of: adamw, sgd", "did you mean 'adamw'?"});
  expect_config_error([] { load(base_config(), {"mlp_activations=[silu, swiglu]"}); },
                      {"list element 'swiglu' is not one of"});
}

TEST(LoadErrors, UnsupportedValuesAreRejectedAfterAllSources) {
  expect_config_error([] { load(base_config(), {"opt_type=muon"}); },
                      {"'opt_type'", "'muon' is not supported"});
  expect_config_error([] { load(base_config(), {"weight_dtype=bfloat16"}); },
                      {"'weight_dtype'", "'bfloat16' is not supported", "float32"});
  expect_config_error([] { load(base_config(), {"dropout_rate=0.1"}); }, {"'dropout_rate'", "only 0"});
}

TEST(LoadErrors, MalformedYamlNamesFileAndLine) {
  expect_config_error([] { load(fixture("bad_syntax.yml")); }, {"bad_syntax.yml:", "malformed YAML"});
  std::string msg = expect_config_error([] { load(fixture("bad_syntax.yml")); }, {});
  // The unclosed sequence opens on line 4; yaml-cpp reports where it noticed (line 4 or 5).
  EXPECT_TRUE(msg.find("bad_syntax.yml:4:") != std::string::npos ||
              msg.find("bad_syntax.yml:5:") != std::string::npos)
      << msg;
  expect_config_error([] { load(fixture("not_a_map.yml")); }, {"not_a_map.yml", "expected `key: value`"});
  expect_config_error([] { load(fixture("duplicate_key.yml")); },
                      {"'steps' appears twice", "duplicate_key.yml", "lines 1 and 3"});
}

TEST(LoadErrors, UnreadableFileNamesPathAndReason) {
  expect_config_error([] { load(fixture("no_such_file.yml")); },
                      {"cannot open config file", "no_such_file.yml", "No such file or directory"});
  expect_config_error([] { load(fixture("models")); },
                      {"config file", "is a folder; expected a regular file"});
}

TEST(LoadErrors, MissingPresetListsAvailableModels) {
  expect_config_error([] { load(base_config(), {"model_name=llama9-7b"}); },
                      {"'model_name' (command line)", "no preset 'llama9-7b.yml'",
                       "available models:", "llama2-7b", "llama-test", "mistral-7b"});
  expect_config_error([] { load(base_config(), {"model_name=../base"}); }, {"is not a preset name"});
}

TEST(LoadErrors, CommandLineSyntax) {
  expect_config_error(
      [] {
        load(base_config(), {"steps=1", "log_period=2", "steps=3"});
      },
      {"'steps' is given twice on the command line", "steps=1", "steps=3"});
  expect_config_error([] { load(base_config(), {"steps"}); }, {"'steps' is not a key=value override"});
  expect_config_error([] { load(base_config(), {"=5"}); }, {"'=5' is not a key=value override"});
}

}  // namespace
}  // namespace tessera
