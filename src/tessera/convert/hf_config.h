// Hugging Face config.json <-> Tessera model keys, driven by the family tables (hf_family.h).
// `tessera convert` (hf_convert.h) uses both directions.
//
// Import. model_type picks the table; architectures must be its one class. Every field must be
// one the table reads (its fields, fixed fields and harmless fields), a generic PretrainedConfig
// field that changes nothing (token ids, generation defaults, ...), or one of the shared kinds
// below; any other field is refused, since it might change the model. A field that is absent or
// null takes transformers' default for the family, as transformers itself would.
// Shared kinds, switched on per table:
//   RoPE      rope_theta and rope_scaling at the top level (transformers 4's layout: the Hub's
//             Llama 2/3/3.1 and Mistral configs) or rope_parameters holding both (transformers 5).
//             default -> rope_type default; llama3 -> rope_type llama3.1 with the checkpoint's
//             factor, low/high_freq_factor and original_max_position_embeddings in the llama3_*
//             keys (Llama 3.1: 8, 1, 4, 8192; Llama 3.2: factor 32); yarn -> rope_type yarn with
//             rope_factor, beta_fast, beta_slow, original_max_position_embeddings, rope_truncate
//             and rope_attention_scaling=true (transformers' default attention factor
//             0.1 ln(factor) + 1). rope_theta -> rope_max_timescale (a whole number in Tessera).
//             Per layer type (Gemma 3): rope_parameters {full_attention: {rope_type default or
//             linear, rope_theta, factor}, sliding_attention: {rope_type default, rope_theta}}, or
//             transformers 4's rope_theta, rope_local_base_freq and rope_scaling (the full layers')
//             -> rope_max_timescale, rope_linear_scaling_factor, local_rope_max_timescale.
//   windows   kOptional: sliding_window (null: none) -> attention_type local_sliding +
//             sliding_window_size; kAlternating: layer_types sliding/full/sliding/... (or absent)
//             with sliding_window -> sliding_window_size (the family alternates); kFiveToOne: the
//             same with five sliding layers to one full (Gemma 3; sliding_window_pattern, when
//             given, 6); kNone: no window, and layer_types, when present, all full_attention.
//   MXFP4     quantization_config {quant_method: mxfp4, ...} on a table that allows it (GPT-OSS):
//             the experts' *_blocks / *_scales tensors are dequantised (hf_tensors.h).
// Refused, never ignored (Error kConfig naming the file, the field, its value and what Tessera
// supports): another model_type or architecture, a fixed field with another value, a RoPE kind
// the family's table does not list, other quantization, unknown fields.
//
// Export. The table of the config's decoder_block writes architectures, model_type, every field
// from its Tessera key, the fixed fields, RoPE and the window, torch_dtype, and the harmless
// fields of the source config.json when the checkpoint came from one (else transformers'
// defaults). Fixed Tessera keys must hold the table's values. The written config.json uses
// transformers 4's layout, which transformers 5 also reads.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "tessera/config/config.h"
#include "tessera/convert/hf_family.h"

namespace tessera::convert {

// A Hugging Face model's settings: its table, and every field that decides the weights and the
// forward pass, resolved (defaults applied) in Hugging Face's terms (rope_theta and rope_scaling,
// sliding_window and layer_types included), so two config.json files of one model compare equal.
struct HfModel {
  const HfFamily* family = nullptr;
  nlohmann::json fields = nlohmann::json::object();
  bool mxfp4 = false;  // the experts are stored as MXFP4 (import only)
  bool operator==(const HfModel& o) const { return family == o.family && fields == o.fields; }
  const std::string_view model_type() const { return family->model_type; }
  // "model_type llama: hidden_size 40, ..." for messages.
  std::string describe() const;
};

// Parses and checks the content of a config.json; `path` names the file in errors.
HfModel parse_hf_config(const nlohmann::json& config, const std::string& path);

// Reads and parses `path` (a config.json). Throws kIo when it cannot be read or is not JSON.
nlohmann::json read_json_file(const std::string& path);

// The body of model.yml: the Tessera config keys of the model, one "key: value" line each, with
// `compute_dtype` ("float32" | "bfloat16") as the dtype key.
std::string tessera_model_yaml(const HfModel& model, const std::string& compute_dtype);

// The Hugging Face settings of a finalized Tessera config. Throws kConfig for what the family's
// Hugging Face model cannot express (a decoder_block without a table, another MLP activation, a
// RoPE kind or window the family does not have, ...).
HfModel hf_model_from_tessera(const Config& cfg);

// config.json for transformers: architectures, model_type, the model's fields, the table's fixed
// fields, torch_dtype = `dtype` ("float32" | "bfloat16"). Fields Tessera does not model
// (max_position_embeddings, bos/eos/pad token ids, initializer_range, ...) are copied from
// `source`, the config.json the model was converted from (null when there is none);
// max_position_embeddings defaults to `max_positions` (at least the context RoPE scaling
// implies: 131072 for Llama 3.1's, factor x original for YaRN).
nlohmann::json hf_config_json(const HfModel& model, const std::string& dtype, const nlohmann::json& source,
                              int64_t max_positions);

}  // namespace tessera::convert
