// Tessera's gpt3 block (the GPT-2 architecture) against Hugging Face transformers' GPT2LMHeadModel:
// the golden file is made by tools/make_gpt2_golden.py (2 layers, 4 heads of 10, width 40, MLP 88,
// vocabulary 97, 32 learned positions, tied embeddings, tanh GELU, LayerNorm and projection biases
// moved off their initial values; batch 2 x 13 tokens) and committed beside this test.
//
// Tolerances (float32): the same as the Llama golden's, which this architecture's reductions
// (lengths <= 97) share: logits 2e-5 rel / 2e-6 abs, the loss 2e-6, every gradient 1e-4 rel /
// 1e-6 abs (sums over 26 tokens). bfloat16: 0.06 abs on the logits (|logit| < 3), 1e-2 on the loss.
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
  nlohmann::json meta;
  SafetensorsFile file{kDir + "gpt2_tiny.safetensors"};
  Golden() { std::ifstream(kDir + "gpt2_tiny.json") >> meta; }

  models::ModelSpec spec(DType dtype) const {
    const std::vector<std::string> overrides = {"model_name=gpt2-124m", "run_name=golden"};
    Config cfg = load_config(tessera::source_dir().string() + "/configs/base.yml", overrides);
    cfg.decoder_block = "gpt3";
    cfg.trainable_position_size = meta["n_positions"];
    models::ModelSpec s = models::model_spec_from_config(cfg);  // the family's block options
    s.emb_dim = meta["n_embd"];
    s.num_query_heads = s.num_kv_heads = meta["n_head"];
    s.head_dim = s.emb_dim / s.num_query_heads;
    s.mlp_dim = meta["n_inner"];
    s.num_decoder_layers = meta["n_layer"];
    s.vocab_size = meta["vocab_size"];
    s.norm_eps = meta["layer_norm_epsilon"];
    s.logits_via_embedding = true;
    s.batch = meta["batch"];
    s.seq = meta["seq"];
    s.dtype = dtype;
    return s;
  }
};

// One Tessera parameter and where it comes from in the Hugging Face checkpoint: GPT-2's Conv1D
// weights are already [in, out]; c_attn's q, k and v are its column blocks 0, 1, 2 of E.
struct Name {
  std::string tessera, hf;
  int block = -1;  // c_attn: which third of the columns (of a [E, 3E] weight or a [3E] bias)
};

std::vector<Name> gpt2_names(int64_t layers) {
  std::vector<Name> n = {{"token_embedder.embedding", "transformer.wte.weight"},
                         {"decoder.position_embedder.embedding", "transformer.wpe.weight"},
                         {"decoder.decoder_norm.scale", "transformer.ln_f.weight"},
                         {"decoder.decoder_norm.bias", "transformer.ln_f.bias"}};
  for (int64_t l = 0; l < layers; ++l) {
    const std::string t = "decoder.layers_" + std::to_string(l) + ".",
                      h = "transformer.h." + std::to_string(l) + ".";
    for (const char* part : {"scale", "bias"}) {
      const std::string hf_part = std::string(part) == "scale" ? "weight" : "bias";
      n.push_back({t + "pre_self_attention_norm." + part, h + "ln_1." + hf_part});
      n.push_back({t + "mlp_norm." + part, h + "ln_2." + hf_part});
    }
    for (const char* kind : {"kernel", "bias"}) {
      const std::string hf_kind = std::string(kind) == "kernel" ? "weight" : "bias";
      const char* qkv[] = {"query", "key", "value"};
      for (int b = 0; b < 3; ++b)
        n.push_back({t + "self_attention." + qkv[b] + "." + kind, h + "attn.c_attn." + hf_kind, b});
      n.push_back({t + "self_attention.out." + kind, h + "attn.c_proj." + hf_kind});
      n.push_back({t + "mlp.wi." + kind, h + "mlp.c_fc." + hf_kind});
      n.push_back({t + "mlp.wo." + kind, h + "mlp.c_proj." + hf_kind});
    }
  }
  return n;
}

