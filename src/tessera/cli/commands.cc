// The bodies of the tessera commands and the mapping from failures to exit codes (commands.h).
#include "tessera/cli/commands.h"

#include <fmt/format.h>
#include <fmt/ostream.h>

#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>

#include "tessera/cli/sample.h"
#include "tessera/compile/plan_file.h"
#include "tessera/config/config.h"
#include "tessera/config/schema.h"
#include "tessera/core/cpu_features.h"
#include "tessera/core/error.h"
#include "tessera/core/file.h"
#include "tessera/core/stack_trace.h"
#include "tessera/data/prepare.h"
#include "tessera/data/tokenizer.h"
#include "tessera/data/tokenizer_sentencepiece.h"
#include "tessera/dist/mesh.h"
#include "tessera/dist/mpi_communicator.h"
#include "tessera/graph/plan.h"
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

namespace {

// Under MPI a failing rank ends the whole job: the others may wait in a collective for it forever.
// MPI_Abort's code becomes mpirun's exit status.
int fail_job(const char* what, int code, std::ostream& err) {
  if (!dist::mpi_active()) {
    fmt::print(err, "tessera: error: {}\n", what);
    return code;
  }
  const auto [rank, size] = dist::mpi_world_rank_size();
  fmt::print(err, "tessera: error (rank {} of {}): {}\n", rank, size, what);
  err.flush();
  if (size > 1) dist::abort_job(code);
  return code;
}

}  // namespace

int run_guarded(const std::function<int()>& body, std::ostream& err) {
  try {
    return body();
  } catch (const Error& e) {
    return fail_job(e.what(), e.kind() == ErrorKind::kConfig ? kExitUsage : kExitFailure, err);
  } catch (const std::exception& e) {
    return fail_job(e.what(), kExitFailure, err);
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
  const Isa active = active_isa(), best = best_isa();
  std::string isa(isa_name(active));
  if (active != best) isa += fmt::format(" (set by TESSERA_ISA; this CPU's best: {})", isa_name(best));
  fmt::print(out, "tessera {}\nCPU kernels: {}\n", kVersion, isa);
  return kExitOk;
}

namespace {

std::vector<std::string> split_paths(const std::string& s) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t end = std::min(s.find(',', pos), s.size());
    if (end > pos) out.push_back(s.substr(pos, end - pos));
    pos = end + 1;
  }
  return out;
}

data::SentencePieceTrainReport train_tokenizer_from(const Config& cfg, std::ostream& out) {
  data::SentencePieceTrainOptions o;
  o.inputs = split_paths(cfg.dataset_path);
  o.model_path = cfg.tokenizer_path;
  o.vocab_size = cfg.vocab_size;
  o.model_type = cfg.tokenizer_model_type;
  o.max_corpus_chars = cfg.max_corpus_chars;
  o.byte_fallback = cfg.tokenizer_byte_fallback;
  fmt::print(out, "training a {} SentencePiece tokenizer of {} pieces on at most {} characters of {}\n",
             o.model_type, o.vocab_size, o.max_corpus_chars, cfg.dataset_path);
  data::SentencePieceTrainReport r = data::train_sentencepiece(o);
  fmt::print(out, "wrote {} ({} lines, {} characters, {:.1f} s)\n", o.model_path.string(), r.sentences,
             r.chars, r.seconds);
  return r;
}

}  // namespace

namespace {
// The training run and the sample after it, on every rank of `mesh`.
void train_and_sample(const Config& cfg, train::Trainer& trainer, std::ostream& log);

// compiled_trainstep_file: this rank's plan, built as the trainer will build it (nothing
// allocated), against the file `tessera compile` wrote; the first difference stops the run.
void check_compiled_plan(const Config& cfg, const dist::Mesh& mesh, std::ostream& log) {
  dist::MeshSizes coords{};
  for (int a = 0; a < kNumMeshAxes; ++a) coords[a] = mesh.coord(static_cast<MeshAxis>(a));
  const compile::RankPlan rank = compile::build_rank_plan(cfg, coords);
  compile::check_plan_file(cfg.compiled_trainstep_file, cfg, rank);
  fmt::print(log, "plan: matches compiled_trainstep_file {} (model, sizes, mesh, {} nodes, {} collectives)\n",
             cfg.compiled_trainstep_file, rank.plan.nodes().size(), rank.plan.collectives().size());
}
}  // namespace

