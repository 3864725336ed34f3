// Decoding benchmark: the small-M products of a decode step (ops::gemv against oneDNN's GEMM on
// the same weights), then the engine itself (infer/engine.h) on a 125M-class and a
// 1B-class model with random weights, in f32 and bf16, against the memory-bandwidth bound
// measured in the same run:
//
//   bound (tokens/s) = stream triad GB/s / (weight bytes read per token)
//
// Batch-1 decode reads every weight once per token (the KV cache of its 16 to 80 positions adds
// about 1 % for the 125m model and 0.1 % for the 1b); the target is 85 % of the bound. A pure read
// stream can run somewhat faster than the triad (two reads and a write), and weights that fit the
// last-level cache in part can beat the bound outright.
//
// Prefill is compute-bound: tokens/s, and MFU against the calibrated peak (backends/cpu/peak.h; for bf16
// the larger of the bf16 dot-product and f32 FMA peaks, since bf16 products may run on either) of the
// FLOPs a prefill needs: every layer's projections for all prompt rows except the last layer's
// output projection and MLP (only the last row's output is used), causal attention, and the last
// row's logits. (MaxText's count, 2 x parameters x tokens + attention, also counts the logits of
// every row and the last layer's MLP, which decoding does not need.) Batched decode reports
// tokens/s summed over the sequences stepping together (8 and 32).
//
// Models (random weights, no checkpoint):
//   125m   configs/models/llama-125m.yml: emb 768, 12 layers, 12/12 heads, head_dim 64, mlp 2048,
//          vocab 32000, untied;
//   1b     Llama-3.2-1B's dimensions: emb 2048, 16 layers, 32/8 heads, head_dim 64, mlp 8192,
//          vocab 128256, tied embeddings, rope_theta 500000 with Llama 3.1 scaling;
//   NAME   any preset of configs/models/ (model_name=NAME), e.g. gpt2-124m, gemma3-1b, qwen3-0.6b or
//          gpt-oss-3.5b. A token reads the experts it is routed to, so a mixture of experts' bound
//          counts num_experts_per_tok of its num_experts experts' weights (which ones changes from
//          token to token, so that they come from memory, not from the cache).
//
// Triad: a[i] = b[i] + s c[i] over three 128 MiB f32 arrays (larger than the 260 MiB the VM
// reports as last-level cache, together), all threads, best of 5; bytes = 3 x 128 MiB.
//
// Usage: decode_bench [--quick] [--models 125m,1b,PRESET] [--dtypes f32,bf16] [--skip-gemv] [--skip-engine]
//                     [--steps N] [--rounds N] [--profile] [--shapes NxK,...]
//   --quick     fewer tokens and repetitions (about a minute for the 125m model).
//   --steps N   batch-1 decode steps timed per round (default 16 with --quick, else 64).
//   --rounds N  batch-1 rounds (default 3 with --quick, else 5), each between two triads whose
//               mean is its bound: the share of the bound is the median over rounds of tokens/s
//               over that round's bound, with the rounds' range beside it.
//   --profile   after the rounds, one more batch-1 round with the engine's per-op timing on; the
//               tables (time per op over those steps, slowest first) follow the engine table.
//               Their GFLOP/s counts cached attention over the whole cache (an upper bound); at
//               batch 1 a product's f32 GB/s is twice its GFLOP/s, a bf16 product's the same.
//   --shapes    the weights W [N, K] of the small-M section (default 8192x2048,2048x8192: the 1b
//               model's MLP; the 125m model's are 768x768,2048x768,768x2048,32000x768).
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "bench_util.h"
#include "tessera/backends/cpu/peak.h"
#include "tessera/config/config.h"
#include "tessera/core/arena.h"
#include "tessera/core/cpu_features.h"
#include "tessera/core/error.h"
#include "tessera/core/source_dir.h"
#include "tessera/infer/engine.h"
#include "tessera/infer/sampling.h"
#include "tessera/models/model_spec.h"
#include "tessera/ops/attention.h"
#include "tessera/ops/gemv.h"
#include "tessera/ops/matmul.h"

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  bool quick = false;
  std::vector<std::string> models = {"125m", "1b"};
  std::vector<std::string> dtypes = {"f32", "bf16"};
  bool gemv = true;
  bool engine = true;
  int steps1 = 0;  // batch-1 decode steps per round; 0: the default for quick or full
  int rounds = 0;  // batch-1 rounds, each with its own triad; 0: the default for quick or full
  bool profile = false;
  std::vector<std::pair<int64_t, int64_t>> shapes = {{8192, 2048}, {2048, 8192}};  // small-M W [N, K]
};

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

