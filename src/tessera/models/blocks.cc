// The shared blocks (blocks.h).
#include "tessera/models/blocks.h"

#include <cmath>

#include "tessera/core/error.h"
#include "tessera/ops/activation.h"
#include "tessera/ops/moe.h"

namespace tessera::models {

using graph::ValueId;

Blocks::Blocks(graph::Graph& g, const ModelSpec& s) : g_(g), s_(s) {
  const int64_t N = s.batch * s.seq;
  if (s.decoding()) {
    TESSERA_ASSERT(s.batch == 1 && s.tp_size == 1);
    g.set_inference();
    in_.tokens = g.input("inputs", Shape{N}, DType::kI32);
    in_.positions = g.input("inputs_position", Shape{1, N}, DType::kI32);
    in_.slots = g.input("decode_slots", Shape{N}, DType::kI32);
    in_.targets = in_.segment_ids = graph::kNoValue;
    if (s.decode.last_row_logits) in_.logit_rows = g.input("logit_rows", Shape{1}, DType::kI32);
    return;
  }
  in_.tokens = g.input("inputs", Shape{N}, DType::kI32);
  in_.targets = g.input("targets", Shape{N}, DType::kI32);
  in_.positions = g.input("inputs_position", Shape{s.batch, s.seq}, DType::kI32);
  in_.segment_ids = g.input("inputs_segmentation", Shape{s.batch, s.seq}, DType::kI32);
}

ValueId Blocks::w(ValueId param) {
  return g_.compute_view(param, s_.dtype);
}

ValueId Blocks::norm(ValueId x, const std::string& name) {
  ValueId gamma = g_.param(name + ".scale", Shape{s_.emb_dim}, {"norm"}, /*weight_decay=*/false);
  const auto eps = static_cast<float>(s_.norm_eps);
  if (s_.norm == NormKind::kRms)
    return g_.rms_norm(x, gamma, eps, name, 0, static_cast<float>(s_.norm_offset));
  ValueId beta = g_.param(name + ".bias", Shape{s_.emb_dim}, {"norm"}, /*weight_decay=*/false);
  return g_.layer_norm(x, gamma, beta, eps, name);
}

Blocks::Dense Blocks::dense(int64_t in, int64_t out, const std::string& in_axis, const std::string& out_axis,
                            const std::string& name, bool bias) {
  Dense d{.name = name, .kernel = kernel(name + ".kernel", in, out, in_axis, out_axis)};
  if (bias) d.bias = g_.param(name + ".bias", Shape{out}, {out_axis}, /*weight_decay=*/false);
  return d;
}

ValueId Blocks::kernel(const std::string& name, int64_t in, int64_t out, const std::string& in_axis,
                       const std::string& out_axis) {
  if (!s_.decoding()) return g_.param(name, Shape{in, out}, {in_axis, out_axis});
  const ValueId k = g_.param(name, Shape{out, in}, {out_axis, in_axis});  // [out, in]: see graph.h
  g_.value(k).transposed = true;
  return k;
}

ValueId Blocks::product(ValueId x, ValueId kernel, const std::string& name, const std::string& ckpt) {
  return g_.matmul(x, w(kernel), name, ckpt, /*trans_b=*/g_.value(kernel).transposed);
}

ValueId Blocks::apply(const Dense& d, ValueId x, const std::string& ckpt) {
  if (d.bias == graph::kNoValue) return product(x, d.kernel, d.name, ckpt);
  ValueId y = product(x, d.kernel, d.name + ".matmul", "");
  ValueId yb = g_.bias_add(y, d.bias, d.name);
  g_.nodes().back().ckpt_name = ckpt;  // the remat name goes on the projection's final value
  return yb;
}

// The parameters first, in MaxText's order (query, key, value, out), then the computation.
ValueId Blocks::attention(ValueId x, const std::string& p) {
  const int64_t E = s_.emb_dim, H = s_.num_query_heads, K = s_.num_kv_heads, D = s_.head_dim;
  const bool b = s_.attention_bias;
  const Dense wq = dense(E, H * D, "embed", "q_heads", p + "query", b);
  const Dense wk = dense(E, K * D, "embed", "kv_heads", p + "key", b);
  const Dense wv = dense(E, K * D, "embed", "kv_heads", p + "value", b);
  const Dense wo = dense(H * D, E, "heads", "embed", p + "out", s_.attention_out_bias);
  ValueId q = apply(wq, x, "query_proj");  // [N, H*D]
  ValueId k = apply(wk, x, "key_proj");    // [N, K*D]
  ValueId v = apply(wv, x, "value_proj");  // [N, K*D]
  if (s_.qk_norm) {                        // per head over D, scales [D] shared by the heads
    const auto eps = static_cast<float>(s_.norm_eps);
    ValueId gq = g_.param(p + "query_norm.scale", Shape{D}, {"norm"}, /*weight_decay=*/false);
    ValueId gk = g_.param(p + "key_norm.scale", Shape{D}, {"norm"}, /*weight_decay=*/false);
    const auto offset = static_cast<float>(s_.norm_offset);
    q = g_.rms_norm(q, gq, eps, p + "query_norm", D, offset);
    k = g_.rms_norm(k, gk, eps, p + "key_norm", D, offset);
  }
  const int B = static_cast<int>(s_.batch), T = static_cast<int>(s_.seq);
  if (s_.rope) {
    const bool local = s_.local_rope(g_.layer());
    q = g_.rope(q, in_.positions, B, T, static_cast<int>(H), static_cast<int>(D), p + "query_rope", local);
    k = g_.rope(k, in_.positions, B, T, static_cast<int>(K), static_cast<int>(D), p + "key_rope", local);
  }
  const graph::AttentionAttrs a{.batch = B,
                                .seq = T,
                                .heads = static_cast<int>(H),
                                .kv_heads = static_cast<int>(K),
                                .head_dim = static_cast<int>(D),
                                .sliding_window = s_.window_of(g_.layer()),
                                .scale = static_cast<float>(s_.query_scale),
                                .logits_soft_cap = static_cast<float>(s_.attn_logits_soft_cap)};
  const ValueId sinks = s_.attention_sinks
                            ? g_.param(p + "sinks", Shape{H}, {"q_heads"}, /*weight_decay=*/false)
                            : graph::kNoValue;
  ValueId o;  // [N, H*D]
  if (s_.decoding()) {
    const Shape cache{s_.decode.slots, s_.decode.max_length, K, D};
    const ValueId kc = g_.cache(p + "k_cache", cache, s_.dtype),
                  vc = g_.cache(p + "v_cache", cache, s_.dtype);
    o = g_.cached_attention(q, k, v, kc, vc, in_.positions, in_.slots, a, p + "attention", sinks);
  } else {
    o = g_.attention(q, k, v, in_.segment_ids, a, p + "attention", sinks);
  }
  const bool last_layer = g_.layer() == s_.num_decoder_layers - 1;
  if (in_.logit_rows != graph::kNoValue && last_layer && rows(o) > 1)
    o = logit_row(o, p + "attention.logit_row");  // [1, H*D]: the other rows only fed the cache
  return apply(wo, o, "out_proj");                // [N, E]
}

ValueId Blocks::residual(ValueId x, ValueId h, const std::string& name) {
  if (rows(h) < rows(x)) x = logit_row(x, name + ".logit_row");
  return g_.add(x, h, name);
}

ValueId Blocks::logit_row(ValueId x, const std::string& name) {
  TESSERA_ASSERT(in_.logit_rows != graph::kNoValue);
  return g_.embedding(x, in_.logit_rows, s_.dtype, name);
}

ValueId Blocks::mlp(ValueId x, const std::string& p) {
  const int64_t E = s_.emb_dim, F = s_.mlp_dim;
  const int act = static_cast<int>(ops::activation_from_name(s_.mlp_activation));
  const bool b = s_.mlp_bias;
  if (s_.gated_mlp) {
    const Dense wi0 = dense(E, F, "embed", "mlp", p + "wi_0", b);
    const Dense wi1 = dense(E, F, "embed", "mlp", p + "wi_1", b);
    const Dense wo = dense(F, E, "mlp", "embed", p + "wo", b);
    ValueId gate = apply(wi0, x, "mlpwi_0");                                 // [N, F]
    ValueId up = apply(wi1, x, "mlpwi_1");                                   // [N, F]
    return apply(wo, g_.glu(act, gate, up, p + "glu", "mlp_act"), "mlpwo");  // [N, E]
  }
  const Dense wi = dense(E, F, "embed", "mlp", p + "wi", b);
  const Dense wo = dense(F, E, "mlp", "embed", p + "wo", b);
  ValueId h = g_.activation(act, apply(wi, x, "mlpwi"), p + "act", "mlp_act");  // [N, F]
  return apply(wo, h, "mlpwo");                                                 // [N, E]
}

ValueId Blocks::moe(ValueId x, const std::string& p) {
  const int64_t E = s_.emb_dim, F = s_.moe_mlp_dim, X = s_.num_experts, k = s_.num_experts_per_tok;
  const int64_t N = rows(x);  // B*T, or 1 in a prefill's narrowed last layer
  const int act = static_cast<int>(ops::activation_from_name(s_.mlp_activation));
  TESSERA_ASSERT(s_.gated_mlp);  // the experts are gated MLPs
  ValueId gate = g_.param(p + "gate.kernel", Shape{E, X}, {"embed", "moe_router"});
  const ValueId gate_bias = s_.routed_bias
                                ? g_.param(p + "gate.bias", Shape{X}, {"moe_router"}, /*weight_decay=*/false)
                                : graph::kNoValue;
  ValueId wi0 = g_.param(p + "wi_0", Shape{X, E, F}, {"exp", "embed_moe", "mlp_moe"});
  ValueId wi1 = g_.param(p + "wi_1", Shape{X, E, F}, {"exp", "embed_moe", "mlp_moe"});
  ValueId wo = g_.param(p + "wo", Shape{X, F, E}, {"exp", "mlp_moe", "embed_moe"});
  ValueId b0 = graph::kNoValue, b1 = graph::kNoValue, bo = graph::kNoValue;
  if (s_.mlp_bias) {  // MaxText's wi_0_bias, wi_1_bias [X, F] and wo_bias [X, E]
    b0 = g_.param(p + "wi_0_bias", Shape{X, F}, {"exp", "mlp_moe"}, /*weight_decay=*/false);
    b1 = g_.param(p + "wi_1_bias", Shape{X, F}, {"exp", "mlp_moe"}, /*weight_decay=*/false);
    bo = g_.param(p + "wo_bias", Shape{X, E}, {"exp", "embed_moe"}, /*weight_decay=*/false);
  }
  graph::MoeAttrs a{.experts = X,
                    .k = k,
                    .batch = s_.decoding() ? 1 : s_.batch,  // decoding: one row of N tokens
                    .seq = s_.decoding() ? N : s_.seq,
                    .dense = s_.moe_path == MoePath::kDense,
                    .lb_weight = s_.decoding() ? 0.0 : s_.load_balance_loss_weight};
  // Decoding drops no token (as Hugging Face's models): capacity dropping is a training choice.
  if (s_.moe_path == MoePath::kCapacity && !s_.decoding())
    a.capacity = ops::moe_capacity(s_.seq, k, X, s_.capacity_factor);
  ValueId logits = g_.matmul(x, w(gate), p + "gate", "router_logits");  // [N, X]
  if (gate_bias != graph::kNoValue) logits = g_.bias_add(logits, gate_bias, p + "gate_biased");
  const graph::Graph::MoeRouting r = g_.moe_route(logits, a, p + "route");
  if (a.lb_weight > 0) g_.moe_load_balance(logits, r.experts, a, p + "load_balance");
  const graph::Graph::MoeRows rows = g_.moe_dispatch(x, r.experts, a, p + "dispatch");  // [R, E]
  const int64_t useful = N * k;
  // x·W[e] (+ b[e]) on the grouped rows; the remat name goes on the projection's final value.
  auto project = [&](ValueId in, ValueId kernel, ValueId bias, const std::string& name,
                     const std::string& ckpt) {
    if (bias == graph::kNoValue)
      return g_.grouped_matmul(in, w(kernel), rows.group_sizes, useful, p + name, ckpt);
    ValueId y = g_.grouped_matmul(in, w(kernel), rows.group_sizes, useful, p + name + ".matmul");
    y = g_.grouped_bias_add(y, bias, rows.group_sizes, p + name);
    g_.nodes().back().ckpt_name = ckpt;
    return y;
  };
  ValueId h0 = project(rows.xs, wi0, b0, "wi_0", "mlpwi_0");  // [R, F]
  ValueId h1 = project(rows.xs, wi1, b1, "wi_1", "mlpwi_1");  // [R, F]
  ValueId h = g_.glu(act, h0, h1, p + "glu", "mlp_act", static_cast<float>(s_.mlp_limit),
                     static_cast<float>(s_.mlp_up_offset));
  ValueId ys = project(h, wo, bo, "wo", "mlpwo");                     // [R, E]
  return g_.moe_combine(ys, r.weights, rows.rows, a, p + "combine");  // [N, E]
}

ValueId Blocks::embed() {
  embedding_ = g_.param("token_embedder.embedding", Shape{s_.vocab_size, s_.emb_dim}, {"vocab", "embed"});
  ValueId x = g_.embedding(embedding_, in_.tokens, s_.dtype, "decoder.embed");  // [N, E]
  if (s_.embed_scale > 0) {  // in the compute dtype, as Gemma multiplies by a normaliser of x's dtype
    const auto f = static_cast<float>(s_.embed_scale);
    const float a = s_.dtype == DType::kBF16 ? round_to_bf16(f) : f;
    x = g_.scale(x, a, "decoder.embed_scaled");
  }
  if (s_.trainable_position_size <= 0) return x;
  const int64_t longest = s_.decoding() ? s_.decode.max_length : s_.seq;
  TESSERA_CHECK(longest <= s_.trainable_position_size, ErrorKind::kConfig,
                "max_target_length={} is longer than trainable_position_size={}, the learned positions",
                longest, s_.trainable_position_size);
  ValueId pos = g_.param("decoder.position_embedder.embedding", Shape{s_.trainable_position_size, s_.emb_dim},
                         {"vocab_position", "embed"});
  return g_.add(x, g_.embedding(pos, in_.positions, s_.dtype, "decoder.position_embed"), "decoder.embed_sum");
}

void Blocks::logits_and_loss(ValueId x) {
  TESSERA_ASSERT(embedding_ != graph::kNoValue);
  // A prefill chunk: only its last row's logits are used (x is that row already when the last
  // layer was narrowed).
  if (in_.logit_rows != graph::kNoValue && rows(x) > 1) x = logit_row(x, "decoder.logit_rows");  // [1, E]
  // The logits are "decoder.logits": the product, or the last of the ops after it (the tied
  // logits divided by sqrt(E), the soft cap), the product then "decoder.logits_product".
  const bool normalize = s_.logits_via_embedding && s_.normalize_embedding_logits;
  const bool capped = s_.final_logits_soft_cap > 0;
  ValueId logits;
  const std::string product_name = normalize || capped ? "decoder.logits_product" : "decoder.logits";
  if (s_.logits_via_embedding) {
    logits = g_.matmul(x, w(embedding_), product_name, "", /*trans_b=*/true);  // [N, V]
  } else {
    ValueId wu = kernel("decoder.logits_dense.kernel", s_.emb_dim, s_.vocab_size, "embed", "vocab");
    logits = product(x, wu, product_name, "");  // [N, V]
  }
  if (normalize) {
    const auto f = static_cast<float>(1.0 / std::sqrt(static_cast<double>(s_.emb_dim)));
    logits = g_.scale(logits, s_.dtype == DType::kBF16 ? round_to_bf16(f) : f,
                      capped ? "decoder.logits_normalized" : "decoder.logits");
  }
  if (capped) logits = g_.soft_cap(logits, static_cast<float>(s_.final_logits_soft_cap), "decoder.logits");
  if (s_.decoding()) return g_.add_output(logits);
  g_.set_loss(g_.cross_entropy(logits, in_.targets, s_.z_loss, "loss"));
}

}  // namespace tessera::models
