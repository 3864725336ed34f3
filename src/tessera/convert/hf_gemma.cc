// Hugging Face tables of the Gemma family (hf_family.h), text only: GemmaForCausalLM (Gemma 1),
// Gemma2ForCausalLM and Gemma3ForCausalLM (model_type gemma3_text: Gemma 3 1B, and the language
// model of the larger ones when saved alone). Tessera's gemma, gemma2 and gemma3 blocks
// (models/gemma.cc). The tensors are Llama's but for the norms' names:
//   Gemma 1    input_layernorm -> pre_self_attention_norm, post_attention_layernorm -> pre_ffw_norm
//   Gemma 2/3  input_layernorm -> pre_self_attention_norm,
//              post_attention_layernorm -> post_self_attention_norm,
//              pre_feedforward_layernorm -> pre_ffw_norm, post_feedforward_layernorm -> post_ffw_norm
//   Gemma 3    self_attn.q_norm / k_norm -> self_attention.query_norm / key_norm
// Every norm weight is copied as it is: both sides scale by 1 + w. The embedding is always tied.
// Gemma 2 alternates sliding and full layers, Gemma 3 has five sliding layers to one full and RoPE
// per layer type (hf_config.h). Gemma3ForConditionalGeneration (model_type gemma3, with a vision
// tower) is not converted.
#include "tessera/convert/hf_family.h"

