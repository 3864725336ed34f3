// Tessera's Gemma family against Hugging Face transformers: tiny GemmaForCausalLM (2 layers, MQA),
// Gemma2ForCausalLM (3 layers: sliding window 5, full, sliding; attention and final soft caps;
// query_pre_attn_scalar 24) and Gemma3ForCausalLM (6 layers: five sliding of window 4 then one
// full; QK-norm; RoPE theta 1e4 local, 1e6 with linear scaling x8 global; query_pre_attn_scalar 20),
// each hidden 48, 4 heads of 16, GeGLU 96, vocabulary 101, tied, made by tools/make_gemma_golden.py
// and committed beside this test (batch 2 x 13 tokens).
//
// Tolerances: those of the Llama golden (llama_golden_test.cc explains them), whose reductions
// these models share: float32 logits 2e-5 rel / 2e-6 abs, loss 2e-6, every gradient 1e-4 rel /
// 1e-6 abs; bfloat16 logits 0.06 abs, loss 1e-2. These models' projections are drawn 7-15x wider
// than Hugging Face's init (so that greedy decoding does not repeat a token), and the rounding
// grows with the activations: the float32 logits' absolute bound is 2e-6 per unit of the largest
// logit (2.4-2.9 here), and the bfloat16 logits' 0.1. Decoding: the graph engine's step logits within
// the float32 bound of transformers' forward, and its greedy tokens equal to generate()'s.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "golden_util.h"
#include "tessera/config/config.h"
#include "tessera/core/safetensors.h"
#include "tessera/core/source_dir.h"
#include "tessera/models/decoder.h"
#include "testing/data_dir.h"
#include "testing/op_test_util.h"

namespace tessera {
namespace {

const std::string kDir = tessera::testing::data_dir().string() + "/golden/";

struct Golden {
  std::string block;
  nlohmann::json meta;
  SafetensorsFile file;
  explicit Golden(const std::string& b) : block(b), file(kDir + b + "_tiny.safetensors") {
    std::ifstream(kDir + b + "_tiny.json") >> meta;
  }

