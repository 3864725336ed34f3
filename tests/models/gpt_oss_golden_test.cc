// Tessera's GPT-OSS family against Hugging Face transformers: a 2-layer GptOssForCausalLM (layer 0
// a sliding window of 4, layer 1 full) with GQA 4/2 heads of 10, hidden 40, 4 experts of 24, top-2,
// vocabulary 101, YaRN RoPE (theta 1.5e5, factor 4, beta 32/1, original context 256, not truncated,
// attention scaling), attention sinks, biases on q/k/v/o, router and experts, the clamped SwiGLU
// (limit 7), made by tools/make_moe_golden.py and committed beside this test (batch 2 x 13). The
// biases, sinks and experts' weights are moved off their initial values so that each matters, and
// 2-3 % of the routed gate/up entries are clamped (tests/models/golden/MOE_NOTES.md). The file holds
// transformers' logits, losses and gradients, the router logits (with the bias) and MaxText's
// load-balance loss (weight 0.01) from them.
//
// Tolerances: those of the Llama golden (llama_golden_test.cc explains them): float32 logits 2e-5
// rel / 2e-6 abs, loss 2e-6, gradients 1e-4 rel / 1e-6 abs; YaRN's inverse frequencies 1e-6 relative
// (transformers computes them in float32). bfloat16 logits 0.1 abs, looser than Llama's 0.06
// because transformers' GPT-OSS also runs the attention softmax (with the sink) in bfloat16 while
// Tessera's runs in float32 (seen: 0.0625 at logits of magnitude 2, four bf16 steps); tokens whose
// second and third router logits are within 0.02 are left out, as in mixtral_golden_test.cc; loss
// 1e-2.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "golden_util.h"
#include "tessera/config/config.h"
#include "tessera/core/safetensors.h"
#include "tessera/core/source_dir.h"
#include "tessera/graph/executor.h"
#include "tessera/models/decoder.h"
#include "tessera/models/init.h"
#include "testing/data_dir.h"
#include "testing/op_test_util.h"

namespace tessera {
namespace {

const std::string kDir = tessera::testing::data_dir().string() + "/golden/";

struct Golden {
  nlohmann::json meta;
  SafetensorsFile file;
  Golden() : file(kDir + "gpt_oss_tiny.safetensors") { std::ifstream(kDir + "gpt_oss_tiny.json") >> meta; }

