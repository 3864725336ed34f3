// `tessera decode CONFIG [key=value ...]`: completions of prompts with a KV cache, MaxText's
// decode.py as one native command.
//
// Prompts: `prompt` replicated over the decode batch (per_device_batch_size sequences, as MaxText
// sizes its decode state), or every line of `prompts_file`. Each is tokenized with BOS first
// (add_bos, when the tokenizer has one) and must fit max_prefill_predict_length; generation runs
// to EOS or to max_target_length positions (prompt included). Sampling: decode_sampling_strategy
// and its keys, seeded by decode_sampling_seed.
//
// Output: one line per prompt on `out`, in MaxText's form
//     Input `I love to` -> ` go to the beach`
// and on `err` the log: the model and engine, one line per prompt with its stop reason, and the
// timings (prefill tokens/s, decode tokens/s).
#include <fmt/format.h>
#include <fmt/ostream.h>

#include <chrono>
#include <cmath>
#include <fstream>

#include "tessera/cli/commands.h"
#include "tessera/config/config.h"
#include "tessera/core/cpu_features.h"
#include "tessera/core/error.h"
#include "tessera/data/tokenizer.h"
#include "tessera/infer/engine.h"
#include "tessera/infer/generate.h"

namespace tessera::cli {

namespace {

std::vector<std::string> read_prompts(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail(ErrorKind::kIo, "prompts_file={}: cannot open it", path);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) out.push_back(line);
  }
  if (out.empty()) fail(ErrorKind::kConfig, "prompts_file={}: holds no prompt (one per line)", path);
  return out;
}

infer::SamplingParams sampling_from(const Config& cfg) {
  infer::SamplingParams p;
  p.strategy = cfg.decode_sampling_strategy;
  p.temperature = cfg.decode_sampling_temperature;
  p.nucleus_p = cfg.decode_sampling_nucleus_p;  // -1 (unset) is refused by validate where it matters
  p.top_k = cfg.decode_sampling_top_k;
  if (p.strategy != "nucleus" && p.strategy != "composite" && p.nucleus_p < 0) p.nucleus_p = 1.0;
  infer::validate(p);
  return p;
}

// The decode batch, as MaxText sizes it: per_device_batch_size x devices sequences.
int decode_batch(const Config& cfg) {
  const double b = cfg.per_device_batch_size * static_cast<double>(cfg.num_devices);
  if (b < 1 || std::floor(b) != b)
    fail(ErrorKind::kConfig,
         "per_device_batch_size={} gives a decode batch of {} sequences; it must be a whole number >= 1",
         cfg.per_device_batch_size, b);
  return static_cast<int>(b);
}

std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n') c = ' ';
  return s;
}

}  // namespace

