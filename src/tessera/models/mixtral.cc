// The Mixtral family (Mixtral 8x7B, 8x22B) as MaxText configures it: Mistral's decoder with each
// MLP replaced by a mixture of experts (blocks.h's moe):
//   repeat L times:
//     h = rms_norm(x) ; x = x + attention(h)            (GQA, RoPE, optional sliding window)
//     h = rms_norm(x) ; x = x + moe(h)                  (top-k of num_experts SwiGLU experts)
// Parameter names follow MaxText's tree: decoder.layers_<l>.MoeBlock_0.{gate.kernel, wi_0, wi_1, wo}.

#include "tessera/core/error.h"
#include "tessera/models/families.h"

namespace tessera::models {

namespace {

void configure_mixtral(ModelSpec& s, const Config& cfg) {
  configure_llama_like(s, cfg);
  if (s.attention_bias || s.qk_norm)
    fail(ErrorKind::kConfig, "attention_bias / use_qk_norm: the mixtral block has neither");
  if (cfg.num_experts < 2)
    fail(ErrorKind::kConfig, "num_experts={}: the mixtral block is a mixture of experts (num_experts >= 2)",
         cfg.num_experts);
  if (cfg.num_experts_per_tok > cfg.num_experts)
    fail(ErrorKind::kConfig, "num_experts_per_tok={} is more than num_experts={}", cfg.num_experts_per_tok,
         cfg.num_experts);
}

DecoderInputs build_mixtral(graph::Graph& g, const ModelSpec& s) {
  return build_pre_norm_decoder(g, s, {.attention = "self_attention.", .mlp = "MoeBlock_0.", .moe = true});
}

}  // namespace

const Family kMixtralFamily{.name = "mixtral",
                            .blocks = {"mixtral"},
                            .configure = configure_mixtral,
                            .build = build_mixtral,
                            .moe = true};

}  // namespace tessera::models
