#include "tessera/convert/hf_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string_view>

#include "tessera/config/schema.h"
#include "tessera/core/error.h"
#include "tessera/core/file.h"

namespace tessera::convert {

namespace {

using nlohmann::json;

// Llama 3.1's context (its config.json's max_position_embeddings): 16 x the original 8192.
constexpr int64_t kLlama31Context = 131072;

// Fields that neither change the weights nor the forward pass, in every family: generic
// PretrainedConfig attributes (generation defaults of transformers 4 included), token ids, sizes
// used for caches.
constexpr std::string_view kHarmlessFields =
    "_name_or_path _commit_hash _attn_implementation _attn_implementation_autoset "
    "transformers_version architectures model_type dtype torch_dtype use_bfloat16 bos_token_id "
    "eos_token_id pad_token_id sep_token_id decoder_start_token_id max_position_embeddings "
    "initializer_range use_cache tokenizer_class return_dict output_hidden_states "
    "output_attentions torchscript tf_legacy_loss chunk_size_feed_forward id2label label2id "
    "num_labels problem_type finetuning_task prefix task_specific_params max_length min_length "
    "do_sample early_stopping num_beams num_beam_groups diversity_penalty temperature top_k top_p "
    "typical_p repetition_penalty length_penalty no_repeat_ngram_size "
    "encoder_no_repeat_ngram_size bad_words_ids num_return_sequences output_scores "
    "return_dict_in_generate forced_bos_token_id forced_eos_token_id remove_invalid_values "
    "exponential_decay_length_penalty suppress_tokens begin_suppress_tokens tie_encoder_decoder "
    "cross_attention_hidden_size";

// Generic fields that must keep the value Tessera builds (false, 0, empty) when present.
constexpr std::pair<const char*, const char*> kOffFields[] = {
    {"is_encoder_decoder", "not supported: Tessera converts decoder-only models"},
    {"is_decoder", "not supported here (a decoder of an encoder-decoder model)"},
    {"add_cross_attention", "not supported: Tessera's decoders have no cross-attention"},
    {"pruned_heads", "not supported: Tessera's attention has no pruned heads"},
};

// Fields copied from the source config.json on export (those Tessera does not model).
constexpr std::string_view kCopiedFields =
    "max_position_embeddings initializer_range bos_token_id eos_token_id pad_token_id use_cache";

std::vector<std::string_view> words(std::string_view list) {
  return hf_words(list);
}

// Whether the space-separated `list` holds `key`.
bool listed(std::string_view list, std::string_view key) {
  const std::vector<std::string_view> w = words(list);
  return std::find(w.begin(), w.end(), key) != w.end();
}

// Reads config.json fields with errors that name the file and the field.
struct Reader {
  const json& j;
  const std::string& path;

  bool has(std::string_view key) const {
    const std::string k(key);
    return j.contains(k) && !j[k].is_null();
  }

  [[noreturn]] void refuse(std::string_view key, const std::string& why) const {
    const std::string k(key);
    fail(ErrorKind::kConfig, "{}: \"{}\": {} is {}", path, k, j.contains(k) ? j[k].dump() : "absent", why);
  }

