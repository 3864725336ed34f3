// The shared blocks every family composes (MaxText's layers/): norms, dense projections with
// optional biases, attention, gated and plain MLPs, embeddings and the output projection. A family
// (llama.cc, gpt3.cc, ...) is a short decoder loop over these, its options in ModelSpec. Shapes
// (STYLE.md 4): N = B*T tokens, E emb_dim, H query heads, K kv heads, D head_dim, F mlp_dim,
// V vocab_size. Parameters are stored [in, out] with MaxText's logical axis names, so tensor
// parallelism and FSDP follow logical_axis_rules (graph/sharding.h) without code here.
#pragma once

#include <string>

#include "tessera/graph/graph.h"
#include "tessera/models/model_spec.h"

namespace tessera::models {

// The graph's inputs. A decoding graph (ModelSpec::decoding()) has no targets or segment ids; it
// has the KV-cache slot of each row [N] and, for last-row logits, the row to project [1].
struct DecoderInputs {
  graph::ValueId tokens, targets, positions, segment_ids;
  graph::ValueId slots = graph::kNoValue, logit_rows = graph::kNoValue;
};

class Blocks {
 public:
  Blocks(graph::Graph& g, const ModelSpec& s);
  graph::Graph& graph() { return g_; }
  const ModelSpec& spec() const { return s_; }
  // The batch inputs: tokens, targets [N]; positions, segment ids [B, T] (int32).
  const DecoderInputs& inputs() const { return in_; }

  // The matmul operand of a parameter: its compute-dtype copy (the f32 master in f32).
  graph::ValueId w(graph::ValueId param);

  // The spec's norm (RMSNorm, or LayerNorm with a bias) of x [N, E]; `name` + ".scale" / ".bias".
  graph::ValueId norm(graph::ValueId x, const std::string& name);
  // A projection's parameters, W [in, out] and (when `bias`) b [out]: `name` + ".kernel" / ".bias".
  struct Dense {
    std::string name;
    graph::ValueId kernel = graph::kNoValue, bias = graph::kNoValue;
  };
  Dense dense(int64_t in, int64_t out, const std::string& in_axis, const std::string& out_axis,
              const std::string& name, bool bias);
  // x [N, in] · W (+ b); `ckpt` names the result for the remat policies.
  graph::ValueId apply(const Dense& d, graph::ValueId x, const std::string& ckpt);
  // A projection kernel W [in, out]; in a decoding graph stored [out, in] (Value::transposed), the
  // layout small-M products stream.
  graph::ValueId kernel(const std::string& name, int64_t in, int64_t out, const std::string& in_axis,
                        const std::string& out_axis);
  // x [N, in] · W for a kernel of kernel() in either layout.
  graph::ValueId product(graph::ValueId x, graph::ValueId kernel, const std::string& name,
                         const std::string& ckpt);
  // Causal self-attention of x [N, E] -> [N, E]: q/k/v/out projections (biases when
  // spec.attention_bias / attention_out_bias), QK-norm when spec.qk_norm, RoPE when spec.rope,
  // GQA, the spec's sliding window. `p` ends with '.'. Decoding: against the layer's KV caches
  // `p`k_cache / v_cache (graph.h's cached_attention).
  // A prefill chunk that wants its last row's logits only (spec.decode.last_row_logits) runs its
  // last layer's output projection and everything after it on that row: the attention result is
  // narrowed to the row before the projection, and residual() narrows the stream to match.
  graph::ValueId attention(graph::ValueId x, const std::string& p);
  // The residual sum x + h; x is narrowed to the logit row first when attention() narrowed h.
  graph::ValueId residual(graph::ValueId x, graph::ValueId h, const std::string& name);
  // x [N, E] -> [N, E]: gated act(x·Wi0) * (x·Wi1) · Wo when spec.gated_mlp, else act(x·Wi + bi)·Wo + bo
  // (biases when spec.mlp_bias).
  graph::ValueId mlp(graph::ValueId x, const std::string& p);
  // A mixture-of-experts MLP of x [N, E] -> [N, E] (MaxText's RoutedMoE): router logits x·Wg
  // [E, X], each token's top-k experts with softmax weights over the chosen, the gated expert MLPs
  // act(x·Wi0[e]) * (x·Wi1[e]) · Wo[e] on the tokens routed to e (spec.moe_path: dropless sorted
  // rows and grouped matmuls, every expert on every token, or capacity dropping), summed with the
  // routing weights. Adds the layer's load-balance loss when spec.load_balance_loss_weight > 0.
  graph::ValueId moe(graph::ValueId x, const std::string& p);
  // The token embedding [V, E] looked up by the tokens (plus the learned positions [P, E] when
  // spec.trainable_position_size > 0) -> [N, E] in the compute dtype.
  graph::ValueId embed();
  // The final projection x [N, E] -> logits [N, V] (through the embedding when tied), and the loss.
  // Decoding: the logits (of the last row only, when spec.decode.last_row_logits) are the graph's
  // output "decoder.logits", and there is no loss.
  void logits_and_loss(graph::ValueId x);

 private:
  graph::Graph& g_;
  const ModelSpec& s_;
  DecoderInputs in_{};
  graph::ValueId embedding_ = graph::kNoValue;

  int64_t rows(graph::ValueId x) const { return g_.value(x).shape[0]; }
  // x [N, ...] -> its logit row [1, ...] (a row gather by in_.logit_rows).
  graph::ValueId logit_row(graph::ValueId x, const std::string& name);
};

}  // namespace tessera::models