  models::ModelSpec spec(DType dtype, const std::string& path, double lb_weight) const {
    const nlohmann::json& r = meta["rope_parameters"];
    std::vector<std::string> o = {
        "model_name=gpt-oss-tiny",
        "run_name=golden",
        "override_model_config=true",
        "load_balance_loss_weight=" + std::to_string(lb_weight),
        "sliding_window_size=" + std::to_string(meta["sliding_window"].get<int>()),
        "mlp_activations_limit=" + std::to_string(meta["swiglu_limit"].get<double>()),
        "rope_type=yarn",
        "rope_factor=" + std::to_string(r["factor"].get<double>()),
        "beta_fast=" + std::to_string(r["beta_fast"].get<double>()),
        "beta_slow=" + std::to_string(r["beta_slow"].get<double>()),
        "original_max_position_embeddings=" +
            std::to_string(r["original_max_position_embeddings"].get<int>()),
        std::string("rope_truncate=") + (r["truncate"].get<bool>() ? "true" : "false"),
        "rope_attention_scaling=true"};
    if (path == "dense") o.push_back("sparse_matmul=false");
    models::ModelSpec s =
        models::model_spec_from_config(load_config(tessera::source_dir().string() + "/configs/base.yml", o));
    EXPECT_EQ(meta["layer_types"], (nlohmann::json{"sliding_attention", "full_attention"}));
    s.emb_dim = meta["hidden_size"];
    s.num_query_heads = meta["num_attention_heads"];
    s.num_kv_heads = meta["num_key_value_heads"];
    s.head_dim = meta["head_dim"];
    s.moe_mlp_dim = meta["intermediate_size"];
    s.num_experts = meta["num_local_experts"];
    s.num_experts_per_tok = meta["num_experts_per_tok"];
    s.num_decoder_layers = meta["num_hidden_layers"];
    s.vocab_size = meta["vocab_size"];
    s.norm_eps = meta["rms_norm_eps"];
    s.rope_theta = r["rope_theta"];
    s.logits_via_embedding = meta["tie_word_embeddings"];
    s.batch = meta["batch"];
    s.seq = meta["seq"];
    s.dtype = dtype;
    return s;
  }
};

// How a Tessera parameter reads from Hugging Face's: a [out, in] Linear transposed, the even
// (gate) or odd (up) columns of the experts' interleaved gate_up_proj [X, E, 2F] and its bias
// [X, 2F], or the same layout.
enum class Layout { kSame, kTranspose, kEven, kOdd };
struct Name {
  std::string tessera, hf;
  Layout layout = Layout::kSame;
};

std::vector<Name> gpt_oss_names(const models::ModelSpec& s) {
  std::vector<Name> n = {{"token_embedder.embedding", "model.embed_tokens.weight"},
                         {"decoder.decoder_norm.scale", "model.norm.weight"},
                         {"decoder.logits_dense.kernel", "lm_head.weight", Layout::kTranspose}};
  for (int64_t l = 0; l < s.num_decoder_layers; ++l) {
    const std::string t = "decoder.layers_" + std::to_string(l) + ".",
                      h = "model.layers." + std::to_string(l) + ".";
    n.push_back({t + "pre_self_attention_layer_norm.scale", h + "input_layernorm.weight"});
    n.push_back({t + "post_self_attention_layer_norm.scale", h + "post_attention_layernorm.weight"});
    const std::pair<const char*, const char*> attn[] = {
        {"query", "q_proj"}, {"key", "k_proj"}, {"value", "v_proj"}, {"out", "o_proj"}};
    for (auto [ours, theirs] : attn) {
      n.push_back({t + "GptOssAttention." + ours + ".kernel", h + "self_attn." + theirs + ".weight",
                   Layout::kTranspose});
      n.push_back({t + "GptOssAttention." + ours + ".bias", h + "self_attn." + theirs + ".bias"});
    }
    n.push_back({t + "GptOssAttention.sinks", h + "self_attn.sinks"});
    n.push_back({t + "GptOssMlp.gate.kernel", h + "mlp.router.weight", Layout::kTranspose});
    n.push_back({t + "GptOssMlp.gate.bias", h + "mlp.router.bias"});
    n.push_back({t + "GptOssMlp.wi_0", h + "mlp.experts.gate_up_proj", Layout::kEven});
    n.push_back({t + "GptOssMlp.wi_1", h + "mlp.experts.gate_up_proj", Layout::kOdd});
    n.push_back({t + "GptOssMlp.wo", h + "mlp.experts.down_proj"});
    n.push_back({t + "GptOssMlp.wi_0_bias", h + "mlp.experts.gate_up_proj_bias", Layout::kEven});
    n.push_back({t + "GptOssMlp.wi_1_bias", h + "mlp.experts.gate_up_proj_bias", Layout::kOdd});
    n.push_back({t + "GptOssMlp.wo_bias", h + "mlp.experts.down_proj_bias"});
  }
  return n;
}

std::vector<std::string> tessera_names(const std::vector<Name>& names) {
  std::vector<std::string> out;
  for (const Name& n : names) out.push_back(n.tessera);
  return out;
}

std::vector<double> hf_values(const SafetensorsFile& f, const std::string& prefix, const Name& n) {
  const Tensor t = f.get(prefix + n.hf);
  const std::vector<double> v = testing::to_vector(t);
  if (n.layout == Layout::kSame) return v;
  if (n.layout == Layout::kTranspose) {
    return testing::transposed(v, t.dim(0), t.dim(1));
  }
  // Every other column of the last dimension: even for the gate, odd for up.
  const int64_t cols = t.dim(-1), rows = t.numel() / cols, off = n.layout == Layout::kOdd ? 1 : 0;
  std::vector<double> out(static_cast<size_t>(rows * cols / 2));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols / 2; ++c) out[r * (cols / 2) + c] = v[r * cols + 2 * c + off];
  return out;
}

// The golden model of `path` ("dropless", "dense") with the load-balance weight.
struct Model : testing::GoldenPlan {
  Model(const Golden& g, DType dtype, const std::string& path = "dropless", double lb_weight = 0.01)
      : Model(g, g.spec(dtype, path, lb_weight)) {}
  Model(const Golden& g, models::ModelSpec s)
      : GoldenPlan(s, g.file, tessera_names(gpt_oss_names(s)), [&g, names = gpt_oss_names(s)](size_t i) {
          return hf_values(g.file, "param.", names[i]);
        }) {}
};

TEST(GptOssGolden, YarnFrequenciesAndAttentionScaling) {
  Golden g;
  const models::ModelSpec s = g.spec(DType::kF32, "dropless", 0.01);
  const ops::RopeTable table(models::rope_config(s, 16));
  const std::vector<double> want = testing::to_vector(g.file.get("rope.inv_freq"));
  for (int64_t i = 0; i < s.head_dim / 2; ++i)
    EXPECT_NEAR(table.inv_freq(i), want[i], 1e-6 * want[i]) << i;  // transformers computes in f32
  EXPECT_NEAR(s.yarn.attention_factor(), g.meta["rope_attention_scaling"].get<double>(), 1e-12);
  EXPECT_EQ(s.window_of(0), 4);
  EXPECT_EQ(s.window_of(1), 0);
}

TEST(GptOssGolden, Float32LogitsRouterAndLoss) {
  Golden g;
  Model m(g, DType::kF32);
  int64_t counted = 0;
  const double loss_sum = m.exec->forward_only(&counted);
  EXPECT_TRUE(
      testing::all_close(m.values("decoder.logits"), testing::to_vector(g.file.get("logits")), 2e-5, 2e-6));
  EXPECT_NEAR(loss_sum / counted, g.file.get("loss").ptr<float>()[0], 2e-6);
  for (int l = 0; l < 2; ++l) {
    SCOPED_TRACE(l);
    EXPECT_TRUE(testing::all_close(m.values("decoder.layers_" + std::to_string(l) + ".GptOssMlp.gate_biased"),
                                   testing::to_vector(g.file.get("router_logits." + std::to_string(l))), 2e-5,
                                   2e-6));
  }
  EXPECT_NEAR(m.lb_loss(), g.file.get("lb_loss").ptr<float>()[0], 1e-6);
}

class GptOssGradients : public ::testing::TestWithParam<const char*> {};

TEST_P(GptOssGradients, Float32MatchTransformers) {
  Golden g;
  const std::string path = GetParam();
  const bool ce_only = path == "ce_only";
  Model m(g, DType::kF32, ce_only ? "dropless" : path, ce_only ? 0.0 : 0.01);
  m.exec->zero_grads();
  const double loss_sum = m.exec->forward_backward();
  EXPECT_NEAR(loss_sum / 26.0, g.file.get("loss").ptr<float>()[0], 2e-6);
  for (const Name& n : gpt_oss_names(m.spec)) {
    SCOPED_TRACE(n.tessera);
    const Tensor& grad = m.grad_of(n.tessera);
    EXPECT_TRUE(testing::all_close(testing::to_vector(grad),
                                   hf_values(g.file, ce_only ? "grad_ce." : "grad.", n), 1e-4, 1e-6));
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, GptOssGradients, ::testing::Values("dropless", "dense", "ce_only"),
                         [](const auto& info) { return std::string(info.param); });

// Decoding (the graph engine, KV cache across the sliding and full layers): every step's logits are
// transformers' forward logits at that position (same tolerance as the forward above), and greedy
// generation gives generate(do_sample=False)'s tokens.
TEST(GptOssGolden, DecodingMatchesTheForwardAndGenerate) {
  Golden g;
  Model m(g, DType::kF32);
  testing::expect_decoding_matches(m, g.file);
}

TEST(GptOssGolden, Bfloat16Forward) {
  Golden g;
  Model m(g, DType::kBF16);
  int64_t counted = 0;
  const double loss_sum = m.exec->forward_only(&counted);
  const int64_t N = m.spec.batch * m.spec.seq;
  std::vector<double> got_kept, want_kept;
  const int64_t kept = testing::logits_of_clear_routing(
      g.file, m.spec.num_decoder_layers, m.spec.num_experts_per_tok, 0.02, m.values("decoder.logits"),
      testing::to_vector(g.file.get("bf16.logits")), m.spec.vocab_size, got_kept, want_kept);
  EXPECT_GE(kept, N - 3);
  EXPECT_TRUE(testing::all_close(got_kept, want_kept, 0, 0.1));
  EXPECT_NEAR(loss_sum / counted, g.file.get("bf16.loss").ptr<float>()[0], 1e-2);
}

}  // namespace
}  // namespace tessera
