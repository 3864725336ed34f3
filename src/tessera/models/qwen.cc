// The Qwen dense family: Llama's decoder (RMSNorm, SwiGLU, GQA, RoPE) with
//   qwen2 (Qwen 2.5): biases on the query, key and value projections (not on the output);
//   qwen3 (Qwen 3):   QK-norm, an RMSNorm over each head's D of q and k before RoPE, and no biases.
// Both tie the embeddings where the checkpoint does (logits_via_embedding in the preset).
#include "tessera/models/families.h"

namespace tessera::models {

namespace {

void configure_qwen(ModelSpec& s, const Config& cfg) {
  configure_llama_like(s, cfg);
  if (cfg.decoder_block == "qwen2") s.attention_bias = true;
  if (cfg.decoder_block == "qwen3") s.qk_norm = true;
}

}  // namespace

const Family kQwenFamily{
    .name = "qwen", .blocks = {"qwen2", "qwen3"}, .configure = configure_qwen, .build = build_llama_like};

}  // namespace tessera::models
