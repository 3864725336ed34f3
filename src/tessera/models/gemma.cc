// The Gemma family (MaxText's `gemma`, `gemma2`, `gemma3` blocks; text only) as Hugging Face
// transformers defines it:
//   x = embed(tokens) * sqrt(E)                (the factor rounded to the compute dtype)
//   repeat L times:
//     h = norm(x) ; h = attention(h)           (RoPE, MQA/GQA/MHA, head_dim 256 in the presets)
//     h = norm(h)                              (gemma2, gemma3: post-attention norm)
//     x = x + h
//     h = norm(x) ; h = geglu(h)               (gelu with the tanh approximation, gated)
//     h = norm(h)                              (gemma2, gemma3: post-MLP norm)
//     x = x + h
//   logits = norm(x)·Embᵀ  (tied)              (gemma2: c tanh(logits / c), final_logits_soft_cap)
// Every norm is Gemma's RMSNorm, which scales by 1 + w (the weight is stored as the checkpoint
// stores it, so conversion copies it as is).
//   gemma2: layers alternate a sliding window (even layers) and full attention (odd); attention
//           logits soft-capped (attn_logits_soft_cap); scores scaled by query_pre_attn_scalar^-1/2.
//   gemma3: five sliding layers then one global (l % 6 == 5); QK-norm (Gemma's RMSNorm over each
//           head); the sliding layers rotate with local_rope_max_timescale, the global ones with
//           rope_max_timescale and rope_linear_scaling_factor.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>

#include "tessera/core/error.h"
#include "tessera/models/families.h"

namespace tessera::models {

namespace {

void configure_gemma(ModelSpec& s, const Config& cfg) {
  const std::string& block = cfg.decoder_block;
  if (cfg.mlp_activations != std::vector<std::string>{"gelu", "linear"})
    fail(ErrorKind::kConfig, "mlp_activations: the {} block's MLP is GeGLU, [gelu, linear]; got [{}]", block,
         fmt::join(cfg.mlp_activations, ", "));
  if (cfg.trainable_position_size > 0)
    fail(ErrorKind::kConfig, "trainable_position_size={}: the {} block uses rotary positions (set -1)",
         cfg.trainable_position_size, block);
  s.mlp_activation = "gelu";
  s.norm = NormKind::kRms;
  s.norm_offset = 1.0;
  s.gated_mlp = true;
  s.rope = true;
  s.embed_scale = std::sqrt(static_cast<double>(cfg.emb_dim));
  s.attention_bias = cfg.attention_bias;
  s.query_scale = cfg.query_pre_attn_scalar > 0 ? 1.0 / std::sqrt(cfg.query_pre_attn_scalar) : 0.0;
  s.attn_logits_soft_cap = cfg.attn_logits_soft_cap;
  s.final_logits_soft_cap = cfg.final_logits_soft_cap;
  if (block == "gemma") {
    s.qk_norm = cfg.use_qk_norm;
    s.post_attention_norm = cfg.use_post_attn_norm;
    s.post_mlp_norm = cfg.use_post_ffw_norm;
    return;
  }
  // gemma2 and gemma3: post norms, local (sliding) and global layers.
  s.post_attention_norm = s.post_mlp_norm = true;
  if (cfg.sliding_window_size <= 0)
    fail(ErrorKind::kConfig,
         "sliding_window_size: the {} block alternates sliding-window and global layers; set the window "
         "(gemma2: 4096, gemma3: 1024, gemma3-1b: 512)",
         block);
  s.sliding_window = cfg.sliding_window_size;
  if (block == "gemma2") {
    s.window_cycle = 2;
    s.qk_norm = cfg.use_qk_norm;
    return;
  }
  s.window_cycle = 6;
  s.qk_norm = true;
  if (cfg.local_rope_max_timescale <= 0)
    fail(ErrorKind::kConfig,
         "local_rope_max_timescale: the gemma3 block's sliding layers rotate with their own RoPE theta "
         "(Gemma 3: 10000)");
  s.local_rope_theta = static_cast<double>(cfg.local_rope_max_timescale);
  s.rope_linear_factor = cfg.rope_linear_scaling_factor;
}

DecoderInputs build_gemma(graph::Graph& g, const ModelSpec& s) {
  return build_pre_norm_decoder(g, s,
                                {.pre_attention_norm = "pre_self_attention_norm",
                                 .pre_mlp_norm = "pre_ffw_norm",
                                 .post_attention_norm = "post_self_attention_norm",
                                 .post_mlp_norm = "post_ffw_norm"});
}

}  // namespace

const Family kGemmaFamily{.name = "gemma",
                          .blocks = {"gemma", "gemma2", "gemma3"},
                          .configure = configure_gemma,
                          .build = build_gemma};

}  // namespace tessera::models