  // The model through the config keys a user sets for it, read from transformers' config.
  models::ModelSpec spec(DType dtype) const {
    const auto& m = meta;
    auto n = [&](const nlohmann::json& v) { return std::to_string(v.get<double>()); };
    auto i = [&](const nlohmann::json& v) { return std::to_string(v.get<int64_t>()); };
    std::map<std::string, std::string> kv = {
        {"model_name", "gemma-test"},
        {"run_name", "golden"},
        {"override_model_config", "true"},
        {"decoder_block", block},
        {"base_emb_dim", i(m["hidden_size"])},
        {"base_num_query_heads", i(m["num_attention_heads"])},
        {"base_num_kv_heads", i(m["num_key_value_heads"])},
        {"head_dim", i(m["head_dim"])},
        {"base_mlp_dim", i(m["intermediate_size"])},
        {"base_num_decoder_layers", i(m["num_hidden_layers"])},
        {"vocab_size", i(m["vocab_size"])},
        {"normalization_layer_epsilon", n(m["rms_norm_eps"])},
        {"per_device_batch_size", i(m["batch"])},
        {"max_target_length", i(m["seq"])},
        {"logits_via_embedding", "true"},
        {"attn_logits_soft_cap", "0"},
        {"final_logits_soft_cap", "0"},
        {"query_pre_attn_scalar", "0"},
        {"local_rope_max_timescale", "-1"},
        {"rope_linear_scaling_factor", "1"},
        {"sliding_window_size", "0"},
        {"dtype", std::string(dtype_name(dtype))},
    };
    if (block != "gemma") {
      kv["sliding_window_size"] = i(m["sliding_window"]);
      kv["query_pre_attn_scalar"] = n(m["query_pre_attn_scalar"]);
      if (m["attn_logit_softcapping"].is_number())
        kv["attn_logits_soft_cap"] = n(m["attn_logit_softcapping"]);
      if (m["final_logit_softcapping"].is_number())
        kv["final_logits_soft_cap"] = n(m["final_logit_softcapping"]);
    }
    if (block == "gemma3") {
      const auto& full = m["rope_parameters"]["full_attention"];
      EXPECT_EQ(full["rope_type"], "linear");
      kv["rope_max_timescale"] = i(full["rope_theta"]);
      kv["local_rope_max_timescale"] = i(m["rope_parameters"]["sliding_attention"]["rope_theta"]);
      kv["rope_linear_scaling_factor"] = n(full["factor"]);
    } else {
      kv["rope_max_timescale"] = i(m["rope_parameters"]["rope_theta"]);
    }
    std::vector<std::string> o;
    for (const auto& [key, value] : kv) o.push_back(key + "=" + value);
    return models::model_spec_from_config(
        load_config(tessera::source_dir().string() + "/configs/base.yml", o));
  }
};

using testing::hf_values;
using Name = testing::HfName;

std::vector<Name> gemma_names(const models::ModelSpec& s) {
  std::vector<Name> n = {{"token_embedder.embedding", "model.embed_tokens.weight"},
                         {"decoder.decoder_norm.scale", "model.norm.weight"}};
  const bool post = s.post_attention_norm;  // Gemma 2 and 3 name their four norms differently
  for (int64_t l = 0; l < s.num_decoder_layers; ++l) {
    const std::string t = "decoder.layers_" + std::to_string(l) + ".",
                      h = "model.layers." + std::to_string(l) + ".";
    n.push_back({t + "pre_self_attention_norm.scale", h + "input_layernorm.weight"});
    if (post) {
      n.push_back({t + "post_self_attention_norm.scale", h + "post_attention_layernorm.weight"});
      n.push_back({t + "pre_ffw_norm.scale", h + "pre_feedforward_layernorm.weight"});
      n.push_back({t + "post_ffw_norm.scale", h + "post_feedforward_layernorm.weight"});
    } else {
      n.push_back({t + "pre_ffw_norm.scale", h + "post_attention_layernorm.weight"});
    }
    const std::pair<const char*, const char*> attn[] = {
        {"query", "q_proj"}, {"key", "k_proj"}, {"value", "v_proj"}, {"out", "o_proj"}};
    for (auto [ours, theirs] : attn)
      n.push_back({t + "self_attention." + ours + ".kernel", h + "self_attn." + theirs + ".weight", true});
    if (s.qk_norm) {
      n.push_back({t + "self_attention.query_norm.scale", h + "self_attn.q_norm.weight"});
      n.push_back({t + "self_attention.key_norm.scale", h + "self_attn.k_norm.weight"});
    }
    n.push_back({t + "mlp.wi_0.kernel", h + "mlp.gate_proj.weight", true});
    n.push_back({t + "mlp.wi_1.kernel", h + "mlp.up_proj.weight", true});
    n.push_back({t + "mlp.wo.kernel", h + "mlp.down_proj.weight", true});
  }
  return n;
}

testing::GoldenPlan golden_plan(const Golden& g, DType dtype, const std::string& remat = "none") {
  models::ModelSpec spec = g.spec(dtype);
  const std::vector<Name> names = gemma_names(spec);
  std::vector<std::string> tessera_names;
  for (const Name& n : names) tessera_names.push_back(n.tessera);
  return testing::GoldenPlan(
      spec, g.file, tessera_names, [&](size_t p) { return hf_values(g.file, "param.", names[p]); }, remat);
}

class GemmaGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(GemmaGolden, TheConfigKeysGiveTheCheckpointsArchitecture) {
  Golden g(GetParam());
  const models::ModelSpec s = g.spec(DType::kF32);
  EXPECT_EQ(s.norm_offset, 1.0);
  EXPECT_EQ(s.embed_scale, std::sqrt(48.0));
  EXPECT_EQ(s.post_attention_norm, g.block != "gemma");
  EXPECT_EQ(s.qk_norm, g.block == "gemma3");
  EXPECT_EQ(s.final_logits_soft_cap > 0, g.block == "gemma2");
  const auto& types = g.meta["layer_types"];
  for (int64_t l = 0; l < s.num_decoder_layers; ++l) {
    const bool sliding = g.block != "gemma" && types[static_cast<size_t>(l)] == "sliding_attention";
    EXPECT_EQ(s.window_of(l) > 0, sliding) << l;
    EXPECT_EQ(s.local_rope(l), sliding && g.block == "gemma3") << l;
  }
}

TEST_P(GemmaGolden, Float32LogitsLossAndGradients) {
  Golden g(GetParam());
  testing::GoldenPlan m = golden_plan(g, DType::kF32);
  int64_t counted = 0;
  const double loss_sum = m.exec->forward_only(&counted);
  const std::vector<double> want = testing::to_vector(g.file.get("logits"));
  double largest = 1;
  for (double v : want) largest = std::max(largest, std::abs(v));
  EXPECT_TRUE(testing::all_close(m.values("decoder.logits"), want, 2e-5, 2e-6 * largest));
  EXPECT_NEAR(loss_sum / counted, g.file.get("loss").ptr<float>()[0], 2e-6);
  m.exec->zero_grads();
  m.exec->forward_backward();
  // atol scales with the tensor's largest gradient, as the logits' does: the tied embedding's
  // largest entry is 1.8 here, and entries of 0.0033 differed from transformers by 1.2e-6 (GCC
  // build) and 1.7e-6 (clang build), 0.6e-6 and 0.9e-6 of the largest: f32 rounding at the
  // tensor's scale, past a bare 1e-6.
  for (const Name& n : gemma_names(m.spec)) {
    SCOPED_TRACE(n.tessera);
    const std::vector<double> hf = hf_values(g.file, "grad.", n);
    double scale = 1;
    for (double v : hf) scale = std::max(scale, std::abs(v));
    EXPECT_TRUE(testing::all_close(testing::to_vector(m.grad_of(n.tessera)), hf, 1e-4, 1e-6 * scale));
  }
}

TEST_P(GemmaGolden, Bfloat16Forward) {
  Golden g(GetParam());
  testing::GoldenPlan m = golden_plan(g, DType::kBF16);
  int64_t counted = 0;
  const double loss_sum = m.exec->forward_only(&counted);
  EXPECT_TRUE(
      testing::all_close(m.values("decoder.logits"), testing::to_vector(g.file.get("bf16.logits")), 0, 0.1));
  EXPECT_NEAR(loss_sum / counted, g.file.get("bf16.loss").ptr<float>()[0], 1e-2);
}

// Recomputation reruns the same kernels on the same inputs (soft caps, post norms, QK-norm and
// the local RoPE table included): every gradient is bitwise the one of the run that saves
// everything, and remat full keeps fewer activations.
TEST_P(GemmaGolden, RematPoliciesGiveIdenticalGradients) {
  Golden g(GetParam());
  testing::GoldenPlan ref = golden_plan(g, DType::kF32);
  ref.exec->zero_grads();
  ref.exec->forward_backward();
  for (const std::string policy : {"full", "minimal", "save_dot_except_mlp", "save_out_proj"}) {
    SCOPED_TRACE(policy);
    testing::GoldenPlan m = golden_plan(g, DType::kF32, policy);
    m.exec->zero_grads();
    m.exec->forward_backward();
    for (const Name& n : gemma_names(m.spec)) {
      const Tensor &a = m.grad_of(n.tessera), &b = ref.grad_of(n.tessera);
      ASSERT_EQ(std::memcmp(a.data(), b.data(), a.nbytes()), 0) << n.tessera;
    }
    if (policy == "full") {
      EXPECT_LT(m.plan->memory().activations, ref.plan->memory().activations);
      EXPECT_GT(m.plan->flops().recompute, 0);
    }
  }
}

TEST_P(GemmaGolden, DecodingMatchesTheForwardAndGenerate) {
  Golden g(GetParam());
  testing::expect_decoding_matches(golden_plan(g, DType::kF32), g.file);
}

INSTANTIATE_TEST_SUITE_P(Blocks, GemmaGolden, ::testing::Values("gemma", "gemma2", "gemma3"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace tessera