int decode(const ConfigArgs& args, std::ostream& out, std::ostream& err) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  Config cfg = load_config(args.config_file, args.overrides);
  set_num_threads(static_cast<int>(cfg.num_threads));
  if (!cfg.load_full_state_path.empty())  // as MaxText's decode: inference reads parameters only
    fail(ErrorKind::kConfig,
         "decode reads parameters only: set load_parameters_path (a Tessera checkpoint folder holds its "
         "parameters apart, so load_parameters_path={} works), not load_full_state_path",
         cfg.load_full_state_path);
  if (cfg.load_parameters_path.empty())
    fail(ErrorKind::kConfig,
         "decode needs load_parameters_path=... (a checkpoint folder such as "
         "<base_output_directory>/<run_name>/checkpoints/<step>, or a safetensors file of parameters)");
  if (cfg.tokenizer_path.empty())
    fail(ErrorKind::kConfig, "decode needs tokenizer_path=... (the tokenizer the model was trained with)");
  if (cfg.max_prefill_predict_length >= cfg.max_target_length)
    fail(ErrorKind::kConfig,
         "max_prefill_predict_length={} leaves no room to generate: it must be below max_target_length={}",
         cfg.max_prefill_predict_length, cfg.max_target_length);
  infer::GenerateOptions go;
  go.sampling = sampling_from(cfg);
  go.seed = static_cast<uint64_t>(cfg.decode_sampling_seed);
  const int batch = decode_batch(cfg);

  const auto tok = data::load_tokenizer(cfg.tokenizer_type, cfg.tokenizer_path);
  go.eos_id = tok->eos_id();
  if (tok->vocab_size() > cfg.vocab_size)
    fail(ErrorKind::kConfig, "the tokenizer at {} has {} tokens, more than the model's vocab_size={}",
         cfg.tokenizer_path, tok->vocab_size(), cfg.vocab_size);
  go.sample_vocab = tok->vocab_size();  // a padded vocabulary's extra ids are not text
  const std::vector<std::string> texts =
      cfg.prompts_file.empty() ? std::vector<std::string>(static_cast<size_t>(batch), cfg.prompt)
                               : read_prompts(cfg.prompts_file);
  std::vector<std::vector<int32_t>> prompts;
  for (size_t i = 0; i < texts.size(); ++i) {
    std::vector<int32_t> ids;
    if (cfg.add_bos && tok->bos_id() >= 0) ids.push_back(tok->bos_id());
    for (int32_t t : tok->encode(texts[i])) ids.push_back(t);
    if (ids.empty())
      fail(ErrorKind::kConfig, "prompt {} is empty and the tokenizer has no BOS token to start from", i);
    if (static_cast<int64_t>(ids.size()) > cfg.max_prefill_predict_length)
      fail(ErrorKind::kConfig, "prompt {} (`{}`) has {} tokens, more than max_prefill_predict_length={}", i,
           one_line(texts[i]).substr(0, 60), ids.size(), cfg.max_prefill_predict_length);
    prompts.push_back(std::move(ids));
  }

  const int slots = std::min<int>(batch, static_cast<int>(prompts.size()));
  auto engine = infer::make_engine(cfg, {.max_slots = slots});
  const double load_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  const models::ModelSpec& s = engine->spec();
  fmt::print(err,
             "decode: {} parameters ({}, {} layers, {} / {} heads, {}), {} engine, {} slots x {} positions "
             "(prompts up "
             "to {}), {} threads, {} kernels; loaded from {} in {:.2f} s\n",
             s.num_params(), s.decoder_block, s.num_decoder_layers, s.num_query_heads, s.num_kv_heads,
             dtype_name(s.dtype), engine->name(), slots, engine->max_target_length(),
             engine->max_prefill_length(), num_threads(), isa_name(active_isa()), cfg.load_parameters_path,
             load_seconds);

  infer::GenerateStats st;
  const std::vector<infer::Completion> done = infer::generate(*engine, prompts, go, &st);
  for (size_t i = 0; i < done.size(); ++i) {
    fmt::print(out, "Input `{}` -> `{}`\n", texts[i], tok->decode(done[i].tokens));
    fmt::print(err, "prompt {}: {} tokens, {} generated, stop: {}\n", i, prompts[i].size(),
               done[i].tokens.size(), infer::stop_reason_name(done[i].stop));
  }
  out.flush();
  fmt::print(err,
             "prefill: {} prompts, {} tokens in {:.3f} s ({:.1f} tokens/s); decode: {} tokens in {:.3f} s "
             "({:.1f} tokens/s), {} steps of up to {} sequences; sampling {}\n",
             prompts.size(), st.prefill_tokens, st.prefill_seconds,
             st.prefill_seconds > 0 ? static_cast<double>(st.prefill_tokens) / st.prefill_seconds : 0.0,
             st.decode_tokens, st.decode_seconds,
             st.decode_seconds > 0 ? static_cast<double>(st.decode_tokens) / st.decode_seconds : 0.0,
             st.decode_steps, st.max_batch, go.sampling.strategy);
  return kExitOk;
}

}  // namespace tessera::cli
