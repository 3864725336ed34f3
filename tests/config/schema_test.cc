// The schema table: it covers every key member of Config exactly once, its defaults parse and are
// MaxText's, configs/base.yml agrees with it, and the help helpers describe what is allowed.
#include <gtest/gtest.h>

#include <set>
#include <utility>

#include "config_test_util.h"

namespace tessera {
namespace {

using config::FieldSpec;
using config::FieldType;
using testing::base_config;

// Counts the members of an aggregate: the largest N for which T{x1, ..., xN} compiles, where each
// x converts to anything. No member of Config is brace-elided, since a value converts directly.
struct AnyValue {
  template <typename T>
  operator T() const;  // declared only: used in unevaluated contexts
};
template <typename T, size_t... I>
constexpr bool brace_constructible(std::index_sequence<I...>) {
  return requires {
    T{(static_cast<void>(I), AnyValue{})...};
  };
}
template <typename T, size_t N = 0>
constexpr size_t aggregate_member_count() {
  if constexpr (brace_constructible<T>(std::make_index_sequence<N + 1>{}))
    return aggregate_member_count<T, N + 1>();
  else
    return N;
}

TEST(Schema, CoversEveryKeyMemberOnce) {
  const auto& table = config::schema();
  // Each entry fills a different member...
  for (size_t i = 0; i < table.size(); ++i)
    for (size_t j = i + 1; j < table.size(); ++j)
      EXPECT_FALSE(table[i].member == table[j].member) << table[i].name << " and " << table[j].name;
  // ...and there are as many entries as key members (all members but the derived ones).
  EXPECT_EQ(aggregate_member_count<Config>(), table.size() + kNumDerivedConfigMembers);
}

TEST(Schema, NamesAreUniqueAndEntriesComplete) {
  std::set<std::string_view> names;
  for (const FieldSpec& f : config::schema()) {
    EXPECT_TRUE(names.insert(f.name).second) << f.name;
    EXPECT_FALSE(f.help.empty()) << f.name;
    EXPECT_FALSE(f.group.empty()) << f.name;
    EXPECT_EQ(config::find_field(f.name), &f);
    if (f.type == FieldType::kChoice) {
      EXPECT_FALSE(f.choices.empty()) << f.name;
    }
  }
  EXPECT_EQ(config::find_field("no_such_key"), nullptr);
}

TEST(Schema, DefaultsAreMaxTextsWhereTheMeaningIsTheSame) {
  const Config c = default_config();
  EXPECT_EQ(c.run_name, "");
  EXPECT_EQ(c.model_name, "default");
  EXPECT_EQ(c.decoder_block, "llama2");
  EXPECT_EQ(c.base_emb_dim, 2048);
  EXPECT_EQ(c.base_num_query_heads, 16);
  EXPECT_EQ(c.base_num_kv_heads, 16);
  EXPECT_EQ(c.base_mlp_dim, 7168);
  EXPECT_EQ(c.base_num_decoder_layers, 16);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.mlp_activations, (std::vector<std::string>{"silu", "linear"}));
  EXPECT_EQ(c.normalization_layer_epsilon, 1e-5);
  EXPECT_EQ(c.vocab_size, 32000);
  EXPECT_EQ(c.dtype, "bfloat16");
  EXPECT_EQ(c.weight_dtype, "float32");
  EXPECT_EQ(c.remat_policy, "full");
  EXPECT_FALSE(c.scan_layers);  // MaxText: true; Tessera builds unstacked layers only
  EXPECT_EQ(c.per_device_batch_size, 12.0);
  EXPECT_EQ(c.max_target_length, 2048);
  EXPECT_EQ(c.steps, 150001);
  EXPECT_EQ(c.learning_rate, 3e-5);
  EXPECT_EQ(c.lr_schedule_type, "cosine");
  EXPECT_EQ(c.warmup_steps_fraction, 0.1);
  EXPECT_EQ(c.learning_rate_final_fraction, 0.1);
  EXPECT_EQ(c.learning_rate_schedule_steps, -1);
  EXPECT_EQ(c.opt_type, "adamw");
  EXPECT_EQ(c.adam_b1, 0.9);
  EXPECT_EQ(c.adam_b2, 0.95);
  EXPECT_EQ(c.adam_eps, 1e-8);
  EXPECT_EQ(c.adam_eps_root, 0.0);
  EXPECT_EQ(c.adam_weight_decay, 0.1);
  EXPECT_EQ(c.gradient_clipping_threshold, 1.0);
  EXPECT_EQ(c.gradient_accumulation_steps, 1);
  EXPECT_TRUE(c.enable_checkpointing);
  EXPECT_TRUE(c.async_checkpointing);
  EXPECT_EQ(c.checkpoint_period, 10000);
  EXPECT_EQ(c.log_period, 100);
  EXPECT_TRUE(c.enable_tensorboard);
  EXPECT_EQ(c.eval_interval, -1);
  EXPECT_EQ(c.eval_per_device_batch_size, 0.0);
  EXPECT_EQ(c.ici_fsdp_parallelism, -1);
  EXPECT_EQ(c.dcn_data_parallelism, -1);
  EXPECT_EQ(c.ici_data_parallelism, 1);
  EXPECT_EQ(c.dcn_fsdp_parallelism, 1);
  EXPECT_EQ(c.max_prefill_predict_length, 64);
  EXPECT_EQ(c.decode_sampling_strategy, "greedy");
  EXPECT_EQ(c.decode_sampling_temperature, 1.0);
  EXPECT_TRUE(c.packing && c.add_bos && c.add_eos);
  EXPECT_EQ(c.tokenizer_type, "sentencepiece");
  // Local defaults where MaxText's are TPU or cloud specific.
  EXPECT_EQ(c.base_output_directory, "runs");
  EXPECT_EQ(c.hardware, "cpu");
  EXPECT_EQ(c.dataset_type, "synthetic");
  // Default rules: MaxText's, restricted to Tessera's axes; the first one shards the batch.
  ASSERT_FALSE(c.logical_axis_rules.empty());
  EXPECT_EQ(c.logical_axis_rules[0],
            (AxisRule{"activation_batch", {"data", "fsdp", "fsdp_transpose", "expert"}}));
  EXPECT_EQ(c.logical_axis_rules.back(), (AxisRule{"exp", {"expert"}}));
}

TEST(Schema, DefaultConfigFinalizesToAOneBillionParameterShape) {
  Config c = default_config();
  finalize_config(c);
  EXPECT_EQ(c.emb_dim, 2048);
  EXPECT_EQ(c.num_decoder_layers, 16);
  EXPECT_EQ(c.global_batch_size_to_train_on, 12);
  EXPECT_EQ(c.lr_schedule_steps, 150001);
  EXPECT_EQ(c.ici_parallelism[static_cast<int>(MeshAxis::kFsdp)], 1);
}

// configs/base.yml holds every key, each at its schema default, and nothing else.
TEST(Schema, BaseYamlAgreesWithTheSchema) {
  YAML::Node root = YAML::LoadFile(base_config().string());
  ASSERT_TRUE(root.IsMap());
  std::set<std::string> in_file;
  for (const auto& kv : root) {
    const std::string key = kv.first.Scalar();
    EXPECT_NE(config::find_field(key), nullptr) << "base.yml key '" << key << "' is not in the schema";
    in_file.insert(key);
  }
  for (const FieldSpec& f : config::schema())
    EXPECT_TRUE(in_file.count(std::string(f.name)))
        << "schema key '" << f.name << "' is missing from base.yml";
  const Config from_file = testing::load(base_config());
  EXPECT_EQ(testing::key_values(from_file), testing::key_values(default_config()));
}

TEST(Schema, DescribesAllowedValues) {
  EXPECT_EQ(config::describe_allowed(*config::find_field("adam_b1")), "[0, 1)");
  EXPECT_EQ(config::describe_allowed(*config::find_field("steps")), ">= 1");
  EXPECT_EQ(config::describe_allowed(*config::find_field("opt_type")), "adamw, sgd");
  EXPECT_EQ(config::describe_allowed(*config::find_field("ici_fsdp_parallelism")),
            "-1 (fill: the devices the other axes leave) or >= 1");
  EXPECT_EQ(config::describe_allowed(*config::find_field("decode_sampling_temperature")), "> 0");
}

TEST(Schema, SuggestsTheClosestKey) {
  EXPECT_EQ(config::closest_key("stpes"), "steps");                    // transposition
  EXPECT_EQ(config::closest_key("lerning_rate"), "learning_rate");     // deletion
  EXPECT_EQ(config::closest_key("ici_fsdp"), "ici_fsdp_parallelism");  // prefix of a key
  EXPECT_EQ(config::closest_key("cosine_learning_rate_final_fraction"), "learning_rate_final_fraction");
  EXPECT_EQ(config::closest_key("zzzzzzzzzzzzzzzzzz"), "");
}

TEST(Schema, FormatsValuesAsYamlThatParsesBack) {
  Config c = default_config();
  c.prompt = "say \"hi\"\n\tand a back\\slash";
  c.learning_rate = 1.0 / 3.0;
  c.adam_eps = 1e-300;
  for (const FieldSpec& f : config::schema()) {
    Config back = default_config();
    config::set_field(f, back, YAML::Load(config::format_value(f, c)), {"test"});
    EXPECT_EQ(config::format_value(f, back), config::format_value(f, c)) << f.name;
  }
  EXPECT_EQ(config::format_value(*config::find_field("gradient_clipping_threshold"), c), "1.0");
  EXPECT_EQ(config::format_value(*config::find_field("mlp_activations"), c), R"(["silu", "linear"])");
}

}  // namespace
}  // namespace tessera