template <typename F>
double best_time(int reps, F&& f) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    f();
    best = std::min(best, seconds_since(t0));
  }
  return best;
}

template <typename F>
double median_time(int reps, F&& f) {
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    f();
    t.push_back(seconds_since(t0));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

constexpr size_t kTriadBytesEach = size_t{128} << 20;
constexpr size_t kColdBytes = size_t{1} << 30;  // weights cycled through by the small-M section

// ---- small-M products ------------------------------------------------------------------------

void gemv_section(const Options& o, double triad) {
  fmt::print(
      "\n## Small-M products: y[M, N] = x[M, K] · Wᵀ, W [N, K] (weight GB/s; % of triad {:.1f} GB/s)\n\n",
      triad);
  fmt::print(
      "| N x K | dtype | M | gemv GB/s | gemv % triad | gemv GFLOP/s | oneDNN GB/s | oneDNN GFLOP/s | gemv / "
      "oneDNN |\n");
  fmt::print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  const std::vector<int64_t> ms =
      o.quick ? std::vector<int64_t>{1, 8, 32} : std::vector<int64_t>{1, 2, 4, 8, 16, 32, 64};
  for (const std::string& dt : o.dtypes) {
    const DType d = dtype_from_name(dt);
    for (const auto& [n, k] : o.shapes) {
      const int64_t max_m = ms.back();
      // Enough copies of W that one pass over them is 1 GiB: each call reads its W from memory,
      // not from the last-level cache (the VM reports 260 MiB of it).
      const size_t w_bytes = aligned_bytes(Shape{n, k}, d);
      const int copies = static_cast<int>((kColdBytes + w_bytes - 1) / w_bytes);
      Arena arena(copies * w_bytes + aligned_bytes(Shape{max_m, k}, d) +
                      aligned_bytes(Shape{max_m, n}, DType::kF32) + 4 * Arena::kAlignment,
                  "gemv");
      std::vector<Tensor> ws;
      for (int c = 0; c < copies; ++c) {
        ws.push_back(arena.tensor(Shape{n, k}, d));
        bench::fill_uniform(ws.back(), 1 + c);
      }
      Tensor xall = arena.tensor(Shape{max_m, k}, d);
      Tensor yall = arena.tensor(Shape{max_m, n}, DType::kF32);
      bench::fill_uniform(xall, 100);
      for (int64_t m : ms) {
        Tensor x = xall.slice0(0, m), y = yall.slice0(0, m);
        const int reps = o.quick ? 3 : 5;
        auto pass = [&](bool gemv) {  // one call per copy; seconds per call
          return median_time(reps,
                             [&] {
                               for (const Tensor& w : ws)
                                 gemv ? ops::gemv(x, w, y) : ops::matmul(x, w, y, {.trans_b = true});
                             }) /
                 copies;
        };
        ops::matmul(x, ws[0], y, {.trans_b = true});  // the primitive, made outside the timing
        const double tg = pass(true), td = pass(false);
        const double bytes = static_cast<double>(ws[0].nbytes()),
                     flops = static_cast<double>(ops::gemv_flops(m, n, k));
        fmt::print("| {} x {} | {} | {} | {:.1f} | {:.0f}% | {:.1f} | {:.1f} | {:.1f} | {:.2f} |\n", n, k, dt,
                   m, bytes / tg / 1e9, 100 * bytes / tg / 1e9 / triad, flops / tg / 1e9, bytes / td / 1e9,
                   flops / td / 1e9, td / tg);
      }
    }
  }
}

// ---- the engine -------------------------------------------------------------------------------

models::ModelSpec model_spec(const std::string& name, DType dtype) {
  models::ModelSpec s;
  if (name == "125m") {
    s.emb_dim = 768, s.num_query_heads = 12, s.num_kv_heads = 12, s.head_dim = 64, s.mlp_dim = 2048;
    s.num_decoder_layers = 12, s.vocab_size = 32000;
  } else if (name == "1b") {  // Llama-3.2-1B
    s.emb_dim = 2048, s.num_query_heads = 32, s.num_kv_heads = 8, s.head_dim = 64, s.mlp_dim = 8192;
    s.num_decoder_layers = 16, s.vocab_size = 128256, s.logits_via_embedding = true;
    s.rope_theta = 500000.0, s.rope_type = "llama3.1";
  } else {  // a preset of configs/models/, as `tessera train ... model_name=NAME` builds it
    const std::vector<std::string> overrides = {"model_name=" + name};
    s = models::model_spec_from_config(load_config(source_dir() / "configs" / "base.yml", overrides));
  }
  s.dtype = dtype;
  return s;
}

// What one token does with each parameter of the model, from its name and shape: the layer it
// belongs to (-1: none), the share of it that it reads (an expert tensor, [num_experts, ...]:
// num_experts_per_tok of the experts), whether it is a matrix that multiplies the token's row, or a
// table it reads one row of (the input embedding, untied, and learned positions).
struct ParameterUse {
  int64_t layer = -1;
  double active_fraction = 1;
  bool matrix = false, one_row = false;
};

ParameterUse parameter_use(const models::ModelSpec& s, const std::string& name, const Shape& shape) {
  ParameterUse u;
  if (const size_t at = name.find("layers_"); at != std::string::npos)
    u.layer = std::strtoll(name.c_str() + at + 7, nullptr, 10);
  const bool bias = name.find("bias") != std::string::npos;
  if (s.num_experts > 1 && shape.rank() >= 2 && shape[0] == s.num_experts)  // experts' kernels, biases
    u.active_fraction = static_cast<double>(s.num_experts_per_tok) / static_cast<double>(s.num_experts);
  u.one_row = name.ends_with("position_embedder.embedding") ||
              (name == "token_embedder.embedding" && !s.logits_via_embedding);
  u.matrix = shape.rank() >= 2 && !bias && !u.one_row;
  return u;
}

// Bytes of weights one decode step reads: every matrix (the routed experts' only), the
// unembedding (the embedding table when tied), one row of each table a token looks up, and the
// vectors (norm scales, biases: under 0.1 % of any model here), all at the compute dtype's size.
double weight_bytes_per_token(const models::ModelSpec& s) {
  double elements = 0;
  for (const auto& [name, shape] : infer::parameter_shapes(s)) {
    const ParameterUse u = parameter_use(s, name, shape);
    elements += u.one_row ? static_cast<double>(shape[shape.rank() - 1])
                          : static_cast<double>(shape.numel()) * u.active_fraction;
  }
  return static_cast<double>(dtype_size(s.dtype)) * elements;
}

// FLOPs a prefill of P tokens needs: every layer's q, k and v projections for all P rows, its
// other products (the routed experts' only) for all P rows but in the last layer, whose output
// feeds only the last row's logits, causal attention (windowed where the layer is), and the
// logits of the last row.
double prefill_flops(const models::ModelSpec& s, int64_t P) {
  const int64_t L = s.num_decoder_layers;
  double flops = 0;
  for (const auto& [name, shape] : infer::parameter_shapes(s)) {
    const ParameterUse u = parameter_use(s, name, shape);
    if (!u.matrix) continue;
    const double macs = static_cast<double>(shape.numel()) * u.active_fraction;
    if (u.layer < 0) {  // the unembedding (or the tied embedding), for the last row
      if (name == "decoder.logits_dense.kernel" || name == "token_embedder.embedding") flops += 2 * macs;
      continue;
    }
    const bool qkv =
        name.ends_with("query.kernel") || name.ends_with("key.kernel") || name.ends_with("value.kernel");
    flops += 2 * macs * static_cast<double>(qkv || u.layer < L - 1 ? P : 1);
  }
  for (int64_t l = 0; l < L; ++l)
    flops += ops::attention_fwd_flops(1, P, s.num_query_heads, s.head_dim, s.window_of(l));
  return flops;
}

// Random weights: a staging tensor as large as the largest parameter, filled per request with
// uniform values of the scale training's init gives (1 / sqrt(fan_in); the embedding +-1; norms 1).
class RandomParameters {
 public:
  explicit RandomParameters(const models::ModelSpec& spec) {
    int64_t most = 0;
    for (const auto& [name, shape] : infer::parameter_shapes(spec)) {
      shapes_[name] = shape;
      most = std::max(most, shape.numel());
    }
    arena_ = Arena(aligned_bytes(Shape{most}, DType::kF32), "bench-params");
    buffer_ = arena_.tensor(Shape{most}, DType::kF32);
  }
  Tensor operator()(const std::string& name) {
    const Shape shape = shapes_.at(name);
    Tensor t(buffer_.data(), shape, DType::kF32);
    if (name.ends_with(".scale")) {
      std::fill(t.ptr<float>(), t.ptr<float>() + t.numel(), 1.0f);
    } else {
      const float a =
          name == "token_embedder.embedding" ? 1.0f : 1.0f / std::sqrt(static_cast<float>(shape[0]));
      bench::fill_uniform(t, ++seed_, -a, a);
    }
    return t;
  }

 private:
  std::map<std::string, Shape> shapes_;
  Arena arena_;
  Tensor buffer_;
  uint64_t seed_ = 0;
};

struct EngineRow {
  std::string model, dtype;
  double weight_gb = 0;
  double decode_tps = 0, bound_tps = 0;
  double bound_share = 0, share_lo = 0, share_hi = 0;  // tokens/s over the bound: median, range
  int64_t prefill_len = 0;
  double prefill_tps = 0, prefill_mfu = 0;
  double batch8_tps = 0, batch32_tps = 0;
  int profiled_steps = 0;
  std::string profile;  // the engine's per-op table of one more batch-1 round (--profile)
};

// Decodes `steps` tokens in `slots` slots (already prefilled); returns tokens/s over the steps.
double decode_rate(infer::Engine& e, int slots, int steps, std::vector<float>& logits) {
  std::vector<int> ids(static_cast<size_t>(slots));
  std::vector<int32_t> tokens(static_cast<size_t>(slots), 7);
  for (int i = 0; i < slots; ++i) ids[static_cast<size_t>(i)] = i;
  e.decode(ids, tokens, logits);  // a warm step
  const auto t0 = Clock::now();
  for (int s = 0; s < steps; ++s) e.decode(ids, tokens, logits);
  return static_cast<double>(slots) * steps / seconds_since(t0);
}

EngineRow engine_case(const Options& o, const std::string& model, const std::string& dt,
                      const cpu::DevicePeak& peak) {
  const models::ModelSpec spec = model_spec(model, dtype_from_name(dt));
  const int64_t prefill_len = o.quick ? 64 : 256, prompt = 16;
  const int steps1 = o.steps1 > 0 ? o.steps1 : o.quick ? 16 : 64, stepsb = o.quick ? 4 : 16;
  EngineRow row{model, dt};
  row.prefill_len = prefill_len;
  RandomParameters params(spec);
  const auto t_load = Clock::now();
  auto engine = infer::make_engine(
      spec,
      {.max_slots = 32, .max_target_length = prefill_len + steps1 + 2, .max_prefill_length = prefill_len},
      [&](const std::string& n) { return params(n); });
  fmt::print(stderr, "{} {}: engine built in {:.1f} s\n", model, dt, seconds_since(t_load));
  const int64_t V = spec.vocab_size;
  std::vector<float> logits(static_cast<size_t>(32 * V));
  std::vector<int32_t> tokens(static_cast<size_t>(prefill_len), 3);

  // Prefill: the median of 3.
  const double tp = median_time(3, [&] { engine->prefill(0, tokens, logits); });
  row.prefill_tps = static_cast<double>(prefill_len) / tp;
  // The larger of the dtype's peak and the f32 FMA peak: bf16 products may run on either (gemv
  // widens bf16 to f32 FMA, which on a CPU with a half-rate bf16 dot product is the faster).
  const double ceiling = std::max(peak.for_dtype(spec.dtype), peak.f32_flops);
  row.prefill_mfu = prefill_flops(spec, prefill_len) / tp / ceiling;

  // Batch 1, in rounds: each decodes steps1 tokens after a fresh prompt, between two triads, and
  // its bound is their mean. The row reports medians, and the share of the bound as the median of
  // each round's tokens/s over its own bound, so that the memory bandwidth drifting between runs
  // and within one (10-15 % on some VMs; a busy neighbour moves it more) moves both sides of that
  // ratio together. (A triad before the round alone, or the one at the start of the run, which the
  // first round used, missed a change during the round or since the start.)
  row.weight_gb = weight_bytes_per_token(spec) / 1e9;
  const int rounds = o.rounds > 0 ? o.rounds : o.quick ? 3 : 5;
  std::vector<double> tps, triads, shares;
  double before = bench::stream_triad_gbps(kTriadBytesEach, 3);
  for (int r = 0; r < rounds; ++r) {
    engine->prefill(0, std::span(tokens.data(), static_cast<size_t>(prompt)), logits);
    tps.push_back(decode_rate(*engine, 1, steps1, logits));
    const double after = bench::stream_triad_gbps(kTriadBytesEach, 3), t = 0.5 * (before + after);
    triads.push_back(t);
    shares.push_back(tps.back() * row.weight_gb / t);
    before = after;
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  row.decode_tps = median(tps);
  row.bound_tps = median(triads) / row.weight_gb;
  row.bound_share = median(shares);
  row.share_lo = *std::min_element(shares.begin(), shares.end());
  row.share_hi = *std::max_element(shares.begin(), shares.end());
  if (o.profile) {
    const int slot0[] = {0};
    const int32_t token[] = {7};
    engine->prefill(0, std::span(tokens.data(), static_cast<size_t>(prompt)), logits);
    engine->decode(slot0, token, logits);  // a warm step
    engine->set_profiling(true);
    for (int s = 0; s < steps1; ++s) engine->decode(slot0, token, logits);
    engine->set_profiling(false);
    row.profiled_steps = steps1;
    row.profile = engine->profile_report();
  }
  // Batches of 8 and 32.
  for (int b : {8, 32}) {
    for (int s = 0; s < b; ++s)
      engine->prefill(s, std::span(tokens.data(), static_cast<size_t>(prompt)), logits);
    (b == 8 ? row.batch8_tps : row.batch32_tps) = decode_rate(*engine, b, stepsb, logits);
  }
  return row;
}

void engine_section(const Options& o, double triad) {
  const cpu::DevicePeak peak = cpu::calibrate_cpu_peak();
  fmt::print("\n## Engine: decode against the bandwidth bound, prefill, batched decode\n\n");
  fmt::print("peak (calibrated): f32 {:.0f} GFLOP/s, bf16 {:.0f} GFLOP/s; triad {:.1f} GB/s\n\n",
             peak.f32_flops / 1e9, peak.bf16_flops / 1e9, triad);
  fmt::print(
      "| model | dtype | weights GB/token | batch-1 tokens/s | bound tokens/s | % of bound | rounds' range | "
      "prefill tokens | prefill tokens/s | prefill MFU | batch 8 tokens/s | batch 32 tokens/s |\n");
  fmt::print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  std::vector<EngineRow> rows;
  for (const std::string& m : o.models)
    for (const std::string& dt : o.dtypes) {
      const EngineRow& r = rows.emplace_back(engine_case(o, m, dt, peak));
      fmt::print(
          "| {} | {} | {:.3f} | {:.1f} | {:.1f} | {:.0f}% | {:.0f}-{:.0f}% | {} | {:.1f} | {:.1f}% | {:.1f} "
          "| "
          "{:.1f} |\n",
          r.model, r.dtype, r.weight_gb, r.decode_tps, r.bound_tps, 100 * r.bound_share, 100 * r.share_lo,
          100 * r.share_hi, r.prefill_len, r.prefill_tps, 100 * r.prefill_mfu, r.batch8_tps, r.batch32_tps);
      std::fflush(stdout);
    }
  for (const EngineRow& r : rows)
    if (!r.profile.empty())
      fmt::print("\n### Per-op time, {} {}, {} batch-1 decode steps\n\n```\n{}```\n", r.model, r.dtype,
                 r.profiled_steps, r.profile);
}

// The Sampler on one row of a 128256-token vocabulary (Llama 3's), per strategy.
void sampling_section(const Options& o) {
  fmt::print(
      "\n## Sampling one token from 128256 logits (microseconds, median)\n\n| strategy | us |\n| --- | ---: "
      "|\n");
  Arena arena(aligned_bytes(Shape{128256}, DType::kF32), "logits");
  Tensor logits = arena.tensor(Shape{128256}, DType::kF32);
  bench::fill_uniform(logits, 5, -8.0f, 8.0f);
  const std::span<const float> row(logits.ptr<float>(), 128256);
  const std::vector<infer::SamplingParams> cases = {
      {.strategy = "greedy"},
      {.strategy = "weighted", .temperature = 0.8},
      {.strategy = "topk", .temperature = 0.8, .top_k = 50},
      {.strategy = "nucleus", .temperature = 0.8, .nucleus_p = 0.9},
      {.strategy = "composite", .temperature = 0.8, .nucleus_p = 0.9, .top_k = 50}};
  infer::Sampler sampler(1);
  for (const auto& p : cases) {
    sampler.sample(row, p);
    const double t = median_time(o.quick ? 5 : 21, [&] { sampler.sample(row, p); });
    fmt::print("| {} | {:.0f} |\n", p.strategy, t * 1e6);
  }
}

int run(const Options& o) {
  if (o.engine)
    for (const std::string& m : o.models) model_spec(m, DType::kF32);  // a bad name fails before any run
  fmt::print("# decode_bench: {} threads, {} kernels\n", num_threads(), isa_name(active_isa()));
  const double triad = bench::stream_triad_gbps(kTriadBytesEach, 5);
  fmt::print("stream triad: {:.1f} GB/s (3 x {} MiB, best of 5)\n", triad, kTriadBytesEach >> 20);
  if (o.gemv) gemv_section(o, triad);
  if (o.engine) {
    sampling_section(o);
    engine_section(o, triad);
  }
  return 0;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    const size_t end = std::min(s.find(',', pos), s.size());
    if (end > pos) out.push_back(s.substr(pos, end - pos));
    pos = end + 1;
  }
  return out;
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  tessera::Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      o.quick = true;
    } else if (a == "--skip-gemv") {
      o.gemv = false;
    } else if (a == "--profile") {
      o.profile = true;
    } else if (a == "--skip-engine") {
      o.engine = false;
    } else if (a == "--models" && i + 1 < argc) {
      o.models = tessera::split(argv[++i]);
    } else if (a == "--dtypes" && i + 1 < argc) {
      o.dtypes = tessera::split(argv[++i]);
    } else if (a == "--shapes" && i + 1 < argc) {
      o.shapes.clear();
      for (const std::string& nk : tessera::split(argv[++i])) {
        long long n = 0, k = 0;
        char end = 0;
        if (std::sscanf(nk.c_str(), "%lldx%lld%c", &n, &k, &end) != 2 || n < 1 || k < 1) {
          std::fprintf(stderr, "decode_bench: --shapes: '%s' is not NxK (e.g. 8192x2048)\n", nk.c_str());
          return 2;
        }
        o.shapes.emplace_back(n, k);
      }
    } else if (a == "--steps" && i + 1 < argc && std::atoi(argv[i + 1]) > 0) {
      o.steps1 = std::atoi(argv[++i]);
    } else if (a == "--rounds" && i + 1 < argc && std::atoi(argv[i + 1]) > 0) {
      o.rounds = std::atoi(argv[++i]);
    } else {
      std::fprintf(
          stderr,
          "usage: decode_bench [--quick] [--models 125m,1b,PRESET] [--dtypes f32,bf16] [--skip-gemv] "
          "[--skip-engine] [--steps N] [--rounds N] [--profile] [--shapes NxK,...]\n");
      return 2;
    }
  }
  try {
    return tessera::run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "decode_bench: %s\n", e.what());
    return 1;
  }
}