  void must_be_off(const char* key, const std::string& why) const {
    if (!has(key)) return;
    const json& v = j[key];
    const bool off = (v.is_boolean() && !v.get<bool>()) || (v.is_number() && v.get<double>() == 0) ||
                     ((v.is_object() || v.is_array()) && v.empty());
    if (!off) refuse(key, why);
  }
};

// A field's value checked for its type; `where` is what refuse() names.
json typed(const Reader& r, std::string_view where, const json& v, HfValue type) {
  switch (type) {
    case HfValue::kCount:
      if (!v.is_number_integer() || v.get<int64_t>() < 1) r.refuse(where, "not a positive integer");
      return v.get<int64_t>();
    case HfValue::kReal:
      if (!v.is_number()) r.refuse(where, "not a number");
      return v.get<double>();
    case HfValue::kBool:
      if (!v.is_boolean()) r.refuse(where, "not true or false");
      return v;
    case HfValue::kCap:
      if (v.is_null()) return v;
      if (!v.is_number() || !(v.get<double>() > 0)) r.refuse(where, "not a positive number or null");
      return v.get<double>();
  }
  TESSERA_ASSERT(false);
}

// transformers' default of `f` (hf_family.h's fallback text) from the fields resolved so far.
json fallback_of(const Reader& r, const HfField& f, const json& resolved) {
  const std::string_view fb = f.fallback;
  if (fb.empty()) r.refuse(f.hf, "required (a positive integer)");
  auto field = [&](std::string_view ref) -> int64_t {
    TESSERA_ASSERT(ref.starts_with("@") && resolved.contains(std::string(ref.substr(1))));
    return resolved[std::string(ref.substr(1))].get<int64_t>();
  };
  if (const size_t slash = fb.find('/'); slash != std::string_view::npos) {
    const std::string_view a = fb.substr(0, slash), b = fb.substr(slash + 1);
    if (field(a) % field(b) != 0)
      r.refuse(f.hf, fmt::format("needed: {} {} is not a multiple of {} {}", a.substr(1), field(a),
                                 b.substr(1), field(b)));
    return field(a) / field(b);
  }
  if (const size_t star = fb.find("*@"); star != std::string_view::npos)
    return std::stoll(std::string(fb.substr(0, star))) * field(fb.substr(star + 1));
  if (fb.starts_with("@")) return field(fb);
  return json::parse(fb);
}

// The table's fields, resolved.
void parse_fields(const Reader& r, const HfFamily& fam, json& out) {
  for (const HfField& f : fam.fields) {
    const std::string key(f.hf);
    if (f.derived) {
      out[key] = fallback_of(r, f, out);
      if (r.has(key) && r.j[key] != out[key])
        r.refuse(key, fmt::format("not supported: transformers' {} computes it ({})", fam.architecture,
                                  out[key].dump()));
      continue;
    }
    // A kCap's null is a value (none), not an absent field.
    const bool given = f.type == HfValue::kCap ? r.j.contains(key) : r.has(key);
    out[key] = given ? typed(r, key, r.j[key], f.type) : typed(r, key, fallback_of(r, f, out), f.type);
  }
}

// A RoPE theta as Tessera's whole-number timescale; `where` is what refuse() names.
double whole_theta(const Reader& r, std::string_view where, const json& v) {
  if (!v.is_number()) r.refuse(where, "not valid: its rope_theta is not a number");
  const double theta = v.get<double>();
  if (!(theta > 1) || std::floor(theta) != theta || theta > 1e15)
    r.refuse(where, "not supported: Tessera's rope_max_timescale is a whole number > 1");
  return theta;
}

// RoPE per layer type (HfFamily::local_rope, Gemma 3), from transformers 5's rope_parameters
// {"full_attention": {rope_type, rope_theta, factor}, "sliding_attention": {rope_type, rope_theta}}
// or transformers 4's rope_theta, rope_local_base_freq and rope_scaling (the full layers' only), as
// fields "rope_theta", "rope_scaling" (null, or {rope_type: linear, factor}) and
// "rope_local_base_freq". A linear factor of 1 is no scaling.
void parse_layer_rope(const Reader& r, const HfFamily& fam, json& out) {
  const json& j = r.j;
  json full = json::object(), sliding = json::object();
  const char* where = "rope_parameters";
  if (r.has("rope_parameters")) {
    for (const char* legacy : {"rope_scaling", "rope_theta", "rope_local_base_freq"})
      if (r.has(legacy))
        r.refuse(legacy,
                 "given beside rope_parameters; Tessera reads one of them (transformers 5 writes only "
                 "rope_parameters)");
    const json& p = j["rope_parameters"];
    if (!p.is_object()) r.refuse(where, "not an object");
    for (const auto& [type, params] : p.items()) {
      if (type != "full_attention" && type != "sliding_attention")
        r.refuse(where,
                 fmt::format("not supported: its entry '{}'; {}'s rope_parameters holds one object per "
                             "layer type (full_attention, sliding_attention)",
                             type, fam.model_type));
      if (!params.is_null() && !params.is_object())
        r.refuse(where, fmt::format("not valid: its {} is not an object", type));
      if (params.is_object()) (type == "full_attention" ? full : sliding) = params;
    }
  } else {
    where = "rope_scaling";
    if (r.has("rope_scaling")) {
      if (!j["rope_scaling"].is_object()) r.refuse(where, "not an object");
      full = j["rope_scaling"];
    }
    if (r.has("rope_theta")) full["rope_theta"] = j["rope_theta"];
    if (r.has("rope_local_base_freq")) sliding["rope_theta"] = j["rope_local_base_freq"];
  }
  auto kind_of = [&](const json& p, const char* layers, std::string_view kinds) {
    const char* key = p.contains("rope_type") ? "rope_type" : p.contains("type") ? "type" : nullptr;
    if (key && !p[key].is_string())
      r.refuse(where, fmt::format("not valid: its {} rope_type is not a string", layers));
    std::string kind = key ? p[key].get<std::string>() : "default";
    if (!listed(kinds, kind))
      r.refuse(where, fmt::format("not supported: rope type '{}' on the {} layers; Tessera converts {} with "
                                  "rope types [{}] there",
                                  kind, layers, fam.model_type, fmt::join(words(kinds), ", ")));
    for (const auto& [k, v] : p.items())
      if (k != "rope_type" && k != "type" && k != "rope_theta" && !(kind == "linear" && k == "factor"))
        r.refuse(where, fmt::format("not supported: Tessera does not know the field '{}' of the {} layers' "
                                    "rope type '{}'",
                                    k, layers, kind));
    return kind;
  };
  const std::string full_kind = kind_of(full, "full_attention", fam.rope_types);
  kind_of(sliding, "sliding_attention", "default");
  out["rope_theta"] =
      full.contains("rope_theta") ? whole_theta(r, where, full["rope_theta"]) : fam.default_rope_theta;
  out["rope_local_base_freq"] = sliding.contains("rope_theta") ? whole_theta(r, where, sliding["rope_theta"])
                                                               : fam.default_local_rope_theta;
  out["rope_scaling"] = nullptr;
  if (full_kind == "linear") {
    if (!full.contains("factor") || !full["factor"].is_number() || !(full["factor"].get<double>() > 0))
      r.refuse(where, "not valid: the full_attention layers' linear factor is not a positive number");
    const double factor = full["factor"].get<double>();
    if (factor != 1) out["rope_scaling"] = {{"rope_type", "linear"}, {"factor", factor}};
  }
}

// rope_theta and the scaling, from either layout (hf_config.h), as fields "rope_theta" and
// "rope_scaling" (null, or the scaling's canonical object).
void parse_rope(const Reader& r, const HfFamily& fam, json& out) {
  if (fam.local_rope) return parse_layer_rope(r, fam, out);
  const json& j = r.j;
  if (r.has("rope_parameters") && r.has("rope_scaling"))
    r.refuse("rope_scaling",
             "given beside rope_parameters; Tessera reads one of them (transformers 5 writes only "
             "rope_parameters)");
  const char* where = r.has("rope_parameters") ? "rope_parameters" : "rope_scaling";
  json rope = r.has(where) ? j[where] : json::object();
  if (!rope.is_object()) r.refuse(where, "not an object");
  double theta = fam.default_rope_theta;
  if (rope.contains("rope_theta")) {
    if (!rope["rope_theta"].is_number()) r.refuse(where, "not valid: its rope_theta is not a number");
    theta = rope["rope_theta"].get<double>();
    if (r.has("rope_theta") && typed(r, "rope_theta", j["rope_theta"], HfValue::kReal).get<double>() != theta)
      r.refuse("rope_theta", fmt::format("not the rope_theta of {} ({})", where, theta));
  } else if (r.has("rope_theta")) {
    theta = typed(r, "rope_theta", j["rope_theta"], HfValue::kReal).get<double>();
  }
  if (!(theta > 1) || std::floor(theta) != theta || theta > 1e15)
    r.refuse(r.has("rope_theta") ? "rope_theta" : where,
             "not supported: Tessera's rope_max_timescale is a whole number > 1");
  out["rope_theta"] = theta;
  // transformers 4 named the kind "type", later "rope_type".
  const char* kind_key = rope.contains("rope_type") ? "rope_type" : rope.contains("type") ? "type" : nullptr;
  if (kind_key && !rope[kind_key].is_string())
    r.refuse(where, fmt::format("not valid: its {} is not a string", kind_key));
  const std::string kind = kind_key ? rope[kind_key].get<std::string>() : "default";
  if (!listed(fam.rope_types, kind))
    r.refuse(where, fmt::format("not supported: rope type '{}'; Tessera converts {} with rope types [{}]",
                                kind, fam.model_type, fmt::join(words(fam.rope_types), ", ")));
  std::set<std::string> allowed = {"rope_type", "type", "rope_theta"};
  auto number = [&](const char* key, std::optional<double> fallback) {
    allowed.insert(key);
    if (!rope.contains(key) || rope[key].is_null()) {
      if (!fallback) r.refuse(where, fmt::format("not supported: its {} is absent", key));
      return *fallback;
    }
    if (!rope[key].is_number()) r.refuse(where, fmt::format("not valid: its {} is not a number", key));
    return rope[key].get<double>();
  };
  out["rope_scaling"] = nullptr;
  if (kind == "llama3") {  // Llama 3.1 (factor 8) and 3.2 (factor 32): the llama3_* keys carry them
    const double factor = number("factor", std::nullopt), low = number("low_freq_factor", std::nullopt),
                 high = number("high_freq_factor", std::nullopt),
                 original = number("original_max_position_embeddings", std::nullopt);
    if (!(factor > 0 && low > 0 && high > low))
      r.refuse(where,
               "not valid: llama3 scaling needs factor > 0 and 0 < low_freq_factor < high_freq_factor");
    if (original < 1 || std::floor(original) != original)
      r.refuse(where, "not valid: its original_max_position_embeddings is not a positive integer");
    out["rope_scaling"] = {{"rope_type", "llama3"},
                           {"factor", factor},
                           {"low_freq_factor", low},
                           {"high_freq_factor", high},
                           {"original_max_position_embeddings", static_cast<int64_t>(original)}};
  } else if (kind == "yarn") {
    const double factor = number("factor", std::nullopt);
    if (!(factor >= 1)) r.refuse(where, "not supported: its factor is below 1");
    const double original = number("original_max_position_embeddings", std::nullopt);
    if (original < 1 || std::floor(original) != original)
      r.refuse(where, "not valid: its original_max_position_embeddings is not a positive integer");
    allowed.insert("truncate");
    if (rope.contains("truncate") && !rope["truncate"].is_boolean())
      r.refuse(where, "not valid: its truncate is not true or false");
    out["rope_scaling"] = {{"rope_type", "yarn"},
                           {"factor", factor},
                           {"beta_fast", number("beta_fast", 32.0)},
                           {"beta_slow", number("beta_slow", 1.0)},
                           {"original_max_position_embeddings", static_cast<int64_t>(original)},
                           {"truncate", rope.value("truncate", true)}};
  }
  for (const auto& [key, value] : rope.items())
    if (!allowed.count(key))
      r.refuse(where, fmt::format("not supported: Tessera does not know its field '{}' for rope type '{}'",
                                  key, kind));
}

// The layer_types of a kAlternating (cycle 2) or kFiveToOne (cycle 6) family's `layers` layers:
// every cycle-th layer (l % cycle == cycle - 1) full, the others sliding.
json cycle_layer_types(HfWindow window, int64_t layers) {
  const int64_t cycle = window == HfWindow::kFiveToOne ? 6 : 2;
  json types = json::array();
  for (int64_t l = 0; l < layers; ++l)
    types.push_back(l % cycle == cycle - 1 ? "full_attention" : "sliding_attention");
  return types;
}

// The window fields (hf_config.h): "sliding_window" (kOptional: int or null; kAlternating and
// kFiveToOne: int) and "layer_types" (kAlternating, kFiveToOne).
void parse_window(const Reader& r, const HfFamily& fam, json& out) {
  const json& j = r.j;
  int64_t layers = 0;  // the field that sets the decoder's layer count
  for (const HfField& f : fam.fields)
    if (f.tessera == "base_num_decoder_layers") layers = out[std::string(f.hf)].get<int64_t>();
  const json cycled = cycle_layer_types(fam.window, layers);
  switch (fam.window) {
    case HfWindow::kNone:
      if (j.contains("sliding_window") && !j["sliding_window"].is_null() &&
          !listed(fam.harmless, "sliding_window"))
        r.refuse("sliding_window",
                 fmt::format("not supported for model_type {} (transformers' {} has no window)",
                             fam.model_type, fam.architecture));
      if (r.has("layer_types"))
        for (const json& t : j["layer_types"])
          if (t != "full_attention")
            r.refuse("layer_types",
                     fmt::format("not supported: Tessera converts {} with full attention in every layer",
                                 fam.model_type));
      return;
    case HfWindow::kOptional:
      if (!j.contains("sliding_window"))
        out["sliding_window"] = fam.default_window > 0 ? json(fam.default_window) : json(nullptr);
      else if (j["sliding_window"].is_null())
        out["sliding_window"] = nullptr;
      else
        out["sliding_window"] = typed(r, "sliding_window", j["sliding_window"], HfValue::kCount);
      if (r.has("layer_types"))
        r.refuse("layer_types", fmt::format("not supported for model_type {}", fam.model_type));
      return;
    case HfWindow::kAlternating:
    case HfWindow::kFiveToOne: {
      const bool five = fam.window == HfWindow::kFiveToOne;
      if (j.contains("sliding_window") && j["sliding_window"].is_null())
        r.refuse(
            "sliding_window",
            fmt::format("not supported: Tessera's {} has a window on its sliding layers", fam.model_type));
      out["sliding_window"] = r.has("sliding_window")
                                  ? typed(r, "sliding_window", j["sliding_window"], HfValue::kCount)
                                  : json(fam.default_window);
      const char* pattern_why =
          "not supported: Tessera's Gemma 3 has five sliding layers to one full (a pattern of 6)";
      for (const char* pattern : {"sliding_window_pattern", "_sliding_window_pattern"})
        if (five && r.has(pattern) && j[pattern] != 6) r.refuse(pattern, pattern_why);
      if (r.has("layer_types") && j["layer_types"] != cycled)
        r.refuse(
            "layer_types",
            five ? fmt::format("not supported: Tessera's {} has five sliding_attention layers, then one "
                               "full_attention (layer l full when l % 6 == 5)",
                               fam.model_type)
                 : fmt::format("not supported: Tessera's {} alternates sliding_attention (even layers) and "
                               "full_attention (odd layers)",
                               fam.model_type));
      out["layer_types"] = cycled;
      return;
    }
  }
}

// quantization_config: MXFP4 where the table allows it, nothing else.
bool parse_quantization(const Reader& r, const HfFamily& fam) {
  if (!r.has("quantization_config")) return false;
  const json& q = r.j["quantization_config"];
  if (!fam.mxfp4 || !q.is_object() || q.value("quant_method", "") != "mxfp4") {
    std::vector<std::string_view> mxfp4;
    for (const HfFamily* f : hf_families())
      if (f->mxfp4) mxfp4.push_back(f->model_type);
    r.refuse("quantization_config",
             fmt::format("not supported (quantized weights; Tessera dequantises the MXFP4 experts of {})",
                         fmt::join(mxfp4, ", ")));
  }
  return true;
}

// Every field of the config.json must be one Tessera knows for the family.
void check_known(const Reader& r, const HfFamily& fam) {
  std::set<std::string_view> known = {"quantization_config"};
  for (const HfField& f : fam.fields) known.insert(f.hf);
  for (const HfFixed& f : fam.fixed) known.insert(f.hf);
  for (const auto& [key, why] : kOffFields) known.insert(key);
  if (!fam.rope_types.empty()) known.insert({"rope_theta", "rope_scaling", "rope_parameters"});
  if (fam.local_rope) known.insert("rope_local_base_freq");
  if (fam.window == HfWindow::kFiveToOne) known.insert({"sliding_window_pattern", "_sliding_window_pattern"});
  if (fam.window != HfWindow::kNone) known.insert("sliding_window");
  known.insert("layer_types");
  for (const auto& [key, value] : r.j.items())
    if (!known.count(key) && !listed(kHarmlessFields, key) && !listed(fam.harmless, key))
      r.refuse(key, fmt::format("a field Tessera does not know for model_type {}; it may change the "
                                "model, so the conversion stops",
                                fam.model_type));
}

std::string yaml_number(const json& v) {
  // {} prints the shortest decimal that reads back as the same double.
  return v.is_number_integer() ? fmt::format("{}", v.get<int64_t>()) : fmt::format("{}", v.get<double>());
}

}  // namespace

std::string HfModel::describe() const {
  std::vector<std::string> parts;
  for (const HfField& f : family->fields)
    if (fields.contains(std::string(f.hf)))
      parts.push_back(fmt::format("{} {}", f.hf, fields[std::string(f.hf)].dump()));
  return fmt::format("model_type {}: {}", family->model_type, fmt::join(parts, ", "));
}

json read_json_file(const std::string& path) {
  const std::string text = read_file(path);
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    fail(ErrorKind::kIo, "{}: not valid JSON: {}", path, e.what());
  }
}

