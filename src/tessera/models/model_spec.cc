// ModelSpec from the resolved config (model_spec.h).
#include "tessera/models/model_spec.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>

#include "tessera/core/error.h"
#include "tessera/models/decoder.h"

namespace tessera::models {

ModelSpec model_spec_from_config(const Config& cfg) {
  ModelSpec s;
  s.decoder_block = cfg.decoder_block;
  s.emb_dim = cfg.emb_dim;
  s.num_query_heads = cfg.num_query_heads;
  s.num_kv_heads = cfg.num_kv_heads;
  s.head_dim = cfg.head_dim;
  s.mlp_dim = cfg.mlp_dim;
  s.num_decoder_layers = cfg.num_decoder_layers;
  s.vocab_size = cfg.vocab_size;
  s.norm_eps = cfg.normalization_layer_epsilon;
  s.logits_via_embedding = cfg.logits_via_embedding;
  s.normalize_embedding_logits = cfg.normalize_embedding_logits;
  if (s.normalize_embedding_logits && !s.logits_via_embedding)
    fail(ErrorKind::kConfig,
         "normalize_embedding_logits=true divides tied logits (logits_via_embedding=true); the output "
         "projection here is untied");
  s.rope_theta = static_cast<double>(cfg.rope_max_timescale);
  s.rope_type = cfg.rope_type;
  s.yarn = {.factor = cfg.rope_factor,
            .beta_fast = cfg.beta_fast,
            .beta_slow = cfg.beta_slow,
            .original_max_position_embeddings = static_cast<double>(cfg.original_max_position_embeddings),
            .truncate = cfg.rope_truncate,
            .attention_scaling = cfg.rope_attention_scaling};
  s.llama3 = {
      .factor = cfg.llama3_rope_factor,
      .low_freq_factor = cfg.llama3_low_freq_factor,
      .high_freq_factor = cfg.llama3_high_freq_factor,
      .original_max_position_embeddings = static_cast<double>(cfg.llama3_original_max_position_embeddings)};
  if (cfg.rope_type != "llama3.1") {  // the llama3_* keys act only on that RoPE: refuse them elsewhere
    const ops::Llama3RopeScaling d;
    if (s.llama3.factor != d.factor || s.llama3.low_freq_factor != d.low_freq_factor ||
        s.llama3.high_freq_factor != d.high_freq_factor ||
        s.llama3.original_max_position_embeddings != d.original_max_position_embeddings)
      fail(ErrorKind::kConfig,
           "llama3_rope_factor / llama3_*_freq_factor / llama3_original_max_position_embeddings "
           "apply with rope_type=llama3.1 (it is {})",
           cfg.rope_type);
  }
  s.sliding_window = cfg.attention_type == "local_sliding" ? cfg.sliding_window_size : 0;
  s.num_experts = cfg.num_experts;
  s.num_experts_per_tok = cfg.num_experts_per_tok;
  s.moe_mlp_dim = cfg.moe_mlp_dim;
  s.capacity_factor = cfg.capacity_factor;
  s.load_balance_loss_weight = cfg.load_balance_loss_weight;
  if (cfg.sparse_matmul && cfg.capacity_factor > 0)
    fail(ErrorKind::kConfig,
         "capacity_factor={} drops tokens on the dense path only (sparse_matmul=false), as in MaxText; "
         "sparse_matmul=true is dropless",
         cfg.capacity_factor);
  s.moe_path = cfg.sparse_matmul ? MoePath::kDropless
                                 : (cfg.capacity_factor > 0 ? MoePath::kCapacity : MoePath::kDense);
  family_for(cfg.decoder_block).configure(s, cfg);
  // MaxText's meaning: the window applies to attention_type=local_sliding layers only (a family
  // that alternates windowed and full layers sets its own).
  if (s.window_cycle == 0 && cfg.attention_type != "local_sliding" && cfg.sliding_window_size > 0)
    fail(ErrorKind::kConfig, "sliding_window_size={} applies with attention_type=local_sliding (it is {})",
         cfg.sliding_window_size, cfg.attention_type);
  // Keys a family does not honour are refused, never ignored.
  const std::pair<bool, const char*> unhonoured[] = {
      {cfg.attention_sink && !s.attention_sinks, "attention_sink=true"},
      {cfg.mlp_bias && !s.mlp_bias, "mlp_bias=true"},
      {cfg.mlp_activations_limit > 0 && s.mlp_limit == 0, "mlp_activations_limit"},
      {cfg.routed_bias && !s.routed_bias, "routed_bias=true"},
      {cfg.use_post_attn_norm && !s.post_attention_norm, "use_post_attn_norm=true"},
      {cfg.use_post_ffw_norm && !s.post_mlp_norm, "use_post_ffw_norm=true"},
      {cfg.attn_logits_soft_cap > 0 && s.attn_logits_soft_cap == 0, "attn_logits_soft_cap"},
      {cfg.final_logits_soft_cap > 0 && s.final_logits_soft_cap == 0, "final_logits_soft_cap"},
      {cfg.query_pre_attn_scalar > 0 && s.query_scale == 0, "query_pre_attn_scalar"},
      {cfg.local_rope_max_timescale > 0 && s.local_rope_theta == 0, "local_rope_max_timescale"},
      {cfg.rope_linear_scaling_factor != 1 && s.rope_linear_factor == 1, "rope_linear_scaling_factor"}};
  for (const auto& [bad, key] : unhonoured)
    if (bad) fail(ErrorKind::kConfig, "{}: the {} block does not have it", key, cfg.decoder_block);
  if (s.num_experts > 1 && !family_for(cfg.decoder_block).moe)
    fail(ErrorKind::kConfig,
         "num_experts={}: the {} block has a dense MLP; the mixture-of-experts blocks are {}", s.num_experts,
         cfg.decoder_block, moe_blocks());
  // The MoE keys act only on MoE layers: set on a dense model they would do nothing.
  if (!family_for(cfg.decoder_block).moe) {
    const std::pair<bool, const char*> moe_only[] = {
        {cfg.num_experts_per_tok > 1, "num_experts_per_tok"},
        {cfg.load_balance_loss_weight > 0, "load_balance_loss_weight"},
        {cfg.capacity_factor > 0, "capacity_factor"}};
    for (const auto& [set, key] : moe_only)
      if (set)
        fail(ErrorKind::kConfig, "{}: the {} block has no mixture-of-experts layers (those blocks are {})",
             key, cfg.decoder_block, moe_blocks());
  }
  s.dtype = dtype_from_name(cfg.dtype);
  const double pdb = cfg.per_device_batch_size;
  if (pdb < 1 || std::floor(pdb) != pdb)
    fail(ErrorKind::kConfig,
         "per_device_batch_size={}: Tessera trains whole sequences per device (an integer >= 1)", pdb);
  s.batch = static_cast<int64_t>(pdb);
  s.seq = cfg.max_target_length;
  return s;
}

ops::RopeConfig rope_config(const ModelSpec& s, int64_t max_positions) {
  ops::RopeConfig rc{.max_timescale = s.rope_theta, .head_dim = s.head_dim, .max_positions = max_positions};
  if (s.rope_type == "llama3.1") {
    rc.scaling = ops::RopeScaling::kLlama3;
    rc.llama3 = s.llama3;
  }
  if (s.rope_linear_factor != 1) {
    TESSERA_CHECK(s.rope_type == "default", ErrorKind::kConfig,
                  "rope_linear_scaling_factor={} with rope_type={}: linear scaling is of plain RoPE",
                  s.rope_linear_factor, s.rope_type);
    rc.scaling = ops::RopeScaling::kLinear;
    rc.linear_factor = s.rope_linear_factor;
  }
  rc.local_max_timescale = s.local_rope_theta;
  if (s.rope_type == "yarn") {
    rc.scaling = ops::RopeScaling::kYarn;
    rc.yarn = s.yarn;
  }
  return rc;
}

}  // namespace tessera::models
