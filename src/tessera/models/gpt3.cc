// The GPT-2 / GPT-3 family (MaxText's `gpt3` block; GPT-2's checkpoints are the same architecture):
//   x = embed(tokens) + embed_positions(positions)      [N, E]   (trainable_position_size rows)
//   repeat L times:
//     h = layer_norm(x) ; q,k,v = h·Wq + bq, h·Wk + bk, h·Wv + bv      (MHA, no rotary positions)
//     x = x + (attention(q, k, v)·Wo + bo)
//     h = layer_norm(x) ; x = x + (gelu(h·Wi + bi)·Wo + bo)             (plain MLP, tanh GELU)
//   logits = layer_norm(x)·Embᵀ (tied, as GPT-2's checkpoints) ; loss = cross_entropy
// Every LayerNorm has a bias; every projection has one. MaxText fuses q, k and v into one
// projection (`fused_qkv`); Tessera keeps three, the same product split by columns.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tessera/core/error.h"
#include "tessera/models/families.h"

namespace tessera::models {

namespace {

void configure_gpt3(ModelSpec& s, const Config& cfg) {
  if (cfg.mlp_activations.size() != 1)
    fail(ErrorKind::kConfig,
         "mlp_activations: the gpt3 block has a plain (non-gated) MLP, one activation such "
         "as [gelu]; got [{}]",
         fmt::join(cfg.mlp_activations, ", "));
  if (cfg.trainable_position_size <= 0)
    fail(ErrorKind::kConfig,
         "trainable_position_size={}: the gpt3 block learns absolute positions; set it to "
         "the longest sequence (GPT-2: 1024, GPT-3: 2048)",
         cfg.trainable_position_size);
  s.mlp_activation = cfg.mlp_activations[0];
  s.norm = NormKind::kLayer;
  s.gated_mlp = false;
  s.rope = false;
  s.attention_bias = s.attention_out_bias = true;
  s.mlp_bias = true;
  s.trainable_position_size = cfg.trainable_position_size;
}

DecoderInputs build_gpt3(graph::Graph& g, const ModelSpec& s) {
  Blocks b(g, s);
  ValueId x = b.embed();  // [N, E], positions added
  for (int64_t l = 0; l < s.num_decoder_layers; ++l) {
    g.set_layer(static_cast<int>(l));
    const std::string p = fmt::format("decoder.layers_{}.", l);
    ValueId h = b.norm(x, p + "pre_self_attention_norm");
    x = b.residual(x, b.attention(h, p + "self_attention."), p + "attention_residual");
    h = b.norm(x, p + "mlp_norm");
    x = g.add(x, b.mlp(h, p + "mlp."), p + "mlp_residual");
  }
  g.set_layer(-1);
  b.logits_and_loss(b.norm(x, "decoder.decoder_norm"));
  return b.inputs();
}

}  // namespace

const Family kGpt3Family{
    .name = "gpt3", .blocks = {"gpt3"}, .configure = configure_gpt3, .build = build_gpt3};

}  // namespace tessera::models
