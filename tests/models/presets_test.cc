// Every family's presets build their graph with the published shapes and the published parameter
// count (MaxText's model_name presets; counts from the papers and the released checkpoints).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "tessera/config/config.h"
#include "tessera/core/error.h"
#include "tessera/core/source_dir.h"
#include "tessera/models/decoder.h"
#include "tessera/ops/rope.h"

namespace tessera {
namespace {

struct Preset {
  const char* model_name;
  double published;  // parameters
  double tolerance;  // relative
};

int64_t params_of(const std::string& model_name) {
  const std::vector<std::string> o = {"model_name=" + model_name, "run_name=presets",
                                      "per_device_batch_size=1", "max_target_length=16"};
  return models::model_spec_from_config(load_config(tessera::source_dir().string() + "/configs/base.yml", o))
      .num_params();
}

TEST(Presets, ParameterCountsMatchThePublishedOnes) {
  const Preset presets[] = {
      // OpenAI's GPT-2 checkpoints, counted exactly (tied embedding, 1024 positions).
      {"gpt2-124m", 124'439'808, 0},
      {"gpt2-355m", 354'823'168, 0},
      {"gpt2-774m", 774'030'080, 0},
      {"gpt2-1.5b", 1'557'611'200, 0},
      // Brown et al. 2020, table 2.1 (rounded to two digits there).
      {"gpt3-6b", 6.7e9, 0.01},
      {"gpt3-175b", 175.0e9, 0.005},
      // MaxText's gpt3-52k smoke-test shape and gpt3-22b, counted from their shapes.
      {"gpt3-52k", 52'464, 0},
      {"gpt3-22b", 22'068'768'768, 0},
      // Qwen's model cards (two or three digits, truncated: within one unit of the last one).
      {"qwen2.5-1.5b", 1.54e9, 0.01 / 1.54},
      {"qwen2.5-7b", 7.61e9, 0.01 / 7.61},
      {"qwen3-0.6b", 0.6e9, 0.1 / 0.6},
      {"qwen3-1.7b", 1.7e9, 0.1 / 1.7},
      {"qwen3-4b", 4.0e9, 0.1 / 4.0},
      {"qwen3-8b", 8.2e9, 0.1 / 8.2},
      {"qwen3-14b", 14.8e9, 0.1 / 14.8},
      {"qwen3-32b", 32.8e9, 0.1 / 32.8},
      // Meta's Llama releases.
      {"llama2-7b", 6'738'415'616, 0},
      {"llama2-70b", 68'976'648'192, 0},
      {"llama3-8b", 8'030'261'248, 0},
      {"llama3.2-1b", 1'235'814'400, 0},
      {"llama3.2-3b", 3'212'749'824, 0},
      // Mistral AI's Mixtral 8x7B checkpoint, exactly; 8x22B's model card (141 B, rounded).
      {"mixtral-8x7b", 46'702'792'704, 0},
      {"mixtral-8x22b", 141.0e9, 0.5 / 141},
      // OpenAI's gpt-oss model card (20.91 B and 116.83 B); the write-up's MoE "about 3.5 B".
      {"gpt-oss-20b", 20.91e9, 0.005 / 20.91},
      {"gpt-oss-120b", 116.83e9, 0.005 / 116.83},
      {"gpt-oss-3.5b", 3.5e9, 0.05},
      // Google's Gemma checkpoints on Hugging Face, exactly (tied, vocab 256000 / 262144); Gemma 3
      // 4B-27B: the language model of the multimodal checkpoints (their cards count the vision tower).
      {"gemma-2b", 2'506'172'416, 0},
      {"gemma-7b", 8'537'680'896, 0},
      {"gemma2-2b", 2'614'341'888, 0},
      {"gemma2-9b", 9'241'705'984, 0},
      {"gemma2-27b", 27'227'128'320, 0},
      {"gemma3-1b", 999'885'952, 0},
      {"gemma3-4b", 3.88e9, 0.005 / 3.88},
      {"gemma3-12b", 11.77e9, 0.01 / 11.77},
      {"gemma3-27b", 27.0e9, 0.1 / 27.0},
  };
  for (const Preset& p : presets) {
    SCOPED_TRACE(p.model_name);
    const double n = static_cast<double>(params_of(p.model_name));
    EXPECT_LE(std::abs(n - p.published), p.tolerance * p.published) << n;
  }
}

// normalize_embedding_logits (MaxText's key) divides the tied logits by sqrt(E) in one scale op
// named decoder.logits; with an untied output it would do nothing, so it is refused.
TEST(Presets, NormalizeEmbeddingLogitsScalesTheTiedLogits) {
  auto spec = [](std::vector<std::string> o) {
    o.insert(o.end(), {"model_name=gpt2-test", "run_name=presets", "override_model_config=true",
                       "max_target_length=16"});
    return models::model_spec_from_config(
        load_config(tessera::source_dir().string() + "/configs/base.yml", o));
  };
  const models::ModelSpec s = spec({"normalize_embedding_logits=true"});
  graph::Graph g;
  models::build_decoder(g, s);
  int found = 0;
  for (const graph::Node& n : g.nodes())
    if (n.op == graph::OpKind::kScale && n.name == "decoder.logits") {
      EXPECT_FLOAT_EQ(n.attr<graph::ScalarAttrs>().value, round_to_bf16(1.0f / std::sqrt(float(s.emb_dim))));
      ++found;
    }
  EXPECT_EQ(found, 1);
  EXPECT_THROW(spec({"normalize_embedding_logits=true", "logits_via_embedding=false"}), Error);
}

// Llama 3.2's RoPE: rope_type llama3.1 with the checkpoint's factors (32, 1, 4, 8192) from the
// llama3_* keys; the lowest frequency is theta^(-(D-2)/D) / 32, the highest unscaled. The keys
// with another rope_type would do nothing, so they are refused.
TEST(Presets, Llama32RopeScalingComesFromItsKeys) {
  auto spec = [](std::vector<std::string> o) {
    o.insert(o.end(), {"run_name=presets", "max_target_length=16"});
    return models::model_spec_from_config(
        load_config(tessera::source_dir().string() + "/configs/base.yml", o));
  };
  const ops::RopeTable table(models::rope_config(spec({"model_name=llama3.2-1b"}), 16));
  EXPECT_EQ(table.config().llama3.factor, 32.0);
  EXPECT_EQ(table.config().llama3.original_max_position_embeddings, 8192.0);
  EXPECT_DOUBLE_EQ(table.inv_freq(31), std::pow(500000.0, -62.0 / 64) / 32);
  EXPECT_DOUBLE_EQ(table.inv_freq(0), 1.0);
  EXPECT_EQ(models::rope_config(spec({"model_name=llama3.1-8b"}), 16).llama3.factor, 8.0);
  EXPECT_THROW(spec({"model_name=llama3-8b", "llama3_rope_factor=32"}), Error);
}

TEST(Presets, AnUnbuiltDecoderBlockNamesTheOnesThisBuildHas) {
  const std::vector<std::string> o = {"model_name=llama-test", "run_name=presets", "decoder_block=deepseek",
                                      "override_model_config=true"};
  try {
    models::model_spec_from_config(load_config(tessera::source_dir().string() + "/configs/base.yml", o));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("decoder_block 'deepseek' is not built by Tessera yet (available: llama2, "
                                   "mistral, default, gpt3, qwen2, qwen3, mixtral, gpt_oss, gemma, gemma2, "
                                   "gemma3)"),
        std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tessera
