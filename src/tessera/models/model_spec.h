// ModelSpec: the resolved dimensions and choices of a decoder, derived from the config once
// (model_spec_from_config, below) and read by the shared blocks (blocks.h). Names follow MaxText's
// derived keys. The dimensions are generic; the block options below them are set by the family
// (decoder.h) from its own defaults and the config's keys.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/config/config.h"
#include "tessera/core/dtype.h"
#include "tessera/ops/rope.h"

namespace tessera::models {

enum class NormKind { kRms, kLayer };  // RMSNorm, or LayerNorm with a bias
// How an MoE layer runs its experts (MaxText's sparse_matmul and capacity_factor): dropless over
// tokens sorted by expert, every expert on every token, or dropping what exceeds the capacity.
enum class MoePath { kDropless, kDense, kCapacity };

struct ModelSpec {
  std::string decoder_block = "llama2";
  int64_t emb_dim = 0;             // E
  int64_t num_query_heads = 0;     // H
  int64_t num_kv_heads = 0;        // K
  int64_t head_dim = 0;            // D
  int64_t mlp_dim = 0;             // F
  int64_t num_decoder_layers = 0;  // L
  int64_t vocab_size = 0;          // V
  double norm_eps = 1e-5;
  bool logits_via_embedding = false;        // tied unembedding
  bool normalize_embedding_logits = false;  // tied logits divided by sqrt(emb_dim)
  double rope_theta = 10000.0;
  std::string rope_type = "default";  // "default" | "llama3.1" | "yarn"
  ops::YarnRopeScaling yarn;          // rope_type "yarn"
  ops::Llama3RopeScaling llama3;      // rope_type "llama3.1" (Llama 3.1's values by default)
  int64_t sliding_window = 0;
  std::string mlp_activation = "silu";  // the MLP's activation (of the gate, when gated)

  // Block options (blocks.h), set by the family.
  NormKind norm = NormKind::kRms;
  bool gated_mlp = true;            // act(x·Wi0) * (x·Wi1), else act(x·Wi)
  bool attention_bias = false;      // biases on q, k and v
  bool attention_out_bias = false;  // a bias on the attention's output projection
  bool qk_norm = false;             // RMSNorm over each head's D of q and k, before RoPE
  bool mlp_bias = false;            // biases on the MLP's (and the experts') projections
  bool attention_sinks = false;     // one learned logit per query head in each softmax (GPT-OSS)
  // With window_cycle c > 0, layer l attends to everything when l % c == c - 1 and slides the window
  // otherwise (GPT-OSS and Gemma 2: c = 2, sliding first; Gemma 3: c = 6, five local then one
  // global); 0: every layer uses sliding_window.
  int64_t window_cycle = 0;
  // Gemma's options. The norms scale by gamma + norm_offset (Gemma's 1 + w: 1); embed_scale
  // multiplies the token embedding (Gemma: sqrt(E)); the outputs of the attention and of the MLP
  // are normalised before their residual adds when post_attention_norm / post_mlp_norm.
  double norm_offset = 0;
  double embed_scale = 0;  // 0: none
  bool post_attention_norm = false, post_mlp_norm = false;
  double attn_logits_soft_cap = 0;   // s = c tanh(s / c) in every attention softmax; 0: off
  double final_logits_soft_cap = 0;  // the output logits likewise; 0: off
  double query_scale = 0;            // of q·k; 0: 1 / sqrt(head_dim)
  double rope_linear_factor = 1;     // linear RoPE scaling of the global layers (1: none)
  double local_rope_theta = 0;       // > 0: the sliding layers rotate with this theta, unscaled
  // The gated MLP's clamps (GPT-OSS): gate <= limit, |up| <= limit, then + up_offset on up; 0: none.
  double mlp_limit = 0;
  double mlp_up_offset = 0;
  bool routed_bias = false;             // a bias on the router's logits
  bool rope = true;                     // rotary positions on q and k
  int64_t trainable_position_size = 0;  // learned absolute positions [P, E] added to the embedding (0: none)
  // Mixture of experts (blocks.h's moe), for the MoE families: each layer's MLP is num_experts
  // experts of width moe_mlp_dim, each token routed to num_experts_per_tok of them.
  int64_t num_experts = 1;  // 1: a dense MLP
  int64_t num_experts_per_tok = 1;
  int64_t moe_mlp_dim = 0;
  MoePath moe_path = MoePath::kDropless;
  double capacity_factor = -1;          // MoePath::kCapacity: the multiple of the balanced share kept
  double load_balance_loss_weight = 0;  // 0: no load-balance loss
  DType dtype = DType::kF32;            // compute dtype of activations and matmul inputs
  float z_loss = 0.0f;

  // Tensor parallelism: this rank builds the tp_rank-th of tp_size slices of the parameter axes in
  // tp_axes, those that logical_axis_rules put on the tensor axis (heads, q_heads, kv_heads, mlp,
  // vocab by default). The trainer fills all three with models::set_tensor_parallel; 1, 0 and
  // none for one device.
  int64_t tp_size = 1, tp_rank = 0;
  std::vector<std::string> tp_axes;

  // Batch geometry of one micro-step.
  int64_t batch = 0;  // B: sequences per device per micro-step
  int64_t seq = 0;    // T: max_target_length

  // Decoding (infer/graph_engine.cc): the blocks build an inference graph of one engine step over
  // seq rows (batch 1), each a token of a sequence in a KV-cache slot, against caches of `slots`
  // sequences of `max_length` positions. rows() == 0: the training graph.
  struct Decode {
    int64_t slots = 0;             // S
    int64_t max_length = 0;        // T of the caches (positions per slot)
    bool last_row_logits = false;  // logits of the step's last row only (a prefill chunk)
  };
  Decode decode;
  bool decoding() const { return decode.slots > 0; }

  // The sliding window of decoder layer `layer` (0: full attention).
  int64_t window_of(int64_t layer) const {
    return window_cycle > 0 && layer % window_cycle == window_cycle - 1 ? 0 : sliding_window;
  }
  // Whether layer `layer` rotates with the local RoPE table (local_rope_theta).
  bool local_rope(int64_t layer) const { return local_rope_theta > 0 && window_of(layer) > 0; }

  // Parameters of the whole model (every tensor-parallel slice), counted from the family's graph.
  int64_t num_params() const;
};

// The decoder a config asks for; throws kConfig naming the key when the model code cannot build it.
ModelSpec model_spec_from_config(const Config& cfg);

// The RoPE table's configuration of `spec` (theta, head dim, scaling) for positions
// 0 .. max_positions - 1: what training, the golden tests and decoding build their table from.
ops::RopeConfig rope_config(const ModelSpec& spec, int64_t max_positions);

}  // namespace tessera::models
