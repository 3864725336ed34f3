// Hugging Face tables of the Llama family: LlamaForCausalLM (Llama 2, 3, 3.1) and
// MistralForCausalLM, and the decoder tensors Qwen and Mixtral share (hf_family.h). Hugging Face's
// q/k projections are already permuted for rotate_half RoPE, the layout Tessera uses.
#include "tessera/convert/hf_family.h"

namespace tessera::convert {

// Embedding first, then the layers, then the final norm and the head (the order of the export).
std::vector<HfTensorRule> hf_llama_outer_tensors() {
  return {
      {"token_embedder.embedding", "model.embed_tokens.weight"},
      {"decoder.decoder_norm.scale", "model.norm.weight"},
      {"decoder.logits_dense.kernel", "lm_head.weight", true},
  };
}

// One layer's attention (biases: Qwen 2.5; QK-norm: Qwen 3) and its two norms.
std::vector<HfTensorRule> hf_llama_attention_tensors() {
  return {
      {"decoder.layers_{l}.self_attention.query.kernel", "model.layers.{l}.self_attn.q_proj.weight", true},
      {"decoder.layers_{l}.self_attention.query.bias", "model.layers.{l}.self_attn.q_proj.bias"},
      {"decoder.layers_{l}.self_attention.key.kernel", "model.layers.{l}.self_attn.k_proj.weight", true},
      {"decoder.layers_{l}.self_attention.key.bias", "model.layers.{l}.self_attn.k_proj.bias"},
      {"decoder.layers_{l}.self_attention.value.kernel", "model.layers.{l}.self_attn.v_proj.weight", true},
      {"decoder.layers_{l}.self_attention.value.bias", "model.layers.{l}.self_attn.v_proj.bias"},
      {"decoder.layers_{l}.self_attention.out.kernel", "model.layers.{l}.self_attn.o_proj.weight", true},
      {"decoder.layers_{l}.self_attention.query_norm.scale", "model.layers.{l}.self_attn.q_norm.weight"},
      {"decoder.layers_{l}.self_attention.key_norm.scale", "model.layers.{l}.self_attn.k_norm.weight"},
      {"decoder.layers_{l}.pre_self_attention_layer_norm.scale", "model.layers.{l}.input_layernorm.weight"},
      {"decoder.layers_{l}.post_self_attention_layer_norm.scale",
       "model.layers.{l}.post_attention_layernorm.weight"},
  };
}

std::vector<HfTensorRule> hf_decoder_tensors(const std::vector<HfTensorRule>& layer) {
  const std::vector<HfTensorRule> outer = hf_llama_outer_tensors();
  std::vector<HfTensorRule> t = {outer[0]};
  t.insert(t.end(), layer.begin(), layer.end());
  t.insert(t.end(), outer.begin() + 1, outer.end());
  return t;
}

std::vector<HfTensorRule> hf_llama_dense_tensors() {
  std::vector<HfTensorRule> t = hf_llama_attention_tensors();
  const std::vector<HfTensorRule> mlp = {
      {"decoder.layers_{l}.mlp.wi_0.kernel", "model.layers.{l}.mlp.gate_proj.weight", true},
      {"decoder.layers_{l}.mlp.wi_1.kernel", "model.layers.{l}.mlp.up_proj.weight", true},
      {"decoder.layers_{l}.mlp.wo.kernel", "model.layers.{l}.mlp.down_proj.weight", true},
  };
  t.insert(t.end(), mlp.begin(), mlp.end());
  return hf_decoder_tensors(t);
}

std::vector<HfField> hf_llama_fields(std::string_view kv_heads, std::string_view eps) {
  return {
      {"hidden_size", "base_emb_dim", HfValue::kCount},
      {"intermediate_size", "base_mlp_dim", HfValue::kCount},
      {"num_hidden_layers", "base_num_decoder_layers", HfValue::kCount},
      {"num_attention_heads", "base_num_query_heads", HfValue::kCount},
      {"num_key_value_heads", "base_num_kv_heads", HfValue::kCount, kv_heads},
      {"head_dim", "head_dim", HfValue::kCount, "@hidden_size/@num_attention_heads"},
      {"vocab_size", "vocab_size", HfValue::kCount},
      {"rms_norm_eps", "normalization_layer_epsilon", HfValue::kReal, eps},
      {"tie_word_embeddings", "logits_via_embedding", HfValue::kBool, "false"},
  };
}

std::vector<HfFixed> hf_swiglu_fixed() {
  return {
      {"hidden_act", "\"silu\"", "not supported: Tessera's MLP here is SwiGLU (hidden_act silu)"},
      {"attention_dropout", "0.0", "not supported: Tessera has no dropout"},
  };
}

namespace {

std::vector<HfFixed> llama_fixed() {
  std::vector<HfFixed> f = hf_swiglu_fixed();
  f.push_back({"attention_bias", "false", "not supported: Tessera's Llama has no attention biases"});
  f.push_back({"mlp_bias", "false", "not supported: Tessera's Llama has no MLP biases"});
  return f;
}

}  // namespace

const HfFamily kHfLlama{
    .model_type = "llama",
    .architecture = "LlamaForCausalLM",
    .blocks = {"llama2", "default"},
    .fields = hf_llama_fields("@num_attention_heads", "1e-06"),
    .fixed = llama_fixed(),
    .keys = {{"decoder_block", "llama2"}, {"mlp_activations", "[\"silu\", \"linear\"]"}},
    .harmless = "pretraining_tp",
    .rope_types = "default llama3",
    .tensors = hf_llama_dense_tensors(),
};

const HfFamily kHfMistral{
    .model_type = "mistral",
    .architecture = "MistralForCausalLM",
    .blocks = {"mistral"},
    .fields = hf_llama_fields("8", "1e-06"),
    .fixed = hf_swiglu_fixed(),
    .keys = {{"decoder_block", "mistral"}, {"mlp_activations", "[\"silu\", \"linear\"]"}},
    .rope_types = "default",
    .window = HfWindow::kOptional,
    .default_window = 4096,
    .tensors = hf_llama_dense_tensors(),
};

}  // namespace tessera::convert
