// Hugging Face tables of the Qwen dense family (hf_family.h): Qwen2ForCausalLM (Qwen 2.5: biases
// on q, k and v) and Qwen3ForCausalLM (Qwen 3: QK-norm, head_dim in the config). Both are Llama's
// tensors; the biases and QK-norm scales are read where Tessera's model has them.
#include "tessera/convert/hf_family.h"

namespace tessera::convert {

namespace {

// Qwen's sliding window is off unless use_sliding_window; then its sliding_window and
// max_window_layers say nothing (transformers ignores them).
std::vector<HfFixed> qwen_fixed(bool qwen3) {
  std::vector<HfFixed> f = hf_swiglu_fixed();
  f.push_back(
      {"use_sliding_window", "false", "not supported: Tessera converts Qwen without a sliding window"});
  if (qwen3)
    f.push_back({"attention_bias", "false", "not supported: Tessera's Qwen 3 has no attention biases"});
  return f;
}

std::vector<HfField> qwen_fields(bool qwen3) {
  std::vector<HfField> f = hf_llama_fields("32", "1e-06");
  for (HfField& field : f)
    if (field.hf == "head_dim" && qwen3) field.fallback = "128";
  if (!qwen3)  // Qwen2Config has no head_dim: always hidden_size / num_attention_heads
    for (HfField& field : f)
      if (field.hf == "head_dim") field.derived = true;
  return f;
}

}  // namespace

const HfFamily kHfQwen2{
    .model_type = "qwen2",
    .architecture = "Qwen2ForCausalLM",
    .blocks = {"qwen2"},
    .fields = qwen_fields(false),
    .fixed = qwen_fixed(false),
    .keys = {{"decoder_block", "qwen2"}, {"mlp_activations", "[\"silu\", \"linear\"]"}},
    .harmless = "sliding_window max_window_layers",
    .tensors = hf_llama_dense_tensors(),
};

const HfFamily kHfQwen3{
    .model_type = "qwen3",
    .architecture = "Qwen3ForCausalLM",
    .blocks = {"qwen3"},
    .fields = qwen_fields(true),
    .fixed = qwen_fixed(true),
    .keys = {{"decoder_block", "qwen3"}, {"mlp_activations", "[\"silu\", \"linear\"]"}},
    .harmless = "sliding_window max_window_layers",
    .tensors = hf_llama_dense_tensors(),
};

}  // namespace tessera::convert
