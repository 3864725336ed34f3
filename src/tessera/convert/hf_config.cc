#include "tessera/convert/hf_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string_view>

#include "tessera/core/error.h"
#include "tessera/core/file.h"

namespace tessera::convert {

namespace {

using nlohmann::json;

// Llama 3.1's context (its config.json's max_position_embeddings): 16 x the original 8192.
constexpr int64_t kLlama31Context = 131072;

// Fields that neither change the weights nor the forward pass: generic PretrainedConfig
// attributes (generation defaults of transformers 4 included), token ids, sizes used for caches.
constexpr std::string_view kHarmlessFields =
    "_name_or_path _commit_hash _attn_implementation _attn_implementation_autoset "
    "transformers_version architectures model_type dtype torch_dtype use_bfloat16 bos_token_id "
    "eos_token_id pad_token_id sep_token_id decoder_start_token_id max_position_embeddings "
    "initializer_range use_cache pretraining_tp tokenizer_class return_dict output_hidden_states "
    "output_attentions torchscript tf_legacy_loss chunk_size_feed_forward id2label label2id "
    "num_labels problem_type finetuning_task prefix task_specific_params max_length min_length "
    "do_sample early_stopping num_beams num_beam_groups diversity_penalty temperature top_k top_p "
    "typical_p repetition_penalty length_penalty no_repeat_ngram_size "
    "encoder_no_repeat_ngram_size bad_words_ids num_return_sequences output_scores "
    "return_dict_in_generate forced_bos_token_id forced_eos_token_id remove_invalid_values "
    "exponential_decay_length_penalty suppress_tokens begin_suppress_tokens tie_encoder_decoder "
    "cross_attention_hidden_size";

// The fields parse_hf_config reads; with kHarmlessFields, everything a config may hold.
constexpr std::string_view kModelFields =
    "hidden_size intermediate_size num_hidden_layers num_attention_heads num_key_value_heads "
    "head_dim vocab_size rms_norm_eps rope_theta rope_scaling rope_parameters tie_word_embeddings "
    "sliding_window hidden_act attention_bias mlp_bias attention_dropout is_encoder_decoder "
    "is_decoder add_cross_attention pruned_heads quantization_config";

// Whether the space-separated `list` holds `key`.
bool listed(std::string_view list, std::string_view key) {
  for (size_t pos = 0; pos < list.size();) {
    const size_t end = std::min(list.find(' ', pos), list.size());
    if (list.substr(pos, end - pos) == key) return true;
    pos = end + 1;
  }
  return false;
}

// Reads config.json fields with errors that name the file and the field.
struct Reader {
  const json& j;
  const std::string& path;

  bool has(const char* key) const { return j.contains(key) && !j[key].is_null(); }

  [[noreturn]] void refuse(const char* key, const std::string& why) const {
    fail(ErrorKind::kConfig, "{}: \"{}\": {} is {}", path, key, j.contains(key) ? j[key].dump() : "absent",
         why);
  }

