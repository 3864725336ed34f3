// Serving benchmark: what continuous batching buys. The server's scheduler (infer/server/
// scheduler.h) drives the real engine with random weights; R requests arrive together, with
// completions of four lengths (a quarter, half, three quarters and all of --new tokens, so that
// slots free up at different steps and waiting requests take them), and the run is timed until
// the last one ends. Each slot count S is measured in the same run; S = 1 (one request at a time)
// is the reference:
//
//   tokens/s = generated tokens / wall seconds;   ratio = tokens/s(S) / tokens/s(1)
//
// Also reported: the mean time to first token (from submission; queueing included) and the
// decode steps taken. Sampling is greedy and there is no EOS, so every request generates exactly
// its max_tokens and every S does the same work. No HTTP: the server's sockets and JSON cost
// microseconds per token against milliseconds of model time.
//
// Usage: serve_bench [--model llama-125m] [--requests 16] [--prompt 32] [--new 64] [--slots 1,4,16]
//                    [--dtype float32|bfloat16]
//   --model  a preset of configs/models (llama-test, pd-en-small, llama-125m, ...)
#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tessera/config/config.h"
#include "tessera/core/cpu_features.h"
#include "tessera/core/source_dir.h"
#include "tessera/infer/engine.h"
#include "tessera/infer/server/scheduler.h"
#include "tessera/train/trainer.h"

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string model = "llama-125m";
  int requests = 16;
  int prompt = 32;
  int new_tokens = 64;
  std::vector<int> slots = {1, 4, 16};
  std::string dtype = "float32";
};

// One character per id, no EOS: the text is irrelevant, its cost realistic (a decode per token).
class LetterTokenizer : public data::Tokenizer {
 public:
  explicit LetterTokenizer(int64_t vocab) : vocab_(vocab) {}
  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids;
    for (char c : text) ids.push_back(static_cast<unsigned char>(c) % static_cast<int32_t>(vocab_));
    return ids;
  }
  std::string decode(std::span<const int32_t> ids) const override {
    std::string s;
    for (int32_t id : ids) s += static_cast<char>('a' + id % 26);
    return s;
  }
  int64_t vocab_size() const override { return vocab_; }
  int32_t bos_id() const override { return -1; }
  int32_t eos_id() const override { return -1; }
  int32_t pad_id() const override { return -1; }
  std::string_view type() const override { return "letters"; }

 private:
  int64_t vocab_;
};

struct Result {
  double seconds = 0, mean_ttft = 0;
  int64_t tokens = 0, decode_steps = 0, max_batch = 0;
};

Result run(infer::Engine& engine, const Options& o) {
  LetterTokenizer tok(engine.vocab_size());
  infer::server::Scheduler scheduler(engine, tok, {.max_queued = o.requests, .eos_id = -1});
  std::mt19937 rng(7);
  std::vector<std::shared_ptr<infer::server::RequestState>> states;
  std::vector<double> first(static_cast<size_t>(o.requests), -1);
  const Clock::time_point t0 = Clock::now();
  for (int i = 0; i < o.requests; ++i) {
    infer::server::GenerationRequest g;
    for (int t = 0; t < o.prompt; ++t) g.prompt.push_back(static_cast<int32_t>(rng() % engine.vocab_size()));
    g.max_tokens = std::max(1, o.new_tokens * (1 + i % 4) / 4);
    states.push_back(scheduler.submit(std::move(g)));
  }
  scheduler.start();
  // One waiter polls every request: the first text marks its first token.
  size_t done = 0;
  std::vector<bool> finished(states.size());
  while (done < states.size()) {
    for (size_t i = 0; i < states.size(); ++i) {
      if (finished[i]) continue;
      std::string text;
      const bool end = states[i]->wait(text, std::chrono::milliseconds(0));
      if (!text.empty() && first[i] < 0) first[i] = std::chrono::duration<double>(Clock::now() - t0).count();
      if (end) finished[i] = true, ++done;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  Result r;
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  const auto s = scheduler.stats();
  r.tokens = s.tokens_generated;
  r.decode_steps = s.decode_steps;
  r.max_batch = s.max_decode_batch;
  for (double f : first) r.mean_ttft += f / static_cast<double>(first.size());
  scheduler.stop();
  return r;
}

std::vector<int> parse_list(const char* s) {
  std::vector<int> v;
  for (const char* p = s; *p;) {
    v.push_back(std::atoi(p));
    p = std::strchr(p, ',');
    if (!p) break;
    ++p;
  }
  return v;
}

int bench_main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--model")
      o.model = argv[i + 1];
    else if (k == "--requests")
      o.requests = std::atoi(argv[i + 1]);
    else if (k == "--prompt")
      o.prompt = std::atoi(argv[i + 1]);
    else if (k == "--new")
      o.new_tokens = std::atoi(argv[i + 1]);
    else if (k == "--slots")
      o.slots = parse_list(argv[i + 1]);
    else if (k == "--dtype")
      o.dtype = argv[i + 1];
    else {
      fmt::print(stderr, "unknown option {}\n", k);
      return 2;
    }
  }
  const int64_t context = o.prompt + o.new_tokens;
  Config cfg = load_config(tessera::source_dir().string() + "/configs/base.yml",
                           std::vector<std::string>{"model_name=" + o.model, "dtype=" + o.dtype,
                                                    "max_target_length=" + std::to_string(context)});
  models::ModelSpec spec = models::model_spec_from_config(cfg);
  fmt::print(
      "serve_bench: {} ({:.1f}M parameters, {}), {} threads, {} requests arriving together, prompts of {} "
      "tokens, completions of {}, {}, {} and {} tokens in turn\n",
      o.model, static_cast<double>(spec.num_params()) / 1e6, o.dtype, num_threads(), o.requests, o.prompt,
      std::max(1, o.new_tokens / 4), std::max(1, o.new_tokens / 2), std::max(1, o.new_tokens * 3 / 4),
      o.new_tokens);
  // Random weights: N(0, 0.02) for matrices and embeddings, 1 for the norm scales.
  std::vector<float> buf;
  std::mt19937_64 rng(1);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  const infer::ParameterSource params = [&](const std::string& name) {
    Shape shape;
    for (const auto& [n, s] : infer::parameter_shapes(spec))
      if (n == name) shape = s;
    buf.resize(static_cast<size_t>(shape.numel()));
    for (float& x : buf) x = name.ends_with(".scale") ? 1.0f : normal(rng);
    return Tensor(buf.data(), shape, DType::kF32);
  };
  fmt::print(
      "| slots | tokens | seconds | tokens/s | ratio to 1 slot | mean time to first token | decode steps | "
      "largest batch |\n| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  double reference = 0;
  for (int s : o.slots) {
    auto engine = infer::make_engine(
        spec, {.max_slots = s, .max_target_length = context, .max_prefill_length = o.prompt}, params);
    const Result r = run(*engine, o);
    const double tps = static_cast<double>(r.tokens) / r.seconds;
    if (reference == 0) reference = tps;
    fmt::print("| {} | {} | {:.2f} | {:.1f} | {:.2f} | {:.2f} s | {} | {} |\n", s, r.tokens, r.seconds, tps,
               tps / reference, r.mean_ttft, r.decode_steps, r.max_batch);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  return tessera::bench_main(argc, argv);
}