HfModel parse_hf_config(const json& j, const std::string& path) {
  if (!j.is_object()) fail(ErrorKind::kIo, "{}: not a JSON object", path);
  const Reader r{j, path};
  if (!r.has("model_type") || !j["model_type"].is_string())
    r.refuse("model_type", fmt::format("required (a string; Tessera converts {})", hf_model_types()));
  HfModel m;
  m.family = hf_family_of_model_type(j["model_type"].get<std::string>());
  if (!m.family)
    r.refuse("model_type", fmt::format("not converted by Tessera (supported: {})", hf_model_types()));
  const HfFamily& fam = *m.family;
  if (r.has("architectures") &&
      (!j["architectures"].is_array() || j["architectures"] != json::array({std::string(fam.architecture)})))
    r.refuse("architectures", fmt::format("not supported: Tessera converts [\"{}\"] for model_type {}",
                                          fam.architecture, fam.model_type));
  check_known(r, fam);
  m.mxfp4 = parse_quantization(r, fam);
  for (const auto& [key, why] : kOffFields) r.must_be_off(key, why);
  for (const HfFixed& f : fam.fixed)
    if (r.has(f.hf) && j[std::string(f.hf)] != json::parse(f.json) &&
        (f.also.empty() || j[std::string(f.hf)] != json::parse(f.also)))
      r.refuse(f.hf, std::string(f.why));
  parse_fields(r, fam, m.fields);
  if (!fam.rope_types.empty()) {
    parse_rope(r, fam, m.fields);
    for (const HfField& f : fam.fields)
      if (f.tessera == "head_dim" && m.fields[std::string(f.hf)].get<int64_t>() % 2 != 0)
        r.refuse(f.hf, "odd; RoPE rotates pairs, so it must be even");
  }
  parse_window(r, fam, m.fields);
  return m;
}

