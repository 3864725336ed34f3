// tessera <command> CONFIG [key=value ...]: the command-line entry point.
//
// CLI11 fits this shape: each command is a subcommand with a positional CONFIG and a positional
// list of key=value overrides, and CLI11 gives --help for the program and for every command.
// Its parse errors are reported in Tessera's format (one "tessera: error: " line, exit 2).
// The command bodies live in commands.cc, where tests can reach them.
#include <CLI/CLI.hpp>
#include <iostream>

#include "tessera/cli/commands.h"
#include "tessera/core/cpu_features.h"

namespace {

using tessera::cli::ConfigArgs;

constexpr const char* kFooter =
    "Exit codes: 0 success, 1 failure, 2 usage or config error, 3 not in this build yet,\n"
    "4 the run does not fit (compile).\n"
    "Example: tessera train configs/base.yml run_name=my_run model_name=llama-test steps=100";

void add_config_args(CLI::App* sub, ConfigArgs& args) {
  sub->add_option("CONFIG", args.config_file, "YAML config file, e.g. configs/base.yml")->required();
  sub->add_option("OVERRIDES", args.overrides, "key=value settings that replace the file's (see help-config)")
      ->option_text("key=value ...");
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tessera::cli;
  CLI::App app{"Tessera: LLM pre-training and inference, configured like MaxText.", "tessera"};
  app.footer(kFooter);
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("tessera ") + std::string(kVersion));

  ConfigArgs args;
  std::string key;
  bool yaml = false;
  CLI::App* show =
      app.add_subcommand("show-config", "Print the resolved config (files and overrides applied) as YAML.");
  add_config_args(show, args);
  CLI::App* help = app.add_subcommand("help-config", "List every config key, or describe one.");
  help->add_option("KEY", key, "a config key");
  help->add_flag("--yaml", yaml, "print every key at its default as a commented YAML file");
  CLI::App* ver = app.add_subcommand("version", "Print the version and the CPU kernels this machine uses.");
  CLI::App* train_cmd =
      app.add_subcommand("train", "Train a model; resumes from the latest checkpoint of run_name.");
  add_config_args(train_cmd, args);
  CLI::App* tok_cmd =
      app.add_subcommand("train-tokenizer", "Train a SentencePiece tokenizer on dataset_path.");
  add_config_args(tok_cmd, args);
  CLI::App* prep_cmd =
      app.add_subcommand("prepare-data", "Tokenize dataset_path into token shards (data_output_path).");
  add_config_args(prep_cmd, args);
  CLI::App* decode_cmd = app.add_subcommand(
      "decode",
      "Complete `prompt` (or prompts_file) with the model at load_parameters_path, using a KV cache.");
  add_config_args(decode_cmd, args);
  ConvertArgs conv;
  CLI::App* convert_cmd = add_convert_command(app, conv);
  CLI::App* serve_cmd = app.add_subcommand(
      "serve",
      "Serve OpenAI-compatible completions over HTTP (needs load_parameters_path and tokenizer_path).");
  add_config_args(serve_cmd, args);
  bool search = false;
  CLI::App* compile_cmd = app.add_subcommand(
      "compile",
      "Plan a run for compile_topology without its hardware: memory per device and whether it fits, "
      "FLOPs, collectives, estimated step time and MFU (docs/compile.md).");
  add_config_args(compile_cmd, args);
  compile_cmd->add_flag(
      "--search", search,
      "rank the meshes, remat policies and per-device batches that fit by estimated throughput");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    std::cerr << "tessera: error: " << e.what() << "\nRun 'tessera --help' for usage.\n";
    return kExitUsage;
  }

  return run_guarded(
      [&]() -> int {
        tessera::active_isa();  // checks TESSERA_ISA before any command starts (a kConfig error)
        if (show->parsed()) return show_config(args, std::cout);
        if (help->parsed())
          return help_config(key.empty() ? std::nullopt : std::optional(key), yaml, std::cout);
        if (ver->parsed()) return version(std::cout);
        if (train_cmd->parsed()) return train(args, std::cout);
        if (tok_cmd->parsed()) return train_tokenizer(args, std::cout);
        if (prep_cmd->parsed()) return prepare_data(args, std::cout, std::cerr);
        if (decode_cmd->parsed()) return decode(args, std::cout, std::cerr);
        if (convert_cmd->parsed()) return convert(conv, std::cout);
        if (serve_cmd->parsed()) return serve(args, std::cout);
        if (compile_cmd->parsed()) return compile(args, search, std::cout);
        return kExitUsage;  // unreachable: CLI11 requires one subcommand
      },
      std::cerr);
}
