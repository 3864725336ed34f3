// Hugging Face table of GPT-OSS (GptOssForCausalLM), hf_family.h. Per layer: attention with
// biases on q, k, v and o and one sink logit per query head (self_attn.sinks [H]); a router with a
// bias (mlp.router); X experts stored as stacked tensors already [X, in, out]:
//   mlp.experts.gate_up_proj [X, E, 2F] with the gate in the even and up in the odd columns
//                                        (transformers' GptOssExperts: gate_up[..., ::2], [..., 1::2])
//   mlp.experts.gate_up_proj_bias [X, 2F] interleaved the same way
//   mlp.experts.down_proj [X, F, E], down_proj_bias [X, E]
// openai/gpt-oss-* store the expert projections as MXFP4 (gate_up_proj_blocks + _scales, ...),
// dequantised on import (hf_tensors.h). Layers alternate a sliding window (even) and full attention
// (layer_types), and RoPE is YaRN.
#include "tessera/convert/hf_family.h"

namespace tessera::convert {

namespace {

std::vector<HfTensorRule> gpt_oss_tensors() {
  return hf_decoder_tensors({
      {"decoder.layers_{l}.GptOssAttention.query.kernel", "model.layers.{l}.self_attn.q_proj.weight", true},
      {"decoder.layers_{l}.GptOssAttention.query.bias", "model.layers.{l}.self_attn.q_proj.bias"},
      {"decoder.layers_{l}.GptOssAttention.key.kernel", "model.layers.{l}.self_attn.k_proj.weight", true},
      {"decoder.layers_{l}.GptOssAttention.key.bias", "model.layers.{l}.self_attn.k_proj.bias"},
      {"decoder.layers_{l}.GptOssAttention.value.kernel", "model.layers.{l}.self_attn.v_proj.weight", true},
      {"decoder.layers_{l}.GptOssAttention.value.bias", "model.layers.{l}.self_attn.v_proj.bias"},
      {"decoder.layers_{l}.GptOssAttention.out.kernel", "model.layers.{l}.self_attn.o_proj.weight", true},
      {"decoder.layers_{l}.GptOssAttention.out.bias", "model.layers.{l}.self_attn.o_proj.bias"},
      {"decoder.layers_{l}.GptOssAttention.sinks", "model.layers.{l}.self_attn.sinks"},
      {"decoder.layers_{l}.pre_self_attention_layer_norm.scale", "model.layers.{l}.input_layernorm.weight"},
      {"decoder.layers_{l}.post_self_attention_layer_norm.scale",
       "model.layers.{l}.post_attention_layernorm.weight"},
      {"decoder.layers_{l}.GptOssMlp.gate.kernel", "model.layers.{l}.mlp.router.weight", true},
      {"decoder.layers_{l}.GptOssMlp.gate.bias", "model.layers.{l}.mlp.router.bias"},
      {"decoder.layers_{l}.GptOssMlp.wi_0", "model.layers.{l}.mlp.experts.gate_up_proj", false,
       HfSplit::kInterleaved, 0, 2},
      {"decoder.layers_{l}.GptOssMlp.wi_1", "model.layers.{l}.mlp.experts.gate_up_proj", false,
       HfSplit::kInterleaved, 1, 2},
      {"decoder.layers_{l}.GptOssMlp.wi_0_bias", "model.layers.{l}.mlp.experts.gate_up_proj_bias", false,
       HfSplit::kInterleaved, 0, 2},
      {"decoder.layers_{l}.GptOssMlp.wi_1_bias", "model.layers.{l}.mlp.experts.gate_up_proj_bias", false,
       HfSplit::kInterleaved, 1, 2},
      {"decoder.layers_{l}.GptOssMlp.wo", "model.layers.{l}.mlp.experts.down_proj"},
      {"decoder.layers_{l}.GptOssMlp.wo_bias", "model.layers.{l}.mlp.experts.down_proj_bias"},
  });
}

}  // namespace

const HfFamily kHfGptOss{
    .model_type = "gpt_oss",
    .architecture = "GptOssForCausalLM",
    .blocks = {"gpt_oss"},
    .fields =
        {
            {"hidden_size", "base_emb_dim", HfValue::kCount},
            {"intermediate_size", "base_moe_mlp_dim", HfValue::kCount},
            {"num_hidden_layers", "base_num_decoder_layers", HfValue::kCount},
            {"num_attention_heads", "base_num_query_heads", HfValue::kCount},
            {"num_key_value_heads", "base_num_kv_heads", HfValue::kCount, "@num_attention_heads"},
            {"head_dim", "head_dim", HfValue::kCount, "@hidden_size/@num_attention_heads"},
            {"vocab_size", "vocab_size", HfValue::kCount},
            {"rms_norm_eps", "normalization_layer_epsilon", HfValue::kReal, "1e-05"},
            {"tie_word_embeddings", "logits_via_embedding", HfValue::kBool, "false"},
            {"num_local_experts", "num_experts", HfValue::kCount},
            {"num_experts_per_tok", "num_experts_per_tok", HfValue::kCount, "4"},
            {"swiglu_limit", "mlp_activations_limit", HfValue::kReal, "7.0"},
        },
    .fixed =
        {
            {"hidden_act", "\"silu\"", "not supported: GPT-OSS's experts run the clamped SwiGLU"},
            {"attention_bias", "true", "not supported: Tessera's GPT-OSS has attention biases"},
            {"attention_dropout", "0.0", "not supported: Tessera has no dropout"},
            {"swiglu_alpha", "1.702", "not supported: Tessera's clamped SwiGLU has alpha 1.702"},
        },
    .keys = {{"decoder_block", "gpt_oss"}, {"mlp_activations", "[\"sigmoid\", \"linear\"]"}},
    // openai's configs also say experts_per_token (= num_experts_per_tok) and
    // initial_context_length (= the YaRN original context).
    .harmless = "output_router_logits router_aux_loss_coef experts_per_token initial_context_length",
    .rope_types = "yarn",
    .default_rope_theta = 150000.0,
    .window = HfWindow::kAlternating,
    .default_window = 128,
    .mxfp4 = true,
    .tensors = gpt_oss_tensors(),
};

}  // namespace tessera::convert
