// The bodies of the tessera commands and the mapping from failures to exit codes (commands.h).
#include "tessera/cli/commands.h"

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "tessera/config/config.h"
#include "tessera/config/schema.h"
#include "tessera/core/cpu_features.h"
#include "tessera/core/error.h"
#include "tessera/train/trainer.h"

namespace tessera::cli {
namespace {

using config::FieldSpec;
using config::FieldType;

// `text` broken at spaces into lines of at most `width` columns, each starting with `indent`.
std::string wrap(std::string_view text, std::string_view indent, size_t width = 100) {
  std::string out, line;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = std::min(text.find(' ', pos), text.size());
    std::string_view word = text.substr(pos, end - pos);
    if (!line.empty() && indent.size() + line.size() + 1 + word.size() > width) {
      fmt::format_to(std::back_inserter(out), "{}{}\n", indent, line);
      line.clear();
    }
    if (!line.empty()) line += ' ';
    line += word;
    pos = end + 1;
  }
  if (!line.empty()) fmt::format_to(std::back_inserter(out), "{}{}\n", indent, line);
  return out;
}

void print_key_summary(const FieldSpec& f, const Config& defaults, std::ostream& out) {
  std::string allowed = config::describe_allowed(f);
  std::string def = config::format_value(f, defaults);
  if (f.type == FieldType::kAxisRules)
    def = fmt::format("{} rules (see help-config {})", defaults.logical_axis_rules.size(), f.name);
  fmt::print(out, "  {} ({}, default {})\n", f.name, config::field_type_name(f.type), def);
  if (!allowed.empty() && f.type != FieldType::kBool) out << wrap("allowed: " + allowed, "      ");
  out << wrap(f.help, "      ");
}

void print_key_detail(const FieldSpec& f, const Config& defaults, std::ostream& out) {
  fmt::print(out, "{}\n", f.name);
  fmt::print(out, "  group:    {}\n", f.group);
  fmt::print(out, "  type:     {}\n", config::field_type_name(f.type));
  if (f.type == FieldType::kAxisRules) {
    fmt::print(out, "  default:\n");
    for (const AxisRule& r : defaults.logical_axis_rules)
      fmt::print(out, "    - [{}, [{}]]\n", r.logical, fmt::join(r.mesh_axes, ", "));
  } else {
    fmt::print(out, "  default:  {}\n", config::format_value(f, defaults));
  }
  std::string allowed = config::describe_allowed(f);
  if (!allowed.empty()) out << wrap("allowed:  " + allowed, "  ");
  if (!f.unsupported.empty())
    fmt::print(out, "  MaxText values Tessera does not support: {}\n", fmt::join(f.unsupported, ", "));
  out << "\n" << wrap(f.help, "  ");
}

}  // namespace

const std::vector<PlannedCommand>& planned_commands() {
  static const std::vector<PlannedCommand> commands = {
      {"decode", "Generate text from a prompt with a KV cache.", "decoding"},
      {"serve", "Serve OpenAI-compatible completions over HTTP.", "the HTTP server"},
      {"compile", "Plan a run for compile_topology without its hardware: memory, FLOPs, collectives.",
       "the ahead-of-time planner"},
      {"convert", "Convert checkpoints to and from the Hugging Face safetensors layout.",
       "checkpoint conversion"},
      {"prepare-data", "Tokenize a text corpus into token shards.", "data preparation"},
      {"train-tokenizer", "Train a tokenizer on a text corpus.", "tokenizer training"},
  };
  return commands;
}

int run_guarded(const std::function<int()>& body, std::ostream& err) {
  try {
    return body();
  } catch (const Error& e) {
    fmt::print(err, "tessera: error: {}\n", e.what());
    return e.kind() == ErrorKind::kConfig ? kExitUsage : kExitFailure;
  } catch (const std::exception& e) {
    fmt::print(err, "tessera: error: {}\n", e.what());
    return kExitFailure;
  }
}

int show_config(const ConfigArgs& args, std::ostream& out) {
  Config cfg = load_config(args.config_file, args.overrides);
  out << config_to_yaml(cfg, {.header = fmt::format("Resolved from {}", args.config_file)});
  return kExitOk;
}

int help_config(const std::optional<std::string>& key, bool yaml, std::ostream& out) {
  const Config defaults = default_config();
  if (yaml) {
    out << config_to_yaml(defaults,
                          {.header = "Tessera config: every key at its default, with what it does "
                                     "(written by `tessera help-config --yaml`). Use: tessera train "
                                     "configs/base.yml run_name=NAME [key=value ...]; model_name=NAME "
                                     "loads the preset configs/models/NAME.yml over this file. "
                                     "`tessera help-config KEY` says more about one key.",
                           .help_comments = true,
                           .derived = false});
    return kExitOk;
  }
  if (key) {
    const FieldSpec* f = config::find_field(*key);
    if (!f) {
      std::string hint = config::closest_key(*key);
      fail(ErrorKind::kConfig, "unknown config key '{}'{}", *key,
           hint.empty() ? "" : fmt::format("; did you mean '{}'?", hint));
    }
    print_key_detail(*f, defaults, out);
    return kExitOk;
  }
  out << "Tessera config keys. Set them in the YAML config file or as key=value after it on the command "
         "line;\n"
         "`tessera help-config KEY` shows one key in detail.\n";
  std::string_view group;
  for (const FieldSpec& f : config::schema()) {
    if (f.group != group) fmt::print(out, "\n{}:\n", group = f.group);
    print_key_summary(f, defaults, out);
  }
  return kExitOk;
}

int version(std::ostream& out) {
  std::string isa;
  try {
    isa = std::string(isa_name(best_isa()));
  } catch (const Error&) {
    isa = "none (this CPU lacks AVX2 + FMA)";
  }
  fmt::print(out, "tessera {}\nCPU kernels: {}\n", kVersion, isa);
  return kExitOk;
}

int train(const ConfigArgs& args, std::ostream& out) {
  Config cfg = load_config(args.config_file, args.overrides);
  std::filesystem::path dump = write_resolved_config(cfg);
  fmt::print(out, "tessera train: run {}, resolved config written to {}\n", cfg.run_name, dump.string());
  train::Trainer trainer(cfg, out);
  trainer.run();
  return kExitOk;
}

int planned_command(const PlannedCommand& command, const ConfigArgs& args, std::ostream& out,
                    std::ostream& err) {
  Config cfg = load_config(args.config_file, args.overrides);
  set_num_threads(static_cast<int>(cfg.num_threads));
  std::filesystem::path dump = write_resolved_config(cfg);
  fmt::print(out, "tessera {}: resolved config written to {}\n", command.name, dump.string());
  fmt::print(err, "tessera {}: {} is not in this build yet\n", command.name, command.missing);
  return kExitNotImplemented;
}

}  // namespace tessera::cli
