// Greedy decoding against Hugging Face transformers' generate(): two tiny random Llama models
// (tools/make_decode_golden.py: GQA with untied embeddings and default RoPE; GQA with tied
// embeddings and Llama 3.1 RoPE scaling) saved with save_pretrained, read here through the
// Hugging Face name map (convert/hf_tensors.h). The three prompts run together through three slots
// of one engine (generate() ran them one at a time); every prompt's greedy ids, EOS stop
// included, must equal generate()'s. The golden file keeps every greedy choice at least 1e-3
// ahead of the runner-up, so float32 rounding cannot flip one. Each step's logits are also
// compared with generate()'s raw logits: the two compute the same function in float32 with other
// summation orders and RoPE tables (Tessera's in double, Hugging Face's angles in float32), which
// agree to 2e-5 of the row's largest |logit| (observed ~1e-6).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tessera/convert/hf_tensors.h"
#include "tessera/core/safetensors.h"
#include "tessera/infer/engine.h"
#include "tessera/infer/generate.h"
#include "testing/data_dir.h"
#include "testing/op_test_util.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

struct HfModel {
  fs::path dir;
  nlohmann::json config, golden;
  models::ModelSpec spec;
  SafetensorsFile weights, logits;
  std::vector<std::vector<float>> buffers;  // parameters in Tessera's layout, owned for the source

  explicit HfModel(const std::string& name)
      : dir(tessera::testing::data_dir() / "golden" / name),
        weights((dir / "model.safetensors").string()),
        logits((dir / "logits.safetensors").string()) {
    std::ifstream(dir / "config.json") >> config;
    std::ifstream(dir / "generate.json") >> golden;
    spec.emb_dim = config["hidden_size"];
    spec.num_query_heads = config["num_attention_heads"];
    spec.num_kv_heads = config["num_key_value_heads"];
    spec.head_dim = config["head_dim"];
    spec.mlp_dim = config["intermediate_size"];
    spec.num_decoder_layers = config["num_hidden_layers"];
    spec.vocab_size = config["vocab_size"];
    spec.norm_eps = config["rms_norm_eps"];
    spec.logits_via_embedding = config["tie_word_embeddings"];
    const nlohmann::json& rope = config["rope_parameters"];
    spec.rope_theta = rope["rope_theta"];
    if (rope["rope_type"] == "llama3") {
      // Tessera's llama3.1 scaling has Llama 3.1's published constants (ops/rope.h).
      EXPECT_EQ(rope["factor"], 8.0);
      EXPECT_EQ(rope["low_freq_factor"], 1.0);
      EXPECT_EQ(rope["high_freq_factor"], 4.0);
      EXPECT_EQ(rope["original_max_position_embeddings"], 8192);
      spec.rope_type = "llama3.1";
    }
    spec.dtype = DType::kF32;
  }

  // Hugging Face's tensors under Tessera's names, Linear weights transposed back to [in, out].
  infer::ParameterSource source() {
    std::map<std::string, Tensor> by_name;
    for (const convert::HfName& n : convert::hf_names(spec)) {
      const Tensor t = weights.get(n.hf);
      const std::vector<double> values = testing::to_vector(t);
      std::vector<float>& b = buffers.emplace_back(values.begin(), values.end());
      Shape shape = t.shape();
      if (n.transpose) {
        const int64_t out = t.dim(0), in = t.dim(1);
        for (int64_t o = 0; o < out; ++o)
          for (int64_t i = 0; i < in; ++i) b[i * out + o] = t.ptr<float>()[o * in + i];
        shape = Shape{in, out};
      }
      by_name[n.tessera] = Tensor(b.data(), shape, DType::kF32);
    }
    return [by_name](const std::string& name) { return by_name.at(name); };
  }
};

void check_model(const std::string& name) {
  SCOPED_TRACE(name);
  HfModel m(name);
  const int64_t max_new = m.golden["max_new_tokens"];
  const auto eos = m.golden["eos_token_id"].get<int32_t>();
  std::vector<std::vector<int32_t>> prompts;
  int64_t longest = 0;
  for (const auto& c : m.golden["cases"]) {
    prompts.push_back(c["prompt"].get<std::vector<int32_t>>());
    longest = std::max<int64_t>(longest, static_cast<int64_t>(prompts.back().size()));
  }
  auto engine = infer::make_engine(
      m.spec, {.max_slots = 3, .max_target_length = longest + max_new, .max_prefill_length = longest},
      m.source());

  infer::GenerateOptions o;
  o.eos_id = eos;
  o.max_new_tokens = max_new;
  const std::vector<infer::Completion> got = infer::generate(*engine, prompts, o);
  for (size_t i = 0; i < prompts.size(); ++i) {
    SCOPED_TRACE(i);
    std::vector<int32_t> want = m.golden["cases"][i]["output"].get<std::vector<int32_t>>();
    const bool stopped = !want.empty() && want.back() == eos;  // generate() keeps the EOS it stopped at
    if (stopped) want.pop_back();
    EXPECT_EQ(got[i].tokens, want);
    EXPECT_EQ(got[i].stop, stopped ? infer::StopReason::kEos : infer::StopReason::kLength);
  }

  // Step by step, the logits of each greedy step.
  const int64_t V = m.spec.vocab_size;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::vector<double> want = testing::to_vector(m.logits.get("case" + std::to_string(i)));
    const std::vector<int32_t> out = m.golden["cases"][i]["output"].get<std::vector<int32_t>>();
    std::vector<float> row(static_cast<size_t>(V));
    for (size_t step = 0; step < out.size(); ++step) {
      SCOPED_TRACE(::testing::Message() << "prompt " << i << " step " << step);
      if (step == 0) {
        engine->prefill(0, prompts[i], row);
      } else {
        const int slot[] = {0};
        engine->decode(slot, std::span(&out[step - 1], 1), row);
      }
      const std::vector<double> w(want.begin() + static_cast<int64_t>(step) * V,
                                  want.begin() + static_cast<int64_t>(step + 1) * V);
      double peak = 0;
      for (double x : w) peak = std::max(peak, std::abs(x));
      EXPECT_TRUE(testing::all_close(std::vector<double>(row.begin(), row.end()), w, 0, 2e-5 * peak));
    }
  }
}

TEST(HfGenerate, GreedyMatchesTransformersDefaultRope) {
  check_model("default");
}

TEST(HfGenerate, GreedyMatchesTransformersTiedLlama3Rope) {
  check_model("llama3_tied");
}

}  // namespace
}  // namespace tessera