int train(const ConfigArgs& args, std::ostream& out) {
  // Under mpirun or srun every rank runs this; the world comes first: the config is resolved for
  // the job's devices (ranks) and slices (hosts).
  std::unique_ptr<dist::Communicator> world = dist::make_world_communicator();
  const DeviceCount devices = dist::count_devices(*world);
  const bool first = world->rank() == 0;
  std::ostream silent(nullptr);  // the other ranks' log: rank 0 speaks for the job
  std::ostream& log = first ? out : silent;
  Config cfg = load_config(args.config_file, args.overrides, devices);
  if (first) {
    std::filesystem::path dump = write_resolved_config(cfg);
    fmt::print(out, "tessera train: run {}, resolved config written to {}\n", cfg.run_name, dump.string());
    // As MaxText does: a text dataset whose SentencePiece model does not exist yet gets one trained.
    if (cfg.dataset_type == "text" && cfg.tokenizer_type == "sentencepiece" && !cfg.tokenizer_path.empty() &&
        !std::filesystem::exists(cfg.tokenizer_path)) {
      fmt::print(out, "tokenizer {} does not exist: ", cfg.tokenizer_path);
      train_tokenizer_from(cfg, out);
    }
  }
  world->barrier();  // the tokenizer exists for every rank
  std::unique_ptr<dist::Mesh> mesh = dist::make_mesh(cfg, std::move(world));
  if (!cfg.compiled_trainstep_file.empty()) check_compiled_plan(cfg, *mesh, log);
  // The hang watchdog's verdict ends this process from the watchdog thread (the main thread is the
  // one that is stuck, possibly inside MPI): every rank's watchdog fires, and mpirun ends the job
  // when the first one exits.
  train::Diagnostics::set_hang_handler([](const std::string& message) {
    fmt::print(stderr, "tessera: error (rank {} of {}): {}\n", activity().rank.load(),
               activity().world_size.load(), message);
    std::fflush(stderr);
    std::_Exit(kExitHang);
  });
  // A shape the plan cannot hold (a size past 64 bits) comes from the config: said with its keys.
  std::unique_ptr<train::Trainer> made;
  try {
    made = std::make_unique<train::Trainer>(cfg, log, mesh.get());
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kShape) throw;
    fail(ErrorKind::kConfig,
         "{}; the plan's shapes come from base_emb_dim, base_mlp_dim, base_num_query_heads, "
         "base_num_kv_heads, "
         "head_dim, base_num_decoder_layers, vocab_size, per_device_batch_size and max_target_length",
         e.what());
  }
  train::Trainer& trainer = *made;
  try {
    train_and_sample(cfg, trainer, log);
  } catch (const std::exception& e) {
    // Abort the job here, while the trainer is alive: unwinding would destroy it, and its
    // destructors wait for collectives in flight, which peers stuck elsewhere never finish.
    const auto* err = dynamic_cast<const Error*>(&e);
    if (mesh->num_devices() > 1)
      fail_job(e.what(), err && err->kind() == ErrorKind::kConfig ? kExitUsage : kExitFailure, std::cerr);
    throw;
  }
  return kExitOk;
}

namespace {

void train_and_sample(const Config& cfg, train::Trainer& trainer, std::ostream& log) {
  train::RunResult r = trainer.run();
  // With a tokenizer to read it, the prompt's continuation shows what the model learnt. Every rank
  // runs the forward passes (their collectives need all; tensor ranks gather the logits' row).
  if (!cfg.prompt.empty() && !cfg.tokenizer_path.empty() && r.stop_signal == 0) {
    auto tok = data::load_tokenizer(cfg.tokenizer_type, cfg.tokenizer_path);
    SampleOptions so{.prompt = cfg.prompt,
                     .max_new_tokens = std::max<int64_t>(1, cfg.max_target_length / 2),
                     .strategy = cfg.decode_sampling_strategy,
                     .temperature = cfg.decode_sampling_temperature,
                     .seed = static_cast<uint64_t>(cfg.init_weights_seed)};
    so.max_new_tokens = std::min<int64_t>(so.max_new_tokens, 96);
    try {
      fmt::print(log, "sample ({}): {}\n", cfg.decode_sampling_strategy, sample_text(trainer, *tok, so));
    } catch (const Error& e) {  // a family the decoding engine does not run yet: the run itself is done
      if (e.kind() != ErrorKind::kConfig) throw;
      fmt::print(log, "sample: skipped, the decoding engine cannot run this model: {}\n", e.what());
    }
  }
}

}  // namespace

int train_tokenizer(const ConfigArgs& args, std::ostream& out) {
  Config cfg = load_config(args.config_file, args.overrides);
  if (cfg.tokenizer_type != "sentencepiece")
    fail(ErrorKind::kConfig, "tokenizer_type={}: Tessera trains sentencepiece tokenizers only",
         cfg.tokenizer_type);
  if (cfg.dataset_path.empty() || cfg.tokenizer_path.empty())
    fail(ErrorKind::kConfig,
         "train-tokenizer needs dataset_path (the text) and tokenizer_path (the .model to write)");
  train_tokenizer_from(cfg, out);
  return kExitOk;
}

int prepare_data(const ConfigArgs& args, std::ostream& out, std::ostream& err) {
  Config cfg = load_config(args.config_file, args.overrides);
  if (cfg.dataset_path.empty() || cfg.data_output_path.empty() || cfg.tokenizer_path.empty())
    fail(ErrorKind::kConfig,
         "prepare-data needs dataset_path (text or JSONL inputs), tokenizer_path and data_output_path (the "
         "shard folder)");
  auto tok = data::load_tokenizer(cfg.tokenizer_type, cfg.tokenizer_path);
  data::PrepareDataOptions o;
  o.inputs = split_paths(cfg.dataset_path);
  o.out_dir = cfg.data_output_path;
  o.tokens_per_shard = cfg.tokens_per_shard;
  auto last = std::chrono::steady_clock::now() - std::chrono::seconds(1);
  data::PrepareReport r = data::prepare_data(o, *tok, [&](const data::PrepareProgress& p) {
    auto now = std::chrono::steady_clock::now();
    if (now - last < std::chrono::milliseconds(200) && p.bytes_read < p.bytes_total) return;
    last = now;
    const double frac =
        p.bytes_total ? static_cast<double>(p.bytes_read) / static_cast<double>(p.bytes_total) : 1.0;
    const int filled = static_cast<int>(frac * 30);
    fmt::print(err, "\r[{:<30}] {:5.1f}%  {:.1f} MB  {} documents  {} tokens  {} shards",
               std::string(filled, '#'), 100 * frac, static_cast<double>(p.bytes_read) / 1e6, p.documents,
               p.tokens, p.shards);
    err.flush();
  });
  fmt::print(err, "\n");
  fmt::print(
      out,
      "prepare-data: {} documents, {} tokens from {:.1f} MB of text into {} shards under {} ({:.1f} s)\n",
      r.documents, r.tokens, static_cast<double>(r.bytes) / 1e6, r.shards.size(), o.out_dir.string(),
      r.seconds);
  return kExitOk;
}

}  // namespace tessera::cli