// The Hugging Face values of `n` in Tessera's layout (the column block of c_attn, when it is one).
std::vector<double> hf_values(const SafetensorsFile& f, const std::string& prefix, const Name& n) {
  const Tensor t = f.get(prefix + n.hf);
  std::vector<double> v = testing::to_vector(t);
  if (n.block < 0) return v;
  const int64_t rows = t.shape().rank() == 2 ? t.dim(0) : 1,
                cols = t.shape().rank() == 2 ? t.dim(1) : t.dim(0);
  const int64_t w = cols / 3;
  std::vector<double> out;
  for (int64_t r = 0; r < rows; ++r)
    out.insert(out.end(), v.begin() + r * cols + n.block * w, v.begin() + r * cols + (n.block + 1) * w);
  return out;
}

struct Model {
  models::ModelSpec spec;
  std::unique_ptr<graph::Plan> plan;
  std::unique_ptr<graph::Executor> exec;
  models::DecoderInputs in;

  Model(const Golden& g, DType dtype, const std::string& remat = "none") : spec(g.spec(dtype)) {
    graph::Graph gr;
    in = models::build_decoder(gr, spec);
    plan = std::make_unique<graph::Plan>(std::move(gr), graph::PlanOptions{.remat_policy = remat});
    exec = std::make_unique<graph::Executor>(*plan, nullptr);  // learned positions: no RoPE table
    const std::vector<Name> names = gpt2_names(spec.num_decoder_layers);
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

TEST(Gpt2Golden, Float32LogitsLossAndGradients) {
  Golden g;
  Model m(g, DType::kF32);
  int64_t counted = 0;
  const double loss_sum = m.exec->forward_only(&counted);
  EXPECT_TRUE(testing::all_close(m.logits(), testing::to_vector(g.file.get("logits")), 2e-5, 2e-6));
  EXPECT_NEAR(loss_sum / counted, g.file.get("loss").ptr<float>()[0], 2e-6);

  m.exec->zero_grads();
  m.exec->forward_backward();
  for (const Name& n : gpt2_names(m.spec.num_decoder_layers)) {
    SCOPED_TRACE(n.tessera);
    const Tensor& grad = m.plan->view(m.plan->graph().value(m.find(n.tessera)).grad);
    EXPECT_TRUE(testing::all_close(testing::to_vector(grad), hf_values(g.file, "grad.", n), 1e-4, 1e-6));
  }
}

TEST(Gpt2Golden, Bfloat16Forward) {
  Golden g;
  Model m(g, DType::kBF16);
  int64_t counted = 0;
  const double loss_sum = m.exec->forward_only(&counted);
  EXPECT_TRUE(testing::all_close(m.logits(), testing::to_vector(g.file.get("bf16.logits")), 0, 0.06));
  EXPECT_NEAR(loss_sum / counted, g.file.get("bf16.loss").ptr<float>()[0], 1e-2);
}

// Recomputation reruns the same kernels on the same inputs: every gradient is bitwise the one of
// the run that saves everything.
TEST(Gpt2Golden, RematPoliciesGiveIdenticalGradients) {
  Golden g;
  Model ref(g, DType::kF32, "none");
  ref.exec->zero_grads();
  ref.exec->forward_backward();
  for (const std::string policy : {"full", "minimal", "save_dot_except_mlp", "save_out_proj"}) {
    SCOPED_TRACE(policy);
    Model m(g, DType::kF32, policy);
    m.exec->zero_grads();
    m.exec->forward_backward();
    for (const Name& n : gpt2_names(m.spec.num_decoder_layers)) {
      const Tensor& a = m.plan->view(m.plan->graph().value(m.find(n.tessera)).grad);
      const Tensor& b = ref.plan->view(ref.plan->graph().value(ref.find(n.tessera)).grad);
      ASSERT_EQ(std::memcmp(a.data(), b.data(), a.nbytes()), 0) << n.tessera;
    }
    if (policy == "full") {
      EXPECT_LT(m.plan->memory().activations, ref.plan->memory().activations);
      EXPECT_GT(m.plan->flops().recompute, 0);
    }
  }
}

}  // namespace
}  // namespace tessera
