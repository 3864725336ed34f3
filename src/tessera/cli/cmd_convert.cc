// `tessera convert`: its options (CLI11) and its body, which calls convert/hf_convert.h and reports
// what it wrote. The layouts, the field map and the errors are documented in docs/convert.md.
#include <fmt/format.h>
#include <fmt/ostream.h>

#include <CLI/CLI.hpp>

#include "tessera/cli/commands.h"
#include "tessera/convert/hf_convert.h"
#include "tessera/core/error.h"

namespace tessera::cli {

CLI::App* add_convert_command(CLI::App& app, ConvertArgs& a) {
  CLI::App* sub = app.add_subcommand(
      "convert",
      "Convert checkpoints (Llama, Mistral, Qwen, GPT-2, Mixtral, GPT-OSS, Gemma) between Hugging Face "
      "safetensors and Tessera checkpoints.");
  const auto sides = CLI::IsMember({"hf", "tessera"});
  sub->add_option("--from", a.from, "layout of SOURCE: hf or tessera")->required()->check(sides);
  sub->add_option("--to", a.to, "layout to write: tessera or hf")->required()->check(sides);
  sub->add_option(
         "SOURCE", a.source,
         "a Hugging Face model folder (config.json + safetensors), or a Tessera checkpoint folder or "
         "params.safetensors")
      ->required();
  sub->add_option("OUT_DIR", a.out_dir, "the folder to write; must not exist or be empty")->required();
  sub->add_option("OVERRIDES", a.overrides, "key=value settings over the checkpoint's config (--to hf)")
      ->option_text("key=value ...");
  sub->add_option("--config", a.config_file,
                  "--to hf: the YAML config of the checkpoint's model (default: the config in its manifest)");
  sub->add_option(
         "--dtype", a.dtype,
         "--to hf: dtype of the written tensors (default: the config's dtype); --to tessera: the compute "
         "dtype in model.yml (default: config.json's torch_dtype)")
      ->check(CLI::IsMember({"float32", "bfloat16"}));
  sub->add_option("--max-shard-size", a.max_shard_size,
                  "--to hf: largest safetensors file before sharding, e.g. 5GB (default), 500MB, 2GiB");
  sub->footer(
      "Examples:\n"
      "  tessera convert --from hf --to tessera hf/Llama-3.1-8B out/llama31 [--dtype bfloat16]\n"
      "  tessera train out/llama31/model.yml load_parameters_path=out/llama31 run_name=ft\n"
      "  tessera convert --from tessera --to hf runs/ft/checkpoints/1000 out/ft-hf [--dtype bfloat16] "
      "[--max-shard-size 5GB]\n"
      "  tessera convert --from tessera --to hf params.safetensors out/hf --config my.yml [key=value ...]\n"
      "See docs/convert.md.");
  return sub;
}

namespace {

void print_report(const convert::ConvertReport& r, std::ostream& out) {
  fmt::print(out, "  wrote {}: {}\n", r.out_dir.string(), fmt::join(r.files, ", "));
  fmt::print(out, "  {} parameter tensors, {} parameters\n", r.tensors, r.params);
  for (const std::string& s : r.skipped) fmt::print(out, "  skipped {}\n", s);
  for (const std::string& n : r.notes) fmt::print(out, "  note: {}\n", n);
}

}  // namespace

int convert(const ConvertArgs& a, std::ostream& out) {
  if (a.from == a.to)
    fail(ErrorKind::kConfig,
         "convert --from {} --to {}: nothing to convert (one side is hf, the other tessera)", a.from, a.to);
  if (a.to == "tessera") {
    auto refuse = [](bool given, const char* what) {
      if (given)
        fail(ErrorKind::kConfig,
             "convert --to tessera: {} applies to --to hf only (config.json gives the model)", what);
    };
    refuse(!a.config_file.empty(), "--config");
    refuse(!a.overrides.empty(), "key=value overrides");
    refuse(!a.max_shard_size.empty(), "--max-shard-size");
    const convert::ConvertReport r =
        convert::convert_hf_to_tessera({.hf_dir = a.source, .out_dir = a.out_dir, .dtype = a.dtype});
    fmt::print(out, "tessera convert: Hugging Face {} ({}) -> Tessera checkpoint\n", a.source,
               r.model.model_type());
    print_report(r, out);
    fmt::print(
        out,
        "  model.yml computes in {}; run it with:\n    tessera train {}/model.yml load_parameters_path={} "
        "run_name=NAME [key=value ...]\n",
        r.dtype, a.out_dir, a.out_dir);
    return kExitOk;
  }
  convert::TesseraToHfOptions o{.checkpoint = a.source,
                                .out_dir = a.out_dir,
                                .config_file = a.config_file,
                                .overrides = a.overrides,
                                .dtype = a.dtype};
  if (!a.max_shard_size.empty()) o.max_shard_bytes = convert::parse_byte_size(a.max_shard_size);
  const convert::ConvertReport r = convert::convert_tessera_to_hf(o);
  fmt::print(out, "tessera convert: Tessera checkpoint {} -> Hugging Face ({}, {})\n", a.source,
             r.model.model_type(), r.dtype);
  print_report(r, out);
  return kExitOk;
}

}  // namespace tessera::cli