std::string tessera_model_yaml(const HfModel& m, const std::string& compute_dtype) {
  const HfFamily& fam = *m.family;
  const json& f = m.fields;
  std::string y;
  auto line = [&](std::string_view key, const auto& value) { y += fmt::format("{}: {}\n", key, value); };
  for (const HfKey& k : fam.keys) line(k.tessera, k.yaml);
  line("global_parameter_scale", 1);
  for (const HfField& field : fam.fields) {
    const json& v = f[std::string(field.hf)];
    for (std::string_view key : words(field.tessera))
      line(key, v.is_boolean() ? (v.get<bool>() ? "true" : "false") : v.is_null() ? "0" : yaml_number(v));
  }
  if (fam.local_rope) {
    const json& s = f["rope_scaling"];
    line("rope_max_timescale", static_cast<int64_t>(f["rope_theta"].get<double>()));
    line("rope_type", "default");
    line("local_rope_max_timescale", static_cast<int64_t>(f["rope_local_base_freq"].get<double>()));
    line("rope_linear_scaling_factor", s.is_null() ? "1" : yaml_number(s["factor"]));
  } else if (!fam.rope_types.empty()) {
    line("rope_max_timescale", static_cast<int64_t>(f["rope_theta"].get<double>()));
    const json& s = f["rope_scaling"];
    const std::string kind = s.is_null() ? "default" : s["rope_type"].get<std::string>();
    line("rope_type", kind == "llama3" ? "llama3.1" : kind);
    if (kind == "llama3") {
      line("llama3_rope_factor", yaml_number(s["factor"]));
      line("llama3_low_freq_factor", yaml_number(s["low_freq_factor"]));
      line("llama3_high_freq_factor", yaml_number(s["high_freq_factor"]));
      line("llama3_original_max_position_embeddings", yaml_number(s["original_max_position_embeddings"]));
    }
    if (kind == "yarn") {
      line("rope_factor", yaml_number(s["factor"]));
      line("beta_fast", yaml_number(s["beta_fast"]));
      line("beta_slow", yaml_number(s["beta_slow"]));
      line("original_max_position_embeddings", yaml_number(s["original_max_position_embeddings"]));
      line("rope_truncate", s["truncate"].get<bool>() ? "true" : "false");
      line("rope_attention_scaling", "true");
    }
  }
  switch (fam.window) {
    case HfWindow::kNone:
      line("attention_type", "global");
      break;
    case HfWindow::kOptional: {
      const bool window = !f["sliding_window"].is_null();
      line("attention_type", window ? "local_sliding" : "global");
      line("sliding_window_size", window ? f["sliding_window"].get<int64_t>() : 0);
      break;
    }
    case HfWindow::kAlternating:
    case HfWindow::kFiveToOne:
      line("sliding_window_size", f["sliding_window"].get<int64_t>());
      break;
  }
  line("enable_dropout", "false");
  line("dtype", compute_dtype);
  return y;
}

