// Tessera's Llama against Hugging Face transformers: the golden file is made by
// tools/make_llama_golden.py (a 2-layer LlamaForCausalLM with GQA 4/2, head_dim 10, hidden 36,
// mlp 70, vocab 101, rope_theta 500, untied; batch 2 x 13 tokens) and committed beside this test.
//
// Tolerances (float32): logits and loss agree to ~1e-6 relative in practice; the bound 2e-5 rel /
// 2e-6 abs allows for the different summation orders of oneDNN and PyTorch over reductions of
// length <= 101 and RoPE tables computed in double (Tessera) vs float32 (Hugging Face).
// Gradients are sums over all 26 tokens of products of those values: 1e-4 rel / 1e-6 abs.
// After 3 AdamW steps (lr 1e-2) parameters move by ~3e-2, and the update m/sqrt(v) amplifies
// gradient differences where v is tiny: 1e-4 abs.
// bfloat16: activations are rounded to 8 significant bits at every op boundary in both
// implementations, in different places; logits agree to a few bf16 ulps of their magnitude
// (|logit| < 3): 0.06 abs, and the loss to 1e-2.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "golden_util.h"
#include "tessera/convert/hf_tensors.h"
#include "tessera/core/safetensors.h"
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
  SafetensorsFile file{kDir + "llama_tiny.safetensors"};
  Golden() { std::ifstream(kDir + "llama_tiny.json") >> meta; }

  models::ModelSpec spec(DType dtype) const {
    models::ModelSpec s;
    s.emb_dim = meta["hidden_size"];
    s.num_query_heads = meta["num_attention_heads"];
    s.num_kv_heads = meta["num_key_value_heads"];
    s.head_dim = meta["head_dim"];
    s.mlp_dim = meta["intermediate_size"];
    s.num_decoder_layers = meta["num_hidden_layers"];
    s.vocab_size = meta["vocab_size"];
    s.norm_eps = meta["rms_norm_eps"];
    s.rope_theta = meta.contains("rope_theta") ? meta["rope_theta"].get<double>()
                                               : meta["rope_parameters"]["rope_theta"].get<double>();
    s.batch = meta["batch"];
    s.seq = meta["seq"];
    s.dtype = dtype;
    return s;
  }
};

// A built model with its executor, loaded with the golden's initial weights.
struct Model {
  models::ModelSpec spec;
  std::unique_ptr<graph::Plan> plan;
  std::unique_ptr<graph::Executor> exec;
  models::DecoderInputs in;

