// The Llama family (Llama 2/3/3.1, Mistral) as MaxText configures it:
//   x = embed(tokens)                                   [N, E]
//   repeat L times:
//     h = rms_norm(x) ; q,k,v = h·Wq, h·Wk, h·Wv ; q,k = rope(q), rope(k)
//     x = x + attention(q, k, v)·Wo                     (GQA, causal, optional sliding window)
//     h = rms_norm(x) ; x = x + (silu(h·Wi0) * (h·Wi1))·Wo_mlp
//   logits = rms_norm(x)·W_unembed  (or ·Embᵀ when logits_via_embedding)
//   loss = cross_entropy(logits, targets)
// Parameter names follow MaxText's tree (decoder.layers_<l>.self_attention.query.kernel, ...).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tessera/core/error.h"
#include "tessera/models/families.h"

namespace tessera::models {

// Llama's options, which Qwen shares (qwen.cc).
void configure_llama_like(ModelSpec& s, const Config& cfg) {
  if (cfg.mlp_activations.size() != 2 || cfg.mlp_activations[1] != "linear")
    fail(ErrorKind::kConfig, "mlp_activations: the {} block is the gated form [<act>, linear]; got [{}]",
         cfg.decoder_block, fmt::join(cfg.mlp_activations, ", "));
  if (cfg.trainable_position_size > 0)
    fail(ErrorKind::kConfig, "trainable_position_size={}: the {} block uses rotary positions (set -1)",
         cfg.trainable_position_size, cfg.decoder_block);
  s.mlp_activation = cfg.mlp_activations[0];
  s.norm = NormKind::kRms;
  s.gated_mlp = true;
  s.rope = true;
  s.attention_bias = cfg.attention_bias;
  s.qk_norm = cfg.use_qk_norm;
}

DecoderInputs build_pre_norm_decoder(graph::Graph& g, const ModelSpec& s, const PreNormBlocks& names) {
  Blocks b(g, s);
  ValueId x = b.embed();  // [N, E]
  for (int64_t l = 0; l < s.num_decoder_layers; ++l) {
    g.set_layer(static_cast<int>(l));
    const std::string p = fmt::format("decoder.layers_{}.", l);
    ValueId h = b.attention(b.norm(x, p + names.pre_attention_norm), p + names.attention);
    if (s.post_attention_norm) h = b.norm(h, p + names.post_attention_norm);
    x = b.residual(x, h, p + "attention_residual");
    h = b.norm(x, p + names.pre_mlp_norm);
    h = names.moe ? b.moe(h, p + names.mlp) : b.mlp(h, p + names.mlp);
    if (s.post_mlp_norm) h = b.norm(h, p + names.post_mlp_norm);
    x = g.add(x, h, p + "mlp_residual");
  }
  g.set_layer(-1);
  b.logits_and_loss(b.norm(x, "decoder.decoder_norm"));
  return b.inputs();
}

DecoderInputs build_llama_like(graph::Graph& g, const ModelSpec& s) {
  return build_pre_norm_decoder(g, s, {});
}

const Family kLlamaFamily{.name = "llama",
                          .blocks = {"llama2", "mistral", "default"},
                          .configure = configure_llama_like,
                          .build = build_llama_like};

}  // namespace tessera::models
