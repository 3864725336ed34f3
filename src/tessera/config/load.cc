// Loading a config: schema defaults < the given YAML file < the model preset < key=value arguments,
// with MaxText's rule that an argument may replace a key of the preset only when
// override_model_config=true. Every failure is an Error(kConfig) that says where the bad key or
// value came from (file:line or "command line").
#include <fmt/format.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <sstream>

#include "tessera/config/config.h"
#include "tessera/config/schema.h"
#include "tessera/core/error.h"
#include "tessera/core/file.h"
#include "tessera/core/source_dir.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using config::FieldSpec;
using config::Origin;

// MaxText keys that Tessera does not have, with the Tessera key that does the job where one does.
const std::map<std::string_view, std::string_view>& maxtext_only_keys() {
  static const std::map<std::string_view, std::string_view> keys = {
      {"attention", ""},        {"cosine_learning_rate_final_fraction", "learning_rate_final_fraction"},
      {"data_sharding", ""},    {"dataset_name", "dataset_path"},
      {"enable_profiler", ""},  {"fused_mlp", ""},
      {"fused_qkv", ""},        {"grad_dtype", ""},
      {"jax_cache_dir", ""},    {"matmul_precision", ""},
      {"mesh_axes", ""},        {"megablox", "sparse_matmul"},
      {"num_slices", ""},       {"param_scan_axis", ""},
      {"profiler", ""},         {"quantization", ""},
      {"quantize_kvcache", ""}, {"z_loss_multiplier", ""},
  };
  return keys;
}

// Derived values that users sometimes try to set, and the keys that set them.
const std::map<std::string_view, std::string_view>& derived_names() {
  static const std::map<std::string_view, std::string_view> names = {
      {"emb_dim", "base_emb_dim"},           {"num_query_heads", "base_num_query_heads"},
      {"num_kv_heads", "base_num_kv_heads"}, {"mlp_dim", "base_mlp_dim"},
      {"moe_mlp_dim", "base_moe_mlp_dim"},   {"num_decoder_layers", "base_num_decoder_layers"},
  };
  return names;
}

[[noreturn]] void unknown_key(const std::string& key, const Origin& o) {
  if (auto it = derived_names().find(key); it != derived_names().end())
    fail(ErrorKind::kConfig,
         "config key '{}' ({}) is derived, not set: set {} (scaled by global_parameter_scale)", key, o.where,
         it->second);
  if (auto it = maxtext_only_keys().find(key); it != maxtext_only_keys().end())
    fail(ErrorKind::kConfig, "config key '{}' ({}) is a MaxText key that Tessera does not support{}", key,
         o.where, it->second.empty() ? "" : fmt::format("; Tessera's equivalent is '{}'", it->second));
  std::string hint = config::closest_key(key);
  fail(ErrorKind::kConfig, "unknown config key '{}' ({}){}", key, o.where,
       hint.empty() ? "; run 'tessera help-config' for the list of keys"
                    : fmt::format("; did you mean '{}'?", hint));
}

// Config files and presets are a few KiB; a larger file is a wrong path.
constexpr uint64_t kConfigFileLimit = uint64_t{16} << 20;

std::string read_text_file(const fs::path& path, std::string_view what) {
  std::string text;
  try {
    text = read_file(path, kConfigFileLimit, what);  // a regular file only: never a FIFO or a device
  } catch (const Error& e) {
    throw Error(ErrorKind::kConfig, e.what());
  }
  if (size_t nul = text.find('\0'); nul != std::string::npos)
    fail(ErrorKind::kConfig, "{}:{}: a NUL byte at offset {}; a config is text", path.string(),
         1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(nul), '\n'), nul);
  return text;
}