  Model(const Golden& g, DType dtype, const std::string& remat = "none", bool fuse_gradient_sums = true)
      : spec(g.spec(dtype)) {
    graph::Graph gr;
    in = models::build_decoder(gr, spec);
    plan = std::make_unique<graph::Plan>(
        std::move(gr), graph::PlanOptions{.remat_policy = remat, .fuse_gradient_sums = fuse_gradient_sums});
    ops::RopeConfig rc{
        .max_timescale = spec.rope_theta, .head_dim = spec.head_dim, .max_positions = spec.seq};
    exec = std::make_unique<graph::Executor>(*plan, std::make_unique<ops::RopeTable>(rc));
    convert::load_hf_parameters(*plan, spec, g.file, "param.");
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

// A Tessera [in, out] tensor as Hugging Face's [out, in] when `transpose`.
std::vector<double> hf_layout(const Tensor& t, bool transpose) {
  std::vector<double> v = testing::to_vector(t);
  if (!transpose) return v;
  return testing::transposed(v, t.dim(0), t.dim(1));
}

TEST(LlamaGolden, Float32LogitsLossAndGradients) {
  Golden g;
  Model m(g, DType::kF32);
  int64_t counted = 0;
  double loss_sum = m.exec->forward_only(&counted);
  EXPECT_TRUE(testing::all_close(m.logits(), testing::to_vector(g.file.get("logits")), 2e-5, 2e-6));
  EXPECT_NEAR(loss_sum / counted, g.file.get("loss").ptr<float>()[0], 2e-6);

  m.exec->zero_grads();
  m.exec->forward_backward();
  for (const auto& n : convert::hf_names(m.spec)) {
    SCOPED_TRACE(n.hf);
    const Tensor& grad = m.plan->view(m.plan->graph().value(m.find(n.tessera)).grad);
    EXPECT_TRUE(testing::all_close(hf_layout(grad, n.transpose),
                                   testing::to_vector(g.file.get("grad." + n.hf)), 1e-4, 1e-6));
  }
}

TEST(LlamaGolden, Float32ThreeAdamWSteps) {
  Golden g;
  Model m(g, DType::kF32);
  graph::OptimizerStep step;
  step.adamw = {.lr = g.meta["lr"],
                .b1 = g.meta["adam_b1"],
                .b2 = g.meta["adam_b2"],
                .eps = g.meta["adam_eps"],
                .weight_decay = g.meta["adam_weight_decay"]};
  for (int k = 1; k <= 3; ++k) {
    m.exec->zero_grads();
    double loss = m.exec->forward_backward() / static_cast<double>(m.spec.batch * m.spec.seq);
    EXPECT_NEAR(loss, g.file.get("step" + std::to_string(k) + ".loss").ptr<float>()[0], 1e-5) << "step " << k;
    step.adamw.step = k;
    m.exec->apply_optimizer(step);
  }
  for (const auto& n : convert::hf_names(m.spec)) {
    SCOPED_TRACE(n.hf);
    EXPECT_TRUE(testing::all_close(hf_layout(m.plan->view(m.find(n.tessera)), n.transpose),
                                   testing::to_vector(g.file.get("step3." + n.hf)), 0, 1e-4));
  }
}

TEST(LlamaGolden, Bfloat16Forward) {
  Golden g;
  Model m(g, DType::kBF16);
  int64_t counted = 0;
  double loss_sum = m.exec->forward_only(&counted);
  EXPECT_TRUE(testing::all_close(m.logits(), testing::to_vector(g.file.get("bf16.logits")), 0, 0.06));
  EXPECT_NEAR(loss_sum / counted, g.file.get("bf16.loss").ptr<float>()[0], 1e-2);
}

// Every remat policy recomputes with the same kernels on the same inputs, so gradients are
// bitwise those of remat_policy=none; `full` must need less activation memory than `none`.
TEST(LlamaGolden, RematPoliciesGiveIdenticalGradients) {
  Golden g;
  Model ref(g, DType::kF32, "none");
  ref.exec->zero_grads();
  ref.exec->forward_backward();
  for (const std::string policy : {"full", "minimal", "save_dot_except_mlp", "save_qkv_proj"}) {
    SCOPED_TRACE(policy);
    Model m(g, DType::kF32, policy);
    m.exec->zero_grads();
    m.exec->forward_backward();
    for (const auto& n : convert::hf_names(m.spec)) {
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

// A layer's q, k and v projections read one normed input, as do gate and up: their dx products
// accumulate into the gradient collected so far (fuse_gradient_sums) instead of add nodes summing
// them, and so do the norms' backward into the residual stream's gradient. In f32 each sum is the
// same operation (the f32 gradient plus the f32 sum so far), so the gradients are bitwise those of
// the add nodes; in bf16 the sum is rounded once instead of twice.
TEST(LlamaGolden, GradientSumsInTheProductsGiveTheSameGradients) {
  Golden g;
  for (const DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    Model fused(g, dtype), adds(g, dtype, "none", false);
    const auto count = [](const graph::Graph& gr, graph::OpKind op, bool accumulating) {
      int n = 0;
      for (const graph::Node& node : gr.nodes())
        if (node.phase == graph::Phase::kBackward && node.op == op &&
            (op == graph::OpKind::kAdd ||
             accumulating == (op == graph::OpKind::kMatmul ? node.in.size() == 3
                                                           : node.attr<graph::NormAttrs>().accumulate)))
          ++n;
      return n;
    };
    const int layers = static_cast<int>(fused.spec.num_decoder_layers);
    using graph::OpKind;
    // k and v into q's dx, up into gate's; each layer's two norms into the residual stream's.
    EXPECT_EQ(count(fused.plan->graph(), OpKind::kMatmul, true), 3 * layers);
    EXPECT_EQ(count(fused.plan->graph(), OpKind::kRmsNormBwd, true), 2 * layers);
    EXPECT_EQ(count(fused.plan->graph(), OpKind::kRmsNormBwd, false), 1);  // the final norm's
    EXPECT_EQ(count(fused.plan->graph(), OpKind::kAdd, false), 0);
    EXPECT_EQ(count(adds.plan->graph(), OpKind::kMatmul, true), 0);
    EXPECT_EQ(count(adds.plan->graph(), OpKind::kAdd, false), 5 * layers);
    for (Model* m : {&fused, &adds}) {
      m->exec->zero_grads();
      m->exec->forward_backward();
    }
    for (const auto& n : convert::hf_names(fused.spec)) {
      SCOPED_TRACE(n.tessera);
      const Tensor& a = fused.plan->view(fused.plan->graph().value(fused.find(n.tessera)).grad);
      const Tensor& b = adds.plan->view(adds.plan->graph().value(adds.find(n.tessera)).grad);
      if (dtype == DType::kF32)
        EXPECT_EQ(std::memcmp(a.data(), b.data(), a.nbytes()), 0);
      else
        EXPECT_TRUE(testing::all_close(testing::to_vector(a), testing::to_vector(b), 0.05, 1e-3));
    }
  }
}

}  // namespace
}  // namespace tessera
