// Tessera's Qwen family against Hugging Face transformers: Qwen 2.5 (qwen2: q/k/v biases, tied
// embeddings) and Qwen 3 (qwen3: QK-norm, untied), each a 2-layer model with GQA 4/2, head_dim 10,
// hidden 40, MLP 70, vocabulary 101, rope_theta 1e6 made by tools/make_qwen_golden.py and
// committed beside this test (batch 2 x 13 tokens).
//
// Tolerances: those of the Llama golden (llama_golden_test.cc explains them), whose reductions
// these models share: float32 logits 2e-5 rel / 2e-6 abs, loss 2e-6, every gradient 1e-4 rel /
// 1e-6 abs; bfloat16 logits 0.06 abs, loss 1e-2.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
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
  std::string block;
  nlohmann::json meta;
  SafetensorsFile file;
  explicit Golden(const std::string& b) : block(b), file(kDir + b + "_tiny.safetensors") {
    std::ifstream(kDir + b + "_tiny.json") >> meta;
  }

  models::ModelSpec spec(DType dtype) const {
    const std::vector<std::string> o = {"model_name=llama-test", "run_name=golden",
                                        "override_model_config=true", "decoder_block=" + block};
    models::ModelSpec s =
        models::model_spec_from_config(load_config(tessera::source_dir().string() + "/configs/base.yml", o));
    s.emb_dim = meta["hidden_size"];
    s.num_query_heads = meta["num_attention_heads"];
    s.num_kv_heads = meta["num_key_value_heads"];
    const bool has_head_dim =
        meta.contains("head_dim") && !meta.at("head_dim").is_null();  // Qwen 2 derives it
    s.head_dim = has_head_dim ? meta.at("head_dim").get<int64_t>() : s.emb_dim / s.num_query_heads;
    s.mlp_dim = meta["intermediate_size"];
    s.num_decoder_layers = meta["num_hidden_layers"];
    s.vocab_size = meta["vocab_size"];
    s.norm_eps = meta["rms_norm_eps"];
    s.rope_theta = meta["rope_parameters"]["rope_theta"];
    s.logits_via_embedding = meta["tie_word_embeddings"];
    s.batch = meta["batch"];
    s.seq = meta["seq"];
    s.dtype = dtype;
    return s;
  }
};

using testing::hf_values;
using Name = testing::HfName;

std::vector<Name> qwen_names(const models::ModelSpec& s) {
  std::vector<Name> n = {{"token_embedder.embedding", "model.embed_tokens.weight"},
                         {"decoder.decoder_norm.scale", "model.norm.weight"}};
  if (!s.logits_via_embedding) n.push_back({"decoder.logits_dense.kernel", "lm_head.weight", true});
  for (int64_t l = 0; l < s.num_decoder_layers; ++l) {
    const std::string t = "decoder.layers_" + std::to_string(l) + ".",
                      h = "model.layers." + std::to_string(l) + ".";
    n.push_back({t + "pre_self_attention_layer_norm.scale", h + "input_layernorm.weight"});
    n.push_back({t + "post_self_attention_layer_norm.scale", h + "post_attention_layernorm.weight"});
    const std::pair<const char*, const char*> attn[] = {
        {"query", "q_proj"}, {"key", "k_proj"}, {"value", "v_proj"}, {"out", "o_proj"}};
    for (auto [ours, theirs] : attn) {
      n.push_back({t + "self_attention." + ours + ".kernel", h + "self_attn." + theirs + ".weight", true});
      if (s.attention_bias && std::string(ours) != "out")
        n.push_back({t + "self_attention." + ours + ".bias", h + "self_attn." + theirs + ".bias"});
    }
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

struct Model {
  models::ModelSpec spec;
  std::unique_ptr<graph::Plan> plan;
  std::unique_ptr<graph::Executor> exec;
  models::DecoderInputs in;

  Model(const Golden& g, DType dtype) : spec(g.spec(dtype)) {
    graph::Graph gr;
    in = models::build_decoder(gr, spec);
    plan = std::make_unique<graph::Plan>(std::move(gr), graph::PlanOptions{.remat_policy = "none"});
    ops::RopeConfig rc{
        .max_timescale = spec.rope_theta, .head_dim = spec.head_dim, .max_positions = spec.seq};
    exec = std::make_unique<graph::Executor>(*plan, std::make_unique<ops::RopeTable>(rc));
    const std::vector<Name> names = qwen_names(spec);
    EXPECT_EQ(names.size(), plan->graph().params().size());
    for (const Name& n : names) {
      const std::vector<double> v = hf_values(g.file, "param.", n);
      const Tensor& dst = plan->state(find(n.tessera));
      EXPECT_EQ(dst.numel(), static_cast<int64_t>(v.size())) << n.tessera;
      for (int64_t i = 0; i < dst.numel(); ++i) dst.ptr<float>()[i] = static_cast<float>(v[i]);
    }
    models::sync_compute_copies(*plan);
    testing::feed_golden_batch(*plan, in, spec, g.file);
  }

  graph::ValueId find(const std::string& name) const {
    const auto& v = plan->graph().values();
    for (size_t i = 0; i < v.size(); ++i)
      if (v[i].name == name) return static_cast<graph::ValueId>(i);
    ADD_FAILURE() << "no value " << name;
    return 0;
  }
  std::vector<double> logits() { return testing::to_vector(plan->view(find("decoder.logits"))); }
};

class QwenGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(QwenGolden, Float32LogitsLossAndGradients) {
  Golden g(GetParam());
  Model m(g, DType::kF32);
  EXPECT_EQ(m.spec.attention_bias, g.block == "qwen2");
  EXPECT_EQ(m.spec.qk_norm, g.block == "qwen3");
  int64_t counted = 0;
  const double loss_sum = m.exec->forward_only(&counted);
  EXPECT_TRUE(testing::all_close(m.logits(), testing::to_vector(g.file.get("logits")), 2e-5, 2e-6));
  EXPECT_NEAR(loss_sum / counted, g.file.get("loss").ptr<float>()[0], 2e-6);
  m.exec->zero_grads();
  m.exec->forward_backward();
  for (const Name& n : qwen_names(m.spec)) {
    SCOPED_TRACE(n.tessera);
    const Tensor& grad = m.plan->view(m.plan->graph().value(m.find(n.tessera)).grad);
    EXPECT_TRUE(testing::all_close(testing::to_vector(grad), hf_values(g.file, "grad.", n), 1e-4, 1e-6));
  }
}

TEST_P(QwenGolden, Bfloat16Forward) {
  Golden g(GetParam());
  Model m(g, DType::kBF16);
  int64_t counted = 0;
  const double loss_sum = m.exec->forward_only(&counted);
  EXPECT_TRUE(testing::all_close(m.logits(), testing::to_vector(g.file.get("bf16.logits")), 0, 0.06));
  EXPECT_NEAR(loss_sum / counted, g.file.get("bf16.loss").ptr<float>()[0], 1e-2);
}

INSTANTIATE_TEST_SUITE_P(Blocks, QwenGolden, ::testing::Values("qwen2", "qwen3"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace tessera
