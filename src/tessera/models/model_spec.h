// ModelSpec: the resolved dimensions and choices of a decoder, derived from the config once
// (model_spec_from_config, below) and read by the model code. Names follow MaxText's derived keys.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/config/config.h"
#include "tessera/core/dtype.h"

namespace tessera::models {

struct ModelSpec {
  std::string decoder_block = "llama2";
  int64_t emb_dim = 0;              // E
  int64_t num_query_heads = 0;      // H
  int64_t num_kv_heads = 0;         // K
  int64_t head_dim = 0;             // D
  int64_t mlp_dim = 0;              // F
  int64_t num_decoder_layers = 0;   // L
  int64_t vocab_size = 0;           // V
  double norm_eps = 1e-5;
  bool logits_via_embedding = false;  // tied unembedding
  double rope_theta = 10000.0;
  std::string rope_type = "default";  // "default" | "llama3.1"
  int64_t sliding_window = 0;
  std::string mlp_activation = "silu";  // gate activation of the gated MLP
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

  int64_t num_params() const;
};

// The decoder a config asks for; throws kConfig naming the key when the model code cannot build it.
ModelSpec model_spec_from_config(const Config& cfg);

}  // namespace tessera::models