namespace tessera::convert {

namespace {

std::vector<HfTensorRule> gemma_tensors(bool post_norms) {
  std::vector<HfTensorRule> t = {
      {"decoder.layers_{l}.self_attention.query.kernel", "model.layers.{l}.self_attn.q_proj.weight", true},
      {"decoder.layers_{l}.self_attention.key.kernel", "model.layers.{l}.self_attn.k_proj.weight", true},
      {"decoder.layers_{l}.self_attention.value.kernel", "model.layers.{l}.self_attn.v_proj.weight", true},
      {"decoder.layers_{l}.self_attention.out.kernel", "model.layers.{l}.self_attn.o_proj.weight", true},
      {"decoder.layers_{l}.self_attention.query_norm.scale", "model.layers.{l}.self_attn.q_norm.weight"},
      {"decoder.layers_{l}.self_attention.key_norm.scale", "model.layers.{l}.self_attn.k_norm.weight"},
      {"decoder.layers_{l}.pre_self_attention_norm.scale", "model.layers.{l}.input_layernorm.weight"},
  };
  if (post_norms) {
    t.push_back({"decoder.layers_{l}.post_self_attention_norm.scale",
                 "model.layers.{l}.post_attention_layernorm.weight"});
    t.push_back(
        {"decoder.layers_{l}.pre_ffw_norm.scale", "model.layers.{l}.pre_feedforward_layernorm.weight"});
    t.push_back(
        {"decoder.layers_{l}.post_ffw_norm.scale", "model.layers.{l}.post_feedforward_layernorm.weight"});
  } else {
    t.push_back(
        {"decoder.layers_{l}.pre_ffw_norm.scale", "model.layers.{l}.post_attention_layernorm.weight"});
  }
  const std::vector<HfTensorRule> mlp = {
      {"decoder.layers_{l}.mlp.wi_0.kernel", "model.layers.{l}.mlp.gate_proj.weight", true},
      {"decoder.layers_{l}.mlp.wi_1.kernel", "model.layers.{l}.mlp.up_proj.weight", true},
      {"decoder.layers_{l}.mlp.wo.kernel", "model.layers.{l}.mlp.down_proj.weight", true},
  };
  t.insert(t.end(), mlp.begin(), mlp.end());
  return hf_decoder_tensors(t);
}

// transformers' defaults: Gemma 1 16 kv heads, Gemma 2 and 3 four; head_dim 256 in all.
std::vector<HfField> gemma_fields(std::string_view kv_heads) {
  return {
      {"hidden_size", "base_emb_dim", HfValue::kCount},
      {"intermediate_size", "base_mlp_dim", HfValue::kCount},
      {"num_hidden_layers", "base_num_decoder_layers", HfValue::kCount},
      {"num_attention_heads", "base_num_query_heads", HfValue::kCount},
      {"num_key_value_heads", "base_num_kv_heads", HfValue::kCount, kv_heads},
      {"head_dim", "head_dim", HfValue::kCount, "256"},
      {"vocab_size", "vocab_size", HfValue::kCount},
      {"rms_norm_eps", "normalization_layer_epsilon", HfValue::kReal, "1e-06"},
  };
}

// Gemma 2 and 3: scores scaled by query_pre_attn_scalar^-1/2 and soft caps (Gemma 2's default
// 50 / 30, Gemma 3's none; null is none in both).
std::vector<HfField> gemma2_fields(std::string_view attn_cap, std::string_view final_cap) {
  std::vector<HfField> f = gemma_fields("4");
  f.push_back({"query_pre_attn_scalar", "query_pre_attn_scalar", HfValue::kCount, "256"});
  f.push_back({"attn_logit_softcapping", "attn_logits_soft_cap", HfValue::kCap, attn_cap});
  f.push_back({"final_logit_softcapping", "final_logits_soft_cap", HfValue::kCap, final_cap});
  return f;
}

// transformers' Gemma 1 reads hidden_act (its legacy "gelu" runs as the tanh GELU; transformers 4
// read hidden_activation first), Gemma 2 and 3 hidden_activation only.
std::vector<HfFixed> gemma_fixed(bool gemma1) {
  std::vector<HfFixed> f = {
      {"hidden_activation", "\"gelu_pytorch_tanh\"",
       "not supported: Tessera's Gemma MLP is GeGLU with the tanh GELU (gelu_pytorch_tanh)"},
      {"tie_word_embeddings", "true", "not supported: Tessera's Gemma ties the output to the embedding"},
      {"attention_bias", "false", "not supported: Tessera's Gemma has no attention biases"},
      {"attention_dropout", "0.0", "not supported: Tessera has no dropout"},
      {"use_bidirectional_attention", "false", "not supported: Tessera's Gemma attention is causal"},
  };
  if (gemma1)
    f.push_back({"hidden_act", "\"gelu_pytorch_tanh\"",
                 "not supported: Tessera's Gemma MLP is GeGLU with the tanh GELU (gelu_pytorch_tanh, or "
                 "the legacy gelu)",
                 "\"gelu\""});
  return f;
}

}  // namespace

const HfFamily kHfGemma{
    .model_type = "gemma",
    .architecture = "GemmaForCausalLM",
    .blocks = {"gemma"},
    .fields = gemma_fields("16"),
    .fixed = gemma_fixed(true),
    .keys = {{"decoder_block", "gemma"},
             {"mlp_activations", "[\"gelu\", \"linear\"]"},
             {"logits_via_embedding", "true"},
             {"use_qk_norm", "false"},
             {"use_post_attn_norm", "false"},
             {"use_post_ffw_norm", "false"},
             {"query_pre_attn_scalar", "0"},
             {"attn_logits_soft_cap", "0"},
             {"final_logits_soft_cap", "0"},
             {"rope_linear_scaling_factor", "1"}},
    .tensors = gemma_tensors(false),
};

const HfFamily kHfGemma2{
    .model_type = "gemma2",
    .architecture = "Gemma2ForCausalLM",
    .blocks = {"gemma2"},
    .fields = gemma2_fields("50.0", "30.0"),
    .fixed = gemma_fixed(false),
    .keys = {{"decoder_block", "gemma2"},
             {"mlp_activations", "[\"gelu\", \"linear\"]"},
             {"logits_via_embedding", "true"},
             {"use_qk_norm", "false"},
             {"rope_linear_scaling_factor", "1"}},
    // transformers' Gemma 2 and 3 read hidden_activation only; the Hub's configs also say
    // hidden_act, and cache_implementation (a generation default).
    .harmless = "hidden_act cache_implementation",
    .window = HfWindow::kAlternating,
    .default_window = 4096,
    .tensors = gemma_tensors(true),
};

const HfFamily kHfGemma3{
    .model_type = "gemma3_text",
    .architecture = "Gemma3ForCausalLM",
    .blocks = {"gemma3"},
    .fields = gemma2_fields("null", "null"),
    .fixed = gemma_fixed(false),
    .keys = {{"decoder_block", "gemma3"},
             {"mlp_activations", "[\"gelu\", \"linear\"]"},
             {"logits_via_embedding", "true"}},
    .harmless = "hidden_act cache_implementation",
    .rope_types = "default linear",
    .default_rope_theta = 1000000.0,
    .local_rope = true,
    .default_local_rope_theta = 10000.0,
    .window = HfWindow::kFiveToOne,
    .default_window = 4096,
    .tensors = gemma_tensors(true),
};

}  // namespace tessera::convert