// yaml-cpp ends a quoted scalar that is never closed at the end of the file without a word (when
// the file ends in a newline), so `run_name: "abc` followed by more lines swallows them. Every
// quoted scalar must close: the text at the node's mark opens the quote; the scan finds its end.
void check_quotes_closed(const std::string& text, const YAML::Node& n, const fs::path& path) {
  if (n.IsMap() || n.IsSequence()) {
    for (const auto& e : n) {
      if (n.IsMap()) {
        check_quotes_closed(text, e.first, path);
        check_quotes_closed(text, e.second, path);
      } else {
        check_quotes_closed(text, e, path);
      }
    }
    return;
  }
  if (!n.IsScalar() || n.Tag() != "!") return;  // "!" is the tag of a quoted (non-plain) scalar
  const YAML::Mark m = n.Mark();
  if (m.pos < 0 || static_cast<size_t>(m.pos) >= text.size()) return;
  const char q = text[static_cast<size_t>(m.pos)];
  if (q != '"' && q != '\'') return;
  for (size_t i = static_cast<size_t>(m.pos) + 1; i < text.size(); ++i) {
    if (q == '"' && text[i] == '\\') {
      ++i;
    } else if (text[i] == q) {
      if (q == '\'' && i + 1 < text.size() && text[i + 1] == '\'') {
        ++i;  // '' is a quote inside a single-quoted scalar
        continue;
      }
      return;
    }
  }
  fail(ErrorKind::kConfig, "{}:{}:{}: the quote {} opened here is never closed", path.string(), m.line + 1,
       m.column + 1, q);
}

// Where each document yaml-cpp's parser reports starts; the rest of the events are not needed.
class DocumentStarts final : public YAML::EventHandler {
 public:
  std::vector<YAML::Mark> starts;
  void OnDocumentStart(const YAML::Mark& mark) override { starts.push_back(mark); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
  }
  void OnMapEnd() override {}
};

// The file's top-level map (a null node for an empty file).
const YAML::Node parse_yaml_file(const fs::path& path, std::string_view what) {
  std::string text = read_text_file(path, what);
  YAML::Node root;
  try {
    // One document per file: a second one (after `---`) would be ignored, so it is refused. The
    // parser is asked for two documents at most: yaml-cpp 0.7's LoadAll never ends on a stray ','
    // at the top level (each call returns one more empty document; the fuzzer found it).
    std::istringstream in(text);
    YAML::Parser parser(in);
    DocumentStarts docs;
    for (int n = 0; n < 2 && parser.HandleNextDocument(docs); ++n) {
    }
    if (docs.starts.size() > 1)
      fail(ErrorKind::kConfig, "{}:{}: a second YAML document; a config file holds one", path.string(),
           docs.starts[1].line + 1);
    if (!docs.starts.empty()) root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    fail(ErrorKind::kConfig, "{}:{}:{}: malformed YAML: {}", path.string(), e.mark.line + 1,
         e.mark.column + 1, e.msg);
  }
  check_quotes_closed(text, root, path);
  if (!root.IsNull() && !root.IsMap())
    fail(ErrorKind::kConfig, "{}: expected `key: value` lines at the top level, found a {}", path.string(),
         root.IsSequence() ? "list" : "single value");
  return root;
}

// Applies every `key: value` of a file to cfg; returns the keys it set.
std::set<std::string> apply_yaml_file(const fs::path& path, const YAML::Node& root, Config& cfg) {
  std::map<std::string, int> line_of;
  for (const auto& kv : root) {
    int line = kv.first.Mark().line + 1;
    Origin o{fmt::format("{}:{}", path.string(), line)};
    if (!kv.first.IsScalar()) fail(ErrorKind::kConfig, "{}: a key must be a name", o.where);
    const std::string& key = kv.first.Scalar();
    if (auto [it, fresh] = line_of.emplace(key, line); !fresh)
      fail(ErrorKind::kConfig, "config key '{}' appears twice in {} (lines {} and {})", key, path.string(),
           it->second, line);
    const FieldSpec* f = config::find_field(key);
    if (!f) unknown_key(key, o);
    config::set_field(*f, cfg, kv.second, o);
  }
  std::set<std::string> keys;
  for (const auto& [k, line] : line_of) keys.insert(k);
  return keys;
}

struct Override {
  const FieldSpec* field;
  std::string text;
};

std::vector<Override> parse_overrides(std::span<const std::string> args) {
  const Origin cli{"command line"};
  std::vector<Override> out;
  std::map<std::string, std::string> seen;
  for (const std::string& arg : args) {
    size_t eq = arg.find('=');
    if (eq == std::string::npos || eq == 0)
      fail(ErrorKind::kConfig,
           "'{}' is not a key=value override (arguments after the config file look like steps=100)", arg);
    std::string key = arg.substr(0, eq);
    if (auto [it, fresh] = seen.emplace(key, arg); !fresh)
      fail(ErrorKind::kConfig, "config key '{}' is given twice on the command line ({} and {})", key,
           it->second, arg);
    const FieldSpec* f = config::find_field(key);
    if (!f) unknown_key(key, cli);
    out.push_back({f, arg.substr(eq + 1)});
  }
  return out;
}