  int64_t integer(const char* key, int64_t fallback = -1) const {
    if (!has(key)) {
      if (fallback >= 0) return fallback;
      refuse(key, "required (a positive integer)");
    }
    if (!j[key].is_number_integer() || j[key].get<int64_t>() < 1) refuse(key, "not a positive integer");
    return j[key].get<int64_t>();
  }
  double real(const char* key, double fallback) const {
    if (!has(key)) return fallback;
    if (!j[key].is_number()) refuse(key, "not a number");
    return j[key].get<double>();
  }
  bool boolean(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!j[key].is_boolean()) refuse(key, "not true or false");
    return j[key].get<bool>();
  }
  // A field that must keep the value Tessera builds (false, 0, empty) when present.
  void must_be_off(const char* key, const std::string& why) const {
    if (!has(key)) return;
    const json& v = j[key];
    const bool off = (v.is_boolean() && !v.get<bool>()) || (v.is_number() && v.get<double>() == 0) ||
                     ((v.is_object() || v.is_array()) && v.empty());
    if (!off) refuse(key, why);
  }
};

// rope_theta and the scaling, from either layout (see hf_config.h).
void parse_rope(const Reader& r, HfLlamaConfig& c) {
  const json& j = r.j;
  if (r.has("rope_parameters") && r.has("rope_scaling"))
    r.refuse("rope_scaling",
             "given beside rope_parameters; Tessera reads one of them (transformers 5 writes only "
             "rope_parameters)");
  const char* where = r.has("rope_parameters") ? "rope_parameters" : "rope_scaling";
  json rope = r.has(where) ? j[where] : json::object();
  if (!rope.is_object()) r.refuse(where, "not an object");
  if (rope.contains("rope_theta")) {
    if (!rope["rope_theta"].is_number()) r.refuse(where, "not valid: its rope_theta is not a number");
    c.rope_theta = rope["rope_theta"].get<double>();
    if (r.has("rope_theta") && r.real("rope_theta", 0) != c.rope_theta)
      r.refuse("rope_theta", fmt::format("not the rope_theta of {} ({})", where, c.rope_theta));
  } else {
    c.rope_theta = r.real("rope_theta", 10000.0);
  }
  if (!(c.rope_theta > 1) || std::floor(c.rope_theta) != c.rope_theta || c.rope_theta > 1e15)
    r.refuse(r.has("rope_theta") ? "rope_theta" : where,
             "not supported: Tessera's rope_max_timescale is a whole number > 1");
  // transformers 4 named the kind "type", later "rope_type".
  const char* kind_key = rope.contains("rope_type") ? "rope_type" : rope.contains("type") ? "type" : nullptr;
  if (kind_key && !rope[kind_key].is_string())
    r.refuse(where, fmt::format("not valid: its {} is not a string", kind_key));
  const std::string kind = kind_key ? rope[kind_key].get<std::string>() : "default";
  std::set<std::string> allowed = {"rope_type", "type", "rope_theta"};
  if (kind == "llama3") {
    c.llama3_rope_scaling = true;
    const std::pair<const char*, double> want[] = {
        {"factor", kLlama3RopeFactor},
        {"low_freq_factor", kLlama3LowFreqFactor},
        {"high_freq_factor", kLlama3HighFreqFactor},
        {"original_max_position_embeddings", static_cast<double>(kLlama3OriginalContext)}};
    for (const auto& [key, value] : want) {
      allowed.insert(key);
      if (!rope.contains(key) || !rope[key].is_number() || rope[key].get<double>() != value)
        r.refuse(where,
                 fmt::format("not supported: its {} is {}, and Tessera's rope_type=llama3.1 has Llama 3.1's "
                             "{} = {} (factor 8, low_freq_factor 1, high_freq_factor 4, "
                             "original_max_position_embeddings 8192)",
                             key, rope.contains(key) ? rope[key].dump() : "absent", key, value));
    }
  } else if (kind != "default") {
    r.refuse(where,
             fmt::format("not supported: rope type '{}'; Tessera converts default RoPE and Llama 3.1's "
                         "scaling (rope_type llama3)",
                         kind));
  }
  for (const auto& [key, value] : rope.items())
    if (!allowed.count(key))
      r.refuse(where, fmt::format("not supported: Tessera does not know its field '{}' for rope type '{}'",
                                  key, kind));
}

}  // namespace

json read_json_file(const std::string& path) {
  const std::string text = read_file(path);
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    fail(ErrorKind::kIo, "{}: not valid JSON: {}", path, e.what());
  }
}

