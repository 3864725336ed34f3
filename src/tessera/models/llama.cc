#include "tessera/models/llama.h"

#include <fmt/format.h>

#include "tessera/core/error.h"
#include "tessera/ops/activation.h"

namespace tessera::models {

using graph::Graph;
using graph::ValueId;

namespace {

struct Block {
  Graph& g;
  const ModelSpec& s;
  ValueId positions, segment_ids;

  ValueId w(ValueId param) { return g.compute_view(param, s.dtype); }

  // The whole model's shapes: under tensor parallelism graph/sharding.h gives each rank its heads.
  ValueId attention(ValueId x, const std::string& p) {
    int64_t E = s.emb_dim, H = s.num_query_heads, K = s.num_kv_heads, D = s.head_dim;
    ValueId wq = g.param(p + "query.kernel", Shape{E, H * D}, {"embed", "q_heads"});
    ValueId wk = g.param(p + "key.kernel", Shape{E, K * D}, {"embed", "kv_heads"});
    ValueId wv = g.param(p + "value.kernel", Shape{E, K * D}, {"embed", "kv_heads"});
    ValueId wo = g.param(p + "out.kernel", Shape{H * D, E}, {"heads", "embed"});
    ValueId q = g.matmul(x, w(wq), p + "query", "query_proj");   // [N, H*D]
    ValueId k = g.matmul(x, w(wk), p + "key", "key_proj");       // [N, K*D]
    ValueId v = g.matmul(x, w(wv), p + "value", "value_proj");   // [N, K*D]
    const int B = static_cast<int>(s.batch), T = static_cast<int>(s.seq);
    q = g.rope(q, positions, B, T, static_cast<int>(H), static_cast<int>(D), p + "query_rope");
    k = g.rope(k, positions, B, T, static_cast<int>(K), static_cast<int>(D), p + "key_rope");
    const graph::AttentionAttrs a{.batch = B, .seq = T, .heads = static_cast<int>(H), .kv_heads = static_cast<int>(K),
                                  .head_dim = static_cast<int>(D), .sliding_window = s.sliding_window};
    ValueId o = g.attention(q, k, v, segment_ids, a, p + "attention");  // [N, H*D]
    return g.matmul(o, w(wo), p + "out", "out_proj");                   // [N, E]
  }

  ValueId mlp(ValueId x, const std::string& p, int activation) {
    const int64_t E = s.emb_dim, F = s.mlp_dim;
    ValueId wi0 = g.param(p + "wi_0.kernel", Shape{E, F}, {"embed", "mlp"});
    ValueId wi1 = g.param(p + "wi_1.kernel", Shape{E, F}, {"embed", "mlp"});
    ValueId wo = g.param(p + "wo.kernel", Shape{F, E}, {"mlp", "embed"});
    ValueId gate = g.matmul(x, w(wi0), p + "wi_0", "mlpwi_0");  // [N, F]
    ValueId up = g.matmul(x, w(wi1), p + "wi_1", "mlpwi_1");    // [N, F]
    ValueId h = g.glu(activation, gate, up, p + "glu", "mlp_act");
    return g.matmul(h, w(wo), p + "wo", "mlpwo");  // [N, E]
  }