std::vector<std::string> available_models(const std::vector<fs::path>& dirs) {
  std::set<std::string> names;
  for (const fs::path& d : dirs) {
    std::error_code ec;
    for (fs::directory_iterator it(d, ec), end; !ec && it != end; it.increment(ec))
      if (it->path().extension() == ".yml") names.insert(it->path().stem().string());
  }
  return {names.begin(), names.end()};
}

fs::path find_model_file(const std::string& name, const fs::path& config_file, const Origin& origin) {
  if (name.empty() || name.find('/') != std::string::npos || name.front() == '.')
    fail(ErrorKind::kConfig, "config key 'model_name' ({}): '{}' is not a preset name", origin.where, name);
  std::vector<fs::path> dirs = model_search_path(config_file);
  std::string searched;
  for (const fs::path& d : dirs) {
    fs::path p = d / (name + ".yml");
    std::error_code ec;
    if (fs::is_regular_file(p, ec)) return p;
    searched += (searched.empty() ? "" : ", ") + d.string();
  }
  std::vector<std::string> models = available_models(dirs);
  fail(ErrorKind::kConfig, "config key 'model_name' ({}): no preset '{}.yml' in {}; available models: {}",
       origin.where, name, searched, models.empty() ? "none" : fmt::format("{}", fmt::join(models, ", ")));
}

}  // namespace

Config default_config() {
  static const Config defaults = [] {
    Config c{};
    for (const FieldSpec& f : config::schema())
      config::set_field(f, c, YAML::Load(std::string(f.default_yaml)), Origin{"schema default"});
    return c;
  }();
  return defaults;
}

std::vector<fs::path> model_search_path(const fs::path& config_file) {
  std::vector<fs::path> dirs = {config_file.parent_path() / "models"};
  fs::path source_models = tessera::source_dir() / "configs" / "models";
  std::error_code ec;
  if (!fs::equivalent(dirs[0], source_models, ec)) dirs.push_back(source_models);
  return dirs;
}

Config load_config(const fs::path& config_file, std::span<const std::string> overrides,
                   const DeviceCount& devices) {
  const Origin cli{"command line"};
  std::vector<Override> args = parse_overrides(overrides);  // syntax and key names first: cheapest to fix
  Config cfg = default_config();
  // const: lookups with operator[] on a non-const node would insert the key.
  const YAML::Node root = parse_yaml_file(config_file, "config file");
  apply_yaml_file(config_file, root, cfg);

  // The preset named on the command line wins over the one named in the file.
  Origin model_origin{config_file.string()};
  if (root.IsMap() && root["model_name"])
    model_origin.where += fmt::format(":{}", root["model_name"].Mark().line + 1);
  for (const Override& a : args) {
    if (a.field->name == "model_name" || a.field->name == "override_model_config") {
      config::set_field_from_text(*a.field, cfg, a.text, cli);
      if (a.field->name == "model_name") model_origin = cli;
    }
  }
  fs::path model_file;
  std::set<std::string> model_keys;
  if (cfg.model_name != "default") {
    model_file = find_model_file(cfg.model_name, config_file, model_origin);
    const YAML::Node model_root = parse_yaml_file(model_file, "model preset");
    for (const char* key : {"model_name", "override_model_config"})
      if (model_root.IsMap() && model_root[key])
        fail(ErrorKind::kConfig, "{}:{}: a model preset cannot set {}", model_file.string(),
             model_root[key].Mark().line + 1, key);
    model_keys = apply_yaml_file(model_file, model_root, cfg);
  }

  for (const Override& a : args) {
    if (model_keys.count(std::string(a.field->name)) && !cfg.override_model_config)
      fail(ErrorKind::kConfig,
           "config key '{}' is set by the model preset {}; to replace it on the command line add "
           "override_model_config=true",
           a.field->name, model_file.string());
    config::set_field_from_text(*a.field, cfg, a.text, cli);
  }
  finalize_config(cfg, devices);
  return cfg;
}

}  // namespace tessera
