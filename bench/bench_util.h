// Pieces the benchmarks share: the stream triad they measure their memory bound with, a fast
// seeded fill of tensors with uniform values, and the command line of the training benchmarks.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <string>
#include <vector>

#include "tessera/core/arena.h"
#include "tessera/core/dtype.h"
#include "tessera/core/source_dir.h"
#include "tessera/core/tensor.h"

namespace tessera::bench {

// STREAM's triad a[i] = b[i] + s * c[i] over three `bytes_each` f32 arrays of a pre-faulted Arena,
// all threads: the best of `reps` timed runs after one warm-up, in GB/s (3 x bytes_each moved).
inline double stream_triad_gbps(size_t bytes_each, int reps) {
  Arena arena(3 * bytes_each + 3 * Arena::kAlignment, "triad");
  const int64_t n = static_cast<int64_t>(bytes_each / sizeof(float));
  float* a = static_cast<float*>(arena.allocate(bytes_each));
  float* b = static_cast<float*>(arena.allocate(bytes_each));
  float* c = static_cast<float*>(arena.allocate(bytes_each));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) a[i] = 0.0f, b[i] = 1.0f, c[i] = 2.0f;
  const float s = 3.0f;
  double best = 1e30;
  for (int r = -1; r < reps; ++r) {  // r = -1: the warm-up
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r >= 0) best = std::min(best, t);
  }
  if (a[n / 2] != 7.0f) std::fprintf(stderr, "triad produced a wrong value\n");
  return 3.0 * static_cast<double>(bytes_each) / best / 1e9;
}

// Fills a tensor with uniform values in [lo, hi) in its dtype, in parallel: a splitmix64 hash of
// (seed, index) gives each element 24 random bits, fast enough that setup stays short.
inline void fill_uniform(const Tensor& t, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  const int64_t n = t.numel();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    uint64_t z = seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(i) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    const float v = lo + (hi - lo) * static_cast<float>(z >> 40) * 0x1.0p-24f;
    if (t.dtype() == DType::kBF16)
      t.ptr<uint16_t>()[i] = f32_to_bf16(v);
    else
      t.ptr<float>()[i] = v;
  }
}

// The command line of the benchmarks that train (dist_bench, tp_bench):
//   [CONFIG] [--warmup W] [--steps S] [--profile] [key=value ...]
struct TrainArgs {
  int warmup = 1, steps = 3;
  bool profile = false;
  std::string config;
  std::vector<std::string> overrides;

  // Adds each "key=value" of `defaults` whose key the command line did not set.
  void add_defaults(std::initializer_list<std::string> defaults) {
    for (const std::string& d : defaults) {
      const std::string key = d.substr(0, d.find('=') + 1);
      if (!has(key)) overrides.push_back(d);
    }
  }
  // Whether the command line set `key` ("name=").
  bool has(const std::string& key) const {
    return std::any_of(overrides.begin(), overrides.end(),
                       [&](const std::string& o) { return o.starts_with(key); });
  }
};

// `warmup` and `steps` are the defaults; the config defaults to configs/base.yml.
inline TrainArgs parse_train_args(int argc, char** argv, int warmup, int steps) {
  TrainArgs a;
  a.warmup = warmup;
  a.steps = steps;
  a.config = (tessera::source_dir() / "configs" / "base.yml").string();
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    if (s == "--warmup" && i + 1 < argc)
      a.warmup = std::stoi(argv[++i]);
    else if (s == "--steps" && i + 1 < argc)
      a.steps = std::stoi(argv[++i]);
    else if (s == "--profile")
      a.profile = true;
    else if (s.find('=') == std::string::npos)
      a.config = s;
    else
      a.overrides.push_back(s);
  }
  return a;
}

}  // namespace tessera::bench