HfLlamaConfig parse_hf_config(const json& j, const std::string& path) {
  if (!j.is_object()) fail(ErrorKind::kIo, "{}: not a JSON object", path);
  const Reader r{j, path};
  HfLlamaConfig c;
  if (!r.has("model_type") || !j["model_type"].is_string())
    r.refuse("model_type", "required (a string; Tessera converts llama and mistral)");
  c.model_type = j["model_type"].get<std::string>();
  if (c.model_type != "llama" && c.model_type != "mistral")
    r.refuse("model_type", "not converted by Tessera (supported: llama, mistral)");
  const bool mistral = c.model_type == "mistral";
  if (r.has("architectures")) {
    const std::string want = mistral ? "MistralForCausalLM" : "LlamaForCausalLM";
    if (!j["architectures"].is_array() || j["architectures"] != json::array({want}))
      r.refuse("architectures",
               fmt::format("not supported: Tessera converts [\"{}\"] for model_type {}", want, c.model_type));
  }
  for (const auto& [key, value] : j.items())
    if (!listed(kHarmlessFields, key) && !listed(kModelFields, key))
      r.refuse(key.c_str(), fmt::format("a field Tessera does not know for model_type {}; it may change the "
                                        "model, so the conversion stops",
                                        c.model_type));
  if (r.has("quantization_config")) r.refuse("quantization_config", "not supported (quantized weights)");
  r.must_be_off("attention_bias", "not supported: Tessera's Llama has no attention biases");
  r.must_be_off("mlp_bias", "not supported: Tessera's Llama has no MLP biases");
  r.must_be_off("attention_dropout", "not supported: Tessera has no dropout");
  r.must_be_off("is_encoder_decoder", "not supported: Tessera converts decoder-only models");
  r.must_be_off("is_decoder", "not supported here (a decoder of an encoder-decoder model)");
  r.must_be_off("add_cross_attention", "not supported: Tessera's Llama has no cross-attention");
  r.must_be_off("pruned_heads", "not supported: Tessera's Llama has no pruned heads");
  if (r.has("hidden_act")) {
    const json& a = j["hidden_act"];
    if (!a.is_string() || (a != "silu" && a != "swish"))
      r.refuse("hidden_act", "not supported: Tessera's Llama MLP is SwiGLU (hidden_act silu)");
  }

  c.hidden_size = r.integer("hidden_size");
  c.intermediate_size = r.integer("intermediate_size");
  c.num_hidden_layers = r.integer("num_hidden_layers");
  c.num_attention_heads = r.integer("num_attention_heads");
  c.vocab_size = r.integer("vocab_size");
  // transformers' defaults: Llama's kv heads default to the query heads, Mistral's to 8.
  c.num_key_value_heads = r.integer("num_key_value_heads", mistral ? 8 : c.num_attention_heads);
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    r.refuse("num_key_value_heads",
             fmt::format("not a divisor of num_attention_heads ({})", c.num_attention_heads));
  if (!r.has("head_dim") && c.hidden_size % c.num_attention_heads != 0)
    r.refuse("head_dim", fmt::format("needed: hidden_size {} is not a multiple of num_attention_heads {}",
                                     c.hidden_size, c.num_attention_heads));
  c.head_dim = r.integer("head_dim", c.hidden_size / c.num_attention_heads);
  if (c.head_dim % 2 != 0) r.refuse("head_dim", "odd; RoPE rotates pairs, so it must be even");
  c.rms_norm_eps = r.real("rms_norm_eps", 1e-6);
  if (!(c.rms_norm_eps > 0)) r.refuse("rms_norm_eps", "not positive");
  c.tie_word_embeddings = r.boolean("tie_word_embeddings", false);
  parse_rope(r, c);
  if (mistral) {
    // MistralConfig's default window is 4096; null means full causal attention.
    if (!j.contains("sliding_window"))
      c.sliding_window = 4096;
    else if (!j["sliding_window"].is_null())
      c.sliding_window = r.integer("sliding_window");
  } else if (r.has("sliding_window")) {
    r.refuse("sliding_window", "not supported for model_type llama (transformers' Llama has no window)");
  }
  return c;
}

std::string tessera_model_yaml(const HfLlamaConfig& hf, const std::string& compute_dtype) {
  std::string y;
  auto line = [&](std::string_view key, const auto& value) { y += fmt::format("{}: {}\n", key, value); };
  line("decoder_block", hf.model_type == "mistral" ? "mistral" : "llama2");
  line("global_parameter_scale", 1);
  line("base_emb_dim", hf.hidden_size);
  line("base_num_query_heads", hf.num_attention_heads);
  line("base_num_kv_heads", hf.num_key_value_heads);
  line("head_dim", hf.head_dim);
  line("base_mlp_dim", hf.intermediate_size);
  line("base_num_decoder_layers", hf.num_hidden_layers);
  line("vocab_size", hf.vocab_size);
  line("mlp_activations", "[\"silu\", \"linear\"]");
  // {} prints the shortest decimal that reads back as the same double.
  line("normalization_layer_epsilon", fmt::format("{}", hf.rms_norm_eps));
  line("logits_via_embedding", hf.tie_word_embeddings ? "true" : "false");
  line("rope_max_timescale", static_cast<int64_t>(hf.rope_theta));
  line("rope_type", hf.llama3_rope_scaling ? "llama3.1" : "default");
  line("attention_type", hf.sliding_window > 0 ? "local_sliding" : "global");
  line("sliding_window_size", hf.sliding_window);
  line("enable_dropout", "false");
  line("dtype", compute_dtype);
  return y;
}

