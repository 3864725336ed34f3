// Hugging Face config.json <-> Tessera model keys, for the Llama family (LlamaForCausalLM,
// MistralForCausalLM). `tessera convert` (convert/hf_convert.h) uses both directions.
//
// Field map (config.json -> Tessera key):
//   model_type llama | mistral          decoder_block llama2 | mistral
//   hidden_size                         base_emb_dim
//   num_attention_heads                 base_num_query_heads
//   num_key_value_heads                 base_num_kv_heads
//   head_dim                            head_dim
//   intermediate_size                   base_mlp_dim
//   num_hidden_layers                   base_num_decoder_layers
//   vocab_size                          vocab_size
//   rms_norm_eps                        normalization_layer_epsilon
//   rope_theta                          rope_max_timescale (an integer in Tessera)
//   rope_scaling llama3                 rope_type llama3.1 (factor 8, low 1, high 4, context 8192)
//   tie_word_embeddings                 logits_via_embedding
//   sliding_window (Mistral; null=none) attention_type local_sliding + sliding_window_size
//   hidden_act silu                     mlp_activations [silu, linear]
// Both config layouts are read: transformers 4's (rope_theta and rope_scaling at the top level,
// torch_dtype; what the Hub's Llama 2/3/3.1 and Mistral configs hold) and transformers 5's
// (rope_parameters holding rope_theta and rope_type, dtype). A field that is absent takes
// transformers' default for the family, as transformers itself would.
//
// Refused, never ignored (Error kConfig naming the file, the field, its value and what Tessera
// supports): another model_type or architecture; rope scaling other than Llama 3.1's with its
// published constants (Tessera's rope_type=llama3.1 fixes them, as MaxText does: Llama 3.2's
// factor 32 is refused); attention or MLP biases; another activation; dropout; quantization;
// and any field this file does not know, since it might change the model.
// The written config.json uses transformers 4's layout, which transformers 5 also reads.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "tessera/config/config.h"

namespace tessera::convert {

// Llama 3.1's RoPE scaling, the only one Tessera builds (ops::Llama3RopeScaling's defaults).
inline constexpr double kLlama3RopeFactor = 8.0;
inline constexpr double kLlama3LowFreqFactor = 1.0;
inline constexpr double kLlama3HighFreqFactor = 4.0;
inline constexpr int64_t kLlama3OriginalContext = 8192;

// The settings of a Llama-family config.json that decide the weights and the forward pass.
struct HfLlamaConfig {
  std::string model_type = "llama";  // "llama" | "mistral"
  int64_t hidden_size = 0;           // E
  int64_t intermediate_size = 0;     // F
  int64_t num_hidden_layers = 0;     // L
  int64_t num_attention_heads = 0;   // H
  int64_t num_key_value_heads = 0;   // K
  int64_t head_dim = 0;              // D
  int64_t vocab_size = 0;            // V
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  bool llama3_rope_scaling = false;  // rope_type llama3 with Llama 3.1's constants
  bool tie_word_embeddings = false;
  int64_t sliding_window = 0;  // 0: none (Mistral's null); Llama has none
  bool operator==(const HfLlamaConfig&) const = default;
};

// Parses and checks the content of a config.json; `path` names the file in errors.
HfLlamaConfig parse_hf_config(const nlohmann::json& config, const std::string& path);

// Reads and parses `path` (a config.json). Throws kIo when it cannot be read or is not JSON.
nlohmann::json read_json_file(const std::string& path);

// The body of model.yml: the Tessera config keys of the model, one "key: value" line each, with
// `compute_dtype` ("float32" | "bfloat16") as the dtype key.
std::string tessera_model_yaml(const HfLlamaConfig& hf, const std::string& compute_dtype);

// The Hugging Face settings of a finalized Tessera config (its derived dimensions). Throws kConfig
// for what LlamaForCausalLM / MistralForCausalLM cannot express (another decoder block or MLP
// activation, a sliding window on decoder_block llama2, rope_type yarn, ...).
HfLlamaConfig hf_config_from_tessera(const Config& cfg);

// config.json for transformers: architectures, model_type, the fields of `hf`, hidden_act,
// torch_dtype = `dtype` ("float32" | "bfloat16"). Fields Tessera does not model
// (max_position_embeddings, bos/eos/pad token ids, initializer_range, ...) are copied from
// `source`, the config.json the model was converted from (null when there is none);
// max_position_embeddings defaults to `max_positions` (131072 for Llama 3.1 scaling, whose
// original context is 8192).
nlohmann::json hf_config_json(const HfLlamaConfig& hf, const std::string& dtype, const nlohmann::json& source,
                              int64_t max_positions);

}  // namespace tessera::convert