namespace {

[[noreturn]] void cannot_express(const HfFamily& fam, const std::string& what) {
  fail(ErrorKind::kConfig, "{}: Hugging Face's {} cannot express it", what, fam.architecture);
}

// The value of Tessera key `key` in `cfg` as YAML text (schema.h's format_value).
std::string key_text(const Config& cfg, std::string_view key) {
  const config::FieldSpec* spec = config::find_field(key);
  TESSERA_ASSERT(spec != nullptr);
  return config::format_value(*spec, cfg);
}

// `cfg` with the model dimensions global_parameter_scale derived written back into their base_
// keys, so that the tables read the model's dimensions from the keys they name.
Config unscaled(const Config& cfg) {
  Config c = cfg;
  c.global_parameter_scale = 1;
  c.base_emb_dim = cfg.emb_dim;
  c.base_num_query_heads = cfg.num_query_heads;
  c.base_num_kv_heads = cfg.num_kv_heads;
  c.base_mlp_dim = cfg.mlp_dim;
  c.base_moe_mlp_dim = cfg.moe_mlp_dim;
  c.base_num_decoder_layers = cfg.num_decoder_layers;
  return c;
}

json field_from_tessera(const HfFamily& fam, const HfField& f, const Config& cfg) {
  const std::vector<std::string_view> keys = words(f.tessera);
  const std::string text = key_text(cfg, keys[0]);
  for (size_t k = 1; k < keys.size(); ++k)
    if (key_text(cfg, keys[k]) != text)
      cannot_express(fam, fmt::format("{}={} and {}={} ({}'s {} sets both)", keys[0], text, keys[k],
                                      key_text(cfg, keys[k]), fam.model_type, f.hf));
  switch (f.type) {
    case HfValue::kCount: {
      const double v = std::stod(text);
      if (!(v >= 1) || std::floor(v) != v)
        cannot_express(
            fam, fmt::format("{}={} ({}'s {} is a positive integer)", keys[0], text, fam.model_type, f.hf));
      return static_cast<int64_t>(v);
    }
    case HfValue::kReal:
      return std::stod(text);
    case HfValue::kBool:
      return text == "true";
    case HfValue::kCap: {
      const double v = std::stod(text);
      if (v < 0)
        cannot_express(fam, fmt::format("{}={} (a soft cap is positive, or 0: none)", keys[0], text));
      return v == 0 ? json(nullptr) : json(v);
    }
  }
  TESSERA_ASSERT(false);
}

// The RoPE fields of `cfg` in Hugging Face's terms (parse_rope's "rope_theta", "rope_scaling" and,
// per layer type, "rope_local_base_freq").
void rope_from_tessera(const HfFamily& fam, const Config& cfg, json& fields) {
  if (fam.local_rope) {
    if (cfg.rope_type != "default")
      cannot_express(fam,
                     fmt::format("rope_type={} (converted for {}: default, with rope_linear_scaling_factor)",
                                 cfg.rope_type, fam.model_type));
    if (cfg.local_rope_max_timescale <= 1)
      cannot_express(fam,
                     fmt::format("local_rope_max_timescale={} ({}'s sliding layers have their own theta)",
                                 cfg.local_rope_max_timescale, fam.model_type));
    if (!(cfg.rope_linear_scaling_factor > 0))
      cannot_express(fam, fmt::format("rope_linear_scaling_factor={}", cfg.rope_linear_scaling_factor));
    fields["rope_theta"] = static_cast<double>(cfg.rope_max_timescale);
    fields["rope_local_base_freq"] = static_cast<double>(cfg.local_rope_max_timescale);
    fields["rope_scaling"] = nullptr;
    if (cfg.rope_linear_scaling_factor != 1)
      fields["rope_scaling"] = {{"rope_type", "linear"}, {"factor", cfg.rope_linear_scaling_factor}};
  } else if (!fam.rope_types.empty()) {
    fields["rope_theta"] = static_cast<double>(cfg.rope_max_timescale);
    fields["rope_scaling"] = nullptr;
    const std::string kind = cfg.rope_type == "llama3.1" ? "llama3" : cfg.rope_type;
    if (!listed(fam.rope_types, kind))
      cannot_express(fam, fmt::format("rope_type={} (converted for {}: [{}])", cfg.rope_type, fam.model_type,
                                      fmt::join(words(fam.rope_types), ", ")));
    if (kind == "llama3")
      fields["rope_scaling"] = {
          {"rope_type", "llama3"},
          {"factor", cfg.llama3_rope_factor},
          {"low_freq_factor", cfg.llama3_low_freq_factor},
          {"high_freq_factor", cfg.llama3_high_freq_factor},
          {"original_max_position_embeddings", cfg.llama3_original_max_position_embeddings}};
    if (kind == "yarn") {
      if (!cfg.rope_attention_scaling)
        cannot_express(fam, "rope_type=yarn with rope_attention_scaling=false (transformers' YaRN scales)");
      fields["rope_scaling"] = {{"rope_type", "yarn"},
                                {"factor", cfg.rope_factor},
                                {"beta_fast", cfg.beta_fast},
                                {"beta_slow", cfg.beta_slow},
                                {"original_max_position_embeddings", cfg.original_max_position_embeddings},
                                {"truncate", cfg.rope_truncate}};
    }
  }
}

}  // namespace