HfLlamaConfig hf_config_from_tessera(const Config& cfg) {
  auto refuse = [&](const std::string& what) {
    fail(ErrorKind::kConfig, "{}: Hugging Face's LlamaForCausalLM / MistralForCausalLM cannot express it",
         what);
  };
  const bool mistral = cfg.decoder_block == "mistral";
  if (!mistral && cfg.decoder_block != "llama2" && cfg.decoder_block != "default")
    refuse(fmt::format("decoder_block={} (converted: llama2, mistral)", cfg.decoder_block));
  if (cfg.attention_bias)
    refuse("attention_bias=true (the converter maps Llama's projections without biases)");
  if (cfg.use_qk_norm) refuse("use_qk_norm=true (the converter maps Llama's attention without QK-norm)");
  if (cfg.mlp_activations != std::vector<std::string>{"silu", "linear"})
    refuse(fmt::format("mlp_activations=[{}] (converted: [silu, linear])",
                       fmt::join(cfg.mlp_activations, ", ")));
  if (cfg.rope_type != "default" && cfg.rope_type != "llama3.1")
    refuse(fmt::format("rope_type={} (converted: default, llama3.1)", cfg.rope_type));
  if (cfg.attention_type != "global" && cfg.attention_type != "local_sliding")
    refuse(fmt::format("attention_type={} (converted: global, local_sliding)", cfg.attention_type));
  const bool window = cfg.attention_type == "local_sliding";
  if (window && !mistral)
    refuse(fmt::format(
        "attention_type=local_sliding on decoder_block={} (transformers' Llama has no sliding window; "
        "decoder_block=mistral has one)",
        cfg.decoder_block));
  HfLlamaConfig c;
  c.model_type = mistral ? "mistral" : "llama";
  c.hidden_size = cfg.emb_dim;
  c.intermediate_size = cfg.mlp_dim;
  c.num_hidden_layers = cfg.num_decoder_layers;
  c.num_attention_heads = cfg.num_query_heads;
  c.num_key_value_heads = cfg.num_kv_heads;
  c.head_dim = cfg.head_dim;
  c.vocab_size = cfg.vocab_size;
  c.rms_norm_eps = cfg.normalization_layer_epsilon;
  c.rope_theta = static_cast<double>(cfg.rope_max_timescale);
  c.llama3_rope_scaling = cfg.rope_type == "llama3.1";
  c.tie_word_embeddings = cfg.logits_via_embedding;
  c.sliding_window = window ? cfg.sliding_window_size : 0;
  return c;
}

json hf_config_json(const HfLlamaConfig& hf, const std::string& dtype, const json& source,
                    int64_t max_positions) {
  const bool mistral = hf.model_type == "mistral";
  json j;
  j["architectures"] = {mistral ? "MistralForCausalLM" : "LlamaForCausalLM"};
  j["model_type"] = hf.model_type;
  j["hidden_size"] = hf.hidden_size;
  j["intermediate_size"] = hf.intermediate_size;
  j["num_hidden_layers"] = hf.num_hidden_layers;
  j["num_attention_heads"] = hf.num_attention_heads;
  j["num_key_value_heads"] = hf.num_key_value_heads;
  j["head_dim"] = hf.head_dim;
  j["vocab_size"] = hf.vocab_size;
  j["rms_norm_eps"] = hf.rms_norm_eps;
  j["rope_theta"] = hf.rope_theta;
  j["rope_scaling"] = nullptr;
  if (hf.llama3_rope_scaling)
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", kLlama3RopeFactor},
                         {"low_freq_factor", kLlama3LowFreqFactor},
                         {"high_freq_factor", kLlama3HighFreqFactor},
                         {"original_max_position_embeddings", kLlama3OriginalContext}};
  j["tie_word_embeddings"] = hf.tie_word_embeddings;
  j["hidden_act"] = "silu";
  j["attention_dropout"] = 0.0;
  if (mistral) {
    j["sliding_window"] = hf.sliding_window > 0 ? json(hf.sliding_window) : json(nullptr);
  } else {
    j["attention_bias"] = false;
    j["mlp_bias"] = false;
  }
  j["torch_dtype"] = dtype;
  j["max_position_embeddings"] =
      hf.llama3_rope_scaling ? std::max(max_positions, kLlama31Context) : max_positions;
  j["initializer_range"] = 0.02;
  j["use_cache"] = true;
  if (source.is_object())
    for (const char* key : {"max_position_embeddings", "initializer_range", "bos_token_id", "eos_token_id",
                            "pad_token_id", "pretraining_tp", "use_cache"})
      if (source.contains(key)) j[key] = source[key];
  return j;
}

}  // namespace tessera::convert
