// Hugging Face table of Mixtral (MixtralForCausalLM), hf_family.h: Mistral's attention and norms,
// and per layer a router (block_sparse_moe.gate) and X SwiGLU experts stored one Linear per expert
// and projection, as the Hub's checkpoints (and transformers' save_pretrained) have them: w1 the
// gate, w3 the up and w2 the down projection, each [out, in]. Tessera stacks each projection's
// experts into one [X, in, out] parameter (MaxText's MoeBlock_0.wi_0, wi_1, wo).
#include "tessera/convert/hf_family.h"

namespace tessera::convert {

namespace {

std::vector<HfTensorRule> mixtral_tensors() {
  std::vector<HfTensorRule> t = hf_llama_attention_tensors();
  const std::vector<HfTensorRule> moe = {
      {"decoder.layers_{l}.MoeBlock_0.gate.kernel", "model.layers.{l}.block_sparse_moe.gate.weight", true},
      {"decoder.layers_{l}.MoeBlock_0.wi_0", "model.layers.{l}.block_sparse_moe.experts.{e}.w1.weight", true},
      {"decoder.layers_{l}.MoeBlock_0.wi_1", "model.layers.{l}.block_sparse_moe.experts.{e}.w3.weight", true},
      {"decoder.layers_{l}.MoeBlock_0.wo", "model.layers.{l}.block_sparse_moe.experts.{e}.w2.weight", true},
  };
  t.insert(t.end(), moe.begin(), moe.end());
  return hf_decoder_tensors(t);
}

std::vector<HfField> mixtral_fields() {
  std::vector<HfField> f = hf_llama_fields("8", "1e-05");
  for (HfField& field : f)
    if (field.hf == "intermediate_size") field.tessera = "base_moe_mlp_dim";
  f.push_back({"num_local_experts", "num_experts", HfValue::kCount, "8"});
  f.push_back({"num_experts_per_tok", "num_experts_per_tok", HfValue::kCount, "2"});
  return f;
}

std::vector<HfFixed> mixtral_fixed() {
  std::vector<HfFixed> f = hf_swiglu_fixed();
  f.push_back({"router_jitter_noise", "0.0", "not supported: Tessera's router adds no noise"});
  return f;
}

}  // namespace

const HfFamily kHfMixtral{
    .model_type = "mixtral",
    .architecture = "MixtralForCausalLM",
    .blocks = {"mixtral"},
    .fields = mixtral_fields(),
    .fixed = mixtral_fixed(),
    .keys = {{"decoder_block", "mixtral"}, {"mlp_activations", "[\"silu\", \"linear\"]"}},
    // The auxiliary loss is a training setting (Tessera's is load_balance_loss_weight, MaxText's
    // formula, not transformers').
    .harmless = "output_router_logits router_aux_loss_coef",
    .default_rope_theta = 1e6,
    .window = HfWindow::kOptional,
    .default_window = 0,
    .tensors = mixtral_tensors(),
};

}  // namespace tessera::convert