HfModel hf_model_from_tessera(const Config& given) {
  const HfFamily* family = hf_family_of_block(given.decoder_block);
  if (!family)
    fail(ErrorKind::kConfig, "decoder_block={} (converted: {}): Hugging Face export has no table for it",
         given.decoder_block, hf_blocks());
  const HfFamily& fam = *family;
  const Config cfg = unscaled(given);
  for (const HfKey& k : fam.keys) {
    if (k.tessera == "decoder_block") continue;
    const config::FieldSpec* spec = config::find_field(k.tessera);
    Config want = cfg;
    config::set_field_from_text(*spec, want, std::string(k.yaml), {"the Hugging Face table"});
    if (config::format_value(*spec, want) != config::format_value(*spec, cfg))
      cannot_express(fam, fmt::format("{}={} (converted: {})", k.tessera, key_text(cfg, k.tessera),
                                      config::format_value(*spec, want)));
  }
  HfModel m;
  m.family = family;
  const json empty = json::object();
  const std::string what = "the exported config";
  const Reader none{empty, what};
  for (const HfField& f : fam.fields) {
    const std::string key(f.hf);
    m.fields[key] = field_from_tessera(fam, f, cfg);
    if (f.derived && fallback_of(none, f, m.fields) != m.fields[key])
      cannot_express(fam,
                     fmt::format("{}={} (transformers' {} computes {} = {})", f.tessera, m.fields[key].dump(),
                                 fam.model_type, f.hf, fallback_of(none, f, m.fields).dump()));
  }
  rope_from_tessera(fam, cfg, m.fields);
  const bool window = cfg.attention_type == "local_sliding";
  switch (fam.window) {
    case HfWindow::kNone:
      if (cfg.attention_type != "global")
        cannot_express(fam,
                       fmt::format("attention_type={} on decoder_block={} (transformers' {} has no sliding "
                                   "window)",
                                   cfg.attention_type, cfg.decoder_block, fam.architecture));
      break;
    case HfWindow::kOptional:
      if (!window && cfg.attention_type != "global")
        cannot_express(
            fam, fmt::format("attention_type={} (converted: global, local_sliding)", cfg.attention_type));
      m.fields["sliding_window"] = window ? json(cfg.sliding_window_size) : json(nullptr);
      break;
    case HfWindow::kAlternating:
    case HfWindow::kFiveToOne:
      if (cfg.sliding_window_size <= 0)
        cannot_express(fam, fmt::format("sliding_window_size={} ({}'s sliding layers have a window)",
                                        cfg.sliding_window_size, fam.model_type));
      m.fields["sliding_window"] = cfg.sliding_window_size;
      m.fields["layer_types"] = cycle_layer_types(fam.window, cfg.num_decoder_layers);
      break;
  }
  return m;
}