  ValueId norm(ValueId x, const std::string& name) {
    ValueId gamma = g.param(name + ".scale", Shape{s.emb_dim}, {"norm"}, /*weight_decay=*/false);
    return g.rms_norm(x, gamma, static_cast<float>(s.norm_eps), name);
  }
};

}  // namespace

namespace {

// Tensor parallelism splits whole heads, MLP columns and vocabulary rows (graph.h); refuses a split
// that does not divide, naming the dimension, and rules that split the heads of q, k, v and the out
// projection differently.
void apply_tensor_parallel(Graph& g, const ModelSpec& s) {
  if (s.tp_size <= 1) return;
  graph::TensorParallel tp{.size = s.tp_size, .rank = s.tp_rank, .axes = s.tp_axes};
  const int64_t q = tp.ways("q_heads");
  if (q != tp.ways("heads") || q != tp.ways("kv_heads"))
    fail(ErrorKind::kConfig,
         "logical_axis_rules split heads, q_heads and kv_heads differently over the tensor axis ({}, {}, {} "
         "ways): "
         "the attention of a tensor rank needs its own query heads with their key/value heads",
         tp.ways("heads"), q, tp.ways("kv_heads"));
  auto check = [&](const char* axis, const char* key, int64_t dim) {
    if (tp.ways(axis) > 1 && dim % tp.size != 0)
      fail(ErrorKind::kConfig,
           "tensor parallelism {}: {}={} is not divisible by {} ({} is split over the tensor axis)", tp.size,
           key, dim, tp.size, axis);
  };
  check("q_heads", "num_query_heads", s.num_query_heads);
  check("kv_heads", "num_kv_heads", s.num_kv_heads);
  check("mlp", "mlp_dim", s.mlp_dim);
  check("vocab", "vocab_size", s.vocab_size);
  g.set_tensor_parallel(std::move(tp));
}

}  // namespace

DecoderInputs build_llama(Graph& g, const ModelSpec& s) {
  if (s.decoder_block != "llama2" && s.decoder_block != "mistral" && s.decoder_block != "default")
    fail(ErrorKind::kConfig, "decoder_block '{}' is not built by Tessera yet (available: llama2, mistral)",
         s.decoder_block);
  apply_tensor_parallel(g, s);
  const int64_t N = s.batch * s.seq;
  DecoderInputs in;
  in.tokens = g.input("inputs", Shape{N}, DType::kI32);
  in.targets = g.input("targets", Shape{N}, DType::kI32);
  in.positions = g.input("inputs_position", Shape{s.batch, s.seq}, DType::kI32);
  in.segment_ids = g.input("inputs_segmentation", Shape{s.batch, s.seq}, DType::kI32);

  ValueId emb = g.param("token_embedder.embedding", Shape{s.vocab_size, s.emb_dim}, {"vocab", "embed"});
  ValueId x = g.embedding(emb, in.tokens, s.dtype, "decoder.embed");  // [N, E]
  Block blk{g, s, in.positions, in.segment_ids};
  const int act = static_cast<int>(ops::activation_from_name(s.mlp_activation));
  for (int64_t l = 0; l < s.num_decoder_layers; ++l) {
    g.set_layer(static_cast<int>(l));
    const std::string p = fmt::format("decoder.layers_{}.", l);
    ValueId h = blk.norm(x, p + "pre_self_attention_layer_norm");
    x = g.add(x, blk.attention(h, p + "self_attention."), p + "attention_residual");
    h = blk.norm(x, p + "post_self_attention_layer_norm");
    x = g.add(x, blk.mlp(h, p + "mlp.", act), p + "mlp_residual");
  }
  g.set_layer(-1);
  x = blk.norm(x, "decoder.decoder_norm");
  ValueId logits;
  if (s.logits_via_embedding) {
    logits = g.matmul(x, g.compute_view(emb, s.dtype), "decoder.logits", "", /*trans_b=*/true);  // [N, V]
  } else {
    ValueId wu = g.param("decoder.logits_dense.kernel", Shape{s.emb_dim, s.vocab_size}, {"embed", "vocab"});
    logits = g.matmul(x, g.compute_view(wu, s.dtype), "decoder.logits");  // [N, V]
  }
  g.set_loss(g.cross_entropy(logits, in.targets, s.z_loss, "loss"));
  return in;
}

int64_t ModelSpec::num_params() const {
  const int64_t E = emb_dim, H = num_query_heads, K = num_kv_heads, D = head_dim, F = mlp_dim;
  int64_t per_layer = E * H * D * 2 + E * K * D * 2 + 3 * E * F + 2 * E;
  return vocab_size * E * (logits_via_embedding ? 1 : 2) + num_decoder_layers * per_layer + E;
}

}  // namespace tessera::models
