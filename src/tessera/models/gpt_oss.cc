// The GPT-OSS family (gpt-oss-20b, -120b) as transformers and MaxText define it:
//   repeat L times (layer l slides a window of sliding_window_size when l is even, attends to the
//   whole prefix when odd):
//     h = rms_norm(x) ; x = x + attention(h)     (q/k/v/o biases, GQA, YaRN RoPE, one learned sink
//                                                 logit per query head in every softmax)
//     h = rms_norm(x) ; x = x + moe(h)           (router with a bias, top-k of softmax over the
//                                                 chosen; experts with biases and the clamped
//                                                 SwiGLU (u' + 1) * g' * sigmoid(1.702 g'),
//                                                 g' = min(g, limit), u' = clamp(u, +-limit))
//   logits = rms_norm(x)·W_unembed
// MaxText spells the activation [sigmoid, linear] and hard-codes the rest for gpt_oss; Tessera
// requires that spelling and runs the same function (ops/activation.h's swish_1702).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tessera/core/error.h"
#include "tessera/models/families.h"

namespace tessera::models {

namespace {

void configure_gpt_oss(ModelSpec& s, const Config& cfg) {
  if (cfg.mlp_activations != std::vector<std::string>{"sigmoid", "linear"})
    fail(ErrorKind::kConfig,
         "mlp_activations: the gpt_oss block's experts are GPT-OSS's clamped SwiGLU, which MaxText spells "
         "[sigmoid, linear]; got [{}]",
         fmt::join(cfg.mlp_activations, ", "));
  if (cfg.trainable_position_size > 0 || cfg.use_qk_norm)
    fail(ErrorKind::kConfig, "trainable_position_size / use_qk_norm: the gpt_oss block has neither");
  if (cfg.num_experts < 2)
    fail(ErrorKind::kConfig, "num_experts={}: the gpt_oss block is a mixture of experts (num_experts >= 2)",
         cfg.num_experts);
  if (cfg.num_experts_per_tok > cfg.num_experts)
    fail(ErrorKind::kConfig, "num_experts_per_tok={} is more than num_experts={}", cfg.num_experts_per_tok,
         cfg.num_experts);
  if (cfg.sliding_window_size <= 0)
    fail(ErrorKind::kConfig,
         "sliding_window_size: the gpt_oss block alternates sliding-window (even layers) and full layers; "
         "set the window (GPT-OSS: 128)");
  s.mlp_activation = "swish_1702";
  s.norm = NormKind::kRms;
  s.gated_mlp = true;
  s.rope = true;
  s.attention_bias = s.attention_out_bias = true;
  s.mlp_bias = true;
  s.attention_sinks = true;
  s.routed_bias = true;
  s.sliding_window = cfg.sliding_window_size;
  s.window_cycle = 2;
  s.mlp_limit = cfg.mlp_activations_limit > 0 ? cfg.mlp_activations_limit : 0;
  s.mlp_up_offset = 1.0;
}

DecoderInputs build_gpt_oss(graph::Graph& g, const ModelSpec& s) {
  return build_pre_norm_decoder(g, s, {.attention = "GptOssAttention.", .mlp = "GptOssMlp.", .moe = true});
}

}  // namespace

const Family kGptOssFamily{.name = "gpt_oss",
                           .blocks = {"gpt_oss"},
                           .configure = configure_gpt_oss,
                           .build = build_gpt_oss,
                           .moe = true};

}  // namespace tessera::models
