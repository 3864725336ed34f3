// The bodies of `tessera <command>`, kept out of main.cc so that tests can run them in-process.
// main.cc parses argv (CLI11) and calls these; cli/ is the only part of Tessera that chooses exit
// codes, and it chooses them here:
//   0 success, 1 any other failure, 2 usage or config error, 3 command not in this build yet,
//   4 `tessera compile`: the run does not fit in the target's memory.
// Errors go to `err` as one line starting "tessera: error: ".
#pragma once

#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace CLI {
class App;
}

namespace tessera::cli {

// kExitDoesNotFit: `tessera compile` found the plan larger than the device; kExitHang: the hang
// watchdog stopped the job (train/diagnostics.h).
enum ExitCode : int { kExitOk = 0, kExitFailure = 1, kExitUsage = 2, kExitDoesNotFit = 4, kExitHang = 5 };

inline constexpr std::string_view kVersion = "0.1.0";

// A command's positional arguments: the config file and its key=value overrides.
struct ConfigArgs {
  std::string config_file;
  std::vector<std::string> overrides;
};

// Runs `body`, turning a thrown tessera::Error or std::exception into a message on `err` and
// the exit code for its kind (kConfig -> 2, anything else -> 1).
int run_guarded(const std::function<int()>& body, std::ostream& err);

// `tessera show-config CONFIG [k=v ...]`: the resolved config as YAML on `out`.
int show_config(const ConfigArgs& args, std::ostream& out);

// `tessera help-config [KEY] [--yaml]`: every key (type, default, allowed values, help), or one
// key in detail; with yaml, every key at its default as a commented YAML file.
int help_config(const std::optional<std::string>& key, bool yaml, std::ostream& out);

// `tessera version`.
int version(std::ostream& out);

// `tessera train CONFIG [k=v ...]`: load and validate the config, write the resolved config, and
// run the training loop, logging to `out`.
int train(const ConfigArgs& args, std::ostream& out);

// `tessera train-tokenizer CONFIG [k=v ...]`: a SentencePiece model from dataset_path's text.
int train_tokenizer(const ConfigArgs& args, std::ostream& out);

// `tessera prepare-data CONFIG [k=v ...]`: dataset_path's text or JSONL into token shards under
// data_output_path, with a progress bar on `err`.
int prepare_data(const ConfigArgs& args, std::ostream& out, std::ostream& err);

// `tessera decode CONFIG [k=v ...]`: completions of `prompt` (or of prompts_file's lines) from the
// model at load_parameters_path, with a KV cache (cmd_decode.cc); completions on `out`, the log
// (timings, stop reasons) on `err`.
int decode(const ConfigArgs& args, std::ostream& out, std::ostream& err);

// `tessera convert --from hf|tessera --to tessera|hf SOURCE OUT_DIR [options] [key=value ...]`
// (cmd_convert.cc; docs/convert.md).
struct ConvertArgs {
  std::string from, to;                // "hf" | "tessera"
  std::string source, out_dir;         // HF folder or Tessera checkpoint; the new folder
  std::string config_file;             // --config (to hf): the checkpoint's config
  std::vector<std::string> overrides;  // key=value over that config (to hf)
  std::string dtype;                   // --dtype: "" | float32 | bfloat16
  std::string max_shard_size;          // --max-shard-size (to hf): "" = 5GB
};
// Declares the subcommand and its options on `app` (main.cc calls it; CLI11 fills `args`).
CLI::App* add_convert_command(CLI::App& app, ConvertArgs& args);
int convert(const ConvertArgs& args, std::ostream& out);

// `tessera serve CONFIG [k=v ...]`: the OpenAI-compatible HTTP server (cmd_serve.cc) until SIGINT
// or SIGTERM; the address and one line per request go to `out`.
int serve(const ConfigArgs& args, std::ostream& out);

// `tessera compile CONFIG [k=v ...] [--search]` (cmd_compile.cc; docs/compile.md): plans the run
// for compile_topology without its hardware; prints memory per device with a verdict and the cost
// analysis, writes compiled_trainstep_file when set. kExitDoesNotFit when it does not fit (with
// --search: when no layout fits).
int compile(const ConfigArgs& args, bool search, std::ostream& out);

}  // namespace tessera::cli
