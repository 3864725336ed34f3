// The families' entries (decoder.h), each defined in its own file. Internal to models/.
#pragma once

#include "tessera/models/decoder.h"

namespace tessera::models {

using graph::ValueId;

extern const Family kLlamaFamily;    // llama.cc
extern const Family kGpt3Family;     // gpt3.cc
extern const Family kQwenFamily;     // qwen.cc
extern const Family kMixtralFamily;  // mixtral.cc
extern const Family kGptOssFamily;   // gpt_oss.cc
extern const Family kGemmaFamily;    // gemma.cc

// Llama's options and decoder loop, which Qwen shares (llama.cc).
void configure_llama_like(ModelSpec& s, const Config& cfg);
DecoderInputs build_llama_like(graph::Graph& g, const ModelSpec& s);

// The pre-norm decoder loop Llama, Qwen, Mixtral, GPT-OSS and Gemma share (llama.cc): per layer
// x += attention(norm(x)); x += mlp(norm(x)) (or moe(...)), then the final norm and the loss; with
// spec.post_attention_norm / post_mlp_norm (Gemma 2, 3) the block outputs are normalised before
// their residual adds. The families differ in the names of the blocks in MaxText's tree.
struct PreNormBlocks {
  const char* attention = "self_attention.";
  const char* mlp = "mlp.";
  bool moe = false;  // the MLP is Blocks::moe
  const char* pre_attention_norm = "pre_self_attention_layer_norm";
  const char* pre_mlp_norm = "post_self_attention_layer_norm";
  const char* post_attention_norm = "post_self_attention_norm";  // when spec.post_attention_norm
  const char* post_mlp_norm = "post_ffw_norm";                   // when spec.post_mlp_norm
};
DecoderInputs build_pre_norm_decoder(graph::Graph& g, const ModelSpec& s, const PreNormBlocks& names);

}  // namespace tessera::models
