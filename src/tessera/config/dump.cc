// The config written back out as YAML (resolved-config dump, `tessera show-config`, and the
// commented starter file that configs/base.yml is made from), and the atomic write of the dump to
// {base_output_directory}/{run_name}/config.yml.
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "tessera/config/config.h"
#include "tessera/config/schema.h"
#include "tessera/core/error.h"
#include "tessera/core/file.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using config::FieldSpec;
using config::FieldType;

constexpr size_t kCommentWidth = 100;

// `text` as '# ' comment lines of at most kCommentWidth columns, broken at spaces.
void append_comment(std::string& out, std::string_view text) {
  auto flush = [&out](const std::string& line) { fmt::format_to(std::back_inserter(out), "# {}\n", line); };
  std::string line;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find(' ', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view word = text.substr(pos, end - pos);
    if (!line.empty() && 2 + line.size() + 1 + word.size() > kCommentWidth) {
      flush(line);
      line.clear();
    }
    if (!line.empty()) line += ' ';
    line += word;
    pos = end + 1;
  }
  if (!line.empty()) flush(line);
}

std::string field_line(const FieldSpec& f, const Config& cfg) {
  if (f.type == FieldType::kAxisRules) {
    const auto& rules = cfg.*std::get<std::vector<AxisRule> Config::*>(f.member);
    if (rules.empty()) return fmt::format("{}: []\n", f.name);
    std::string out = fmt::format("{}:\n", f.name);
    for (const AxisRule& r : rules) {
      std::vector<std::string> axes;
      for (const std::string& a : r.mesh_axes) axes.push_back(config::yaml_quote(a));
      out += fmt::format("  - [{}, [{}]]\n", config::yaml_quote(r.logical), fmt::join(axes, ", "));
    }
    return out;
  }
  if (f.name == "model_name" && cfg.model_name != "default")
    return fmt::format(
        "model_name: \"default\"  # resolved from preset {}: its values are written out here\n",
        config::yaml_quote(cfg.model_name));
  return fmt::format("{}: {}\n", f.name, config::format_value(f, cfg));
}

std::string mesh_line(const std::array<int64_t, kNumMeshAxes>& sizes) {
  std::vector<std::string> parts;
  for (int i = 0; i < kNumMeshAxes; ++i) parts.push_back(fmt::format("{}: {}", kMeshAxes[i].axis, sizes[i]));
  return fmt::format("{{{}}}", fmt::join(parts, ", "));
}

void append_derived(std::string& out, const Config& cfg) {
  out += "\n# ---- derived from the keys above (not keys) ----\n";
  const std::pair<const char*, int64_t> values[] = {
      {"emb_dim", cfg.emb_dim},
      {"num_query_heads", cfg.num_query_heads},
      {"num_kv_heads", cfg.num_kv_heads},
      {"mlp_dim", cfg.mlp_dim},
      {"moe_mlp_dim", cfg.moe_mlp_dim},
      {"num_decoder_layers", cfg.num_decoder_layers},
      {"num_devices", cfg.num_devices},
      {"num_slices", cfg.num_slices},
      {"micro_batch_size_to_train_on", cfg.micro_batch_size_to_train_on},
      {"global_batch_size_to_train_on", cfg.global_batch_size_to_train_on},
      {"global_batch_size_to_eval_on", cfg.global_batch_size_to_eval_on},
      {"lr_schedule_steps", cfg.lr_schedule_steps},
  };
  for (const auto& [name, v] : values) out += fmt::format("# {}: {}\n", name, v);
  out += fmt::format("# ici_parallelism: {}\n", mesh_line(cfg.ici_parallelism));
  out += fmt::format("# dcn_parallelism: {}\n", mesh_line(cfg.dcn_parallelism));
}

}  // namespace

std::string config_to_yaml(const Config& cfg, const YamlOptions& options) {
  std::string out;
  if (!options.header.empty()) append_comment(out, options.header);
  std::string_view group;
  for (const FieldSpec& f : config::schema()) {
    if (f.group != group) {
      group = f.group;
      out += fmt::format("{}# ---- {} ----\n", out.empty() ? "" : "\n", group);
    }
    if (options.help_comments) {
      out += "\n";
      append_comment(out, f.help);
      std::string allowed = config::describe_allowed(f);
      if (!allowed.empty() && f.type != FieldType::kBool && f.type != FieldType::kAxisRules)
        append_comment(out, "Allowed: " + allowed + ".");
    }
    out += field_line(f, cfg);
  }
  if (options.derived) append_derived(out, cfg);
  return out;
}

fs::path write_resolved_config(const Config& cfg) {
  if (cfg.run_name.empty())
    fail(ErrorKind::kConfig,
         "run_name is empty: name the run (e.g. run_name=my_run); its outputs go to {}/<run_name>/",
         cfg.base_output_directory);
  const fs::path dir = fs::path(cfg.base_output_directory) / cfg.run_name;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail(ErrorKind::kIo, "cannot create the run folder '{}': {}", dir.string(), ec.message());
  fs::path path = dir / "config.yml";
  write_file_atomically(path,
                        config_to_yaml(cfg, {.header = "Resolved Tessera config: every key with the value "
                                                       "this run used. Load it as a config file to run "
                                                       "again with the same settings."}));
  return path;
}

}  // namespace tessera