json hf_config_json(const HfModel& m, const std::string& dtype, const json& source, int64_t max_positions) {
  const HfFamily& fam = *m.family;
  json j;
  j["architectures"] = {std::string(fam.architecture)};
  j["model_type"] = std::string(fam.model_type);
  for (const HfField& f : fam.fields)
    if (!f.derived) j[std::string(f.hf)] = m.fields[std::string(f.hf)];
  for (const char* key :
       {"rope_theta", "rope_local_base_freq", "rope_scaling", "sliding_window", "layer_types"})
    if (m.fields.contains(key)) j[key] = m.fields[key];
  for (const HfFixed& f : fam.fixed) j[std::string(f.hf)] = json::parse(f.json);
  j["torch_dtype"] = dtype;
  if (!fam.rope_types.empty()) {
    int64_t context = max_positions;
    const json& s = m.fields["rope_scaling"];
    if (!s.is_null() && s["rope_type"] == "llama3") context = std::max(context, kLlama31Context);
    if (!s.is_null() && s["rope_type"] == "yarn")
      context = std::max(context, static_cast<int64_t>(s["factor"].get<double>() *
                                                       s["original_max_position_embeddings"].get<double>()));
    j["max_position_embeddings"] = context;
  }
  j["initializer_range"] = 0.02;
  j["use_cache"] = true;
  if (source.is_object())
    for (const std::vector<std::string_view>& list : {words(kCopiedFields), words(fam.harmless)})
      for (std::string_view key : list)
        if (source.contains(std::string(key))) j[std::string(key)] = source[std::string(key)];
  return j;
}

}  // namespace tessera::convert
