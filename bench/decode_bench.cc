// Decoding benchmark: the small-M products of a decode step (ops::gemv against oneDNN's GEMM on
// the same weights), then the Llama engine itself (infer/llama_engine.h) on a 125M-class and a
// 1B-class model with random weights, in f32 and bf16, against the memory-bandwidth bound
// measured in the same run:
//
//   bound (tokens/s) = stream triad GB/s / (weight bytes read per token)
//
// Batch-1 decode reads every weight once per token (the KV cache at these lengths is < 1 % of the
// bytes), so it cannot beat the bound; the target is 70 % of it. Prefill is compute-bound and is
// reported as tokens/s and MFU against the calibrated peak (train/peak.h), with MaxText's prefill
// FLOP count (2 x parameters x tokens + causal attention). Batched decode reports tokens/s summed
// over the sequences stepping together (8 and 32).
//
// Models (random weights, no checkpoint):
//   125m   configs/models/llama-125m.yml: emb 768, 12 layers, 12/12 heads, head_dim 64, mlp 2048,
//          vocab 32000, untied;
//   1b     Llama-3.2-1B's dimensions: emb 2048, 16 layers, 32/8 heads, head_dim 64, mlp 8192,
//          vocab 128256, tied embeddings, rope_theta 500000 with Llama 3.1 scaling.
//
// Triad: a[i] = b[i] + s c[i] over three 128 MiB f32 arrays (larger than the 260 MiB the VM
// reports as last-level cache, together), all threads, best of 5; bytes = 3 x 128 MiB.
//
// Usage: decode_bench [--quick] [--models 125m,1b] [--dtypes f32,bf16] [--skip-gemv] [--skip-engine]
//   --quick  fewer tokens and repetitions (about a minute for the 125m model).
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "tessera/core/arena.h"
#include "tessera/core/cpu_features.h"
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

double triad_gbps() {
  Arena arena(3 * kTriadBytesEach + 3 * Arena::kAlignment, "triad");
  const int64_t n = static_cast<int64_t>(kTriadBytesEach / sizeof(float));
  float* a = static_cast<float*>(arena.allocate(kTriadBytesEach));
  float* b = static_cast<float*>(arena.allocate(kTriadBytesEach));
  float* c = static_cast<float*>(arena.allocate(kTriadBytesEach));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) a[i] = 0.0f, b[i] = 1.0f, c[i] = 2.0f;
  const float s = 3.0f;
  const double t = best_time(5, [&] {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
  });
  if (a[n / 2] != 7.0f) std::fprintf(stderr, "triad produced a wrong value\n");
  return 3.0 * static_cast<double>(kTriadBytesEach) / t / 1e9;
}

// Uniform values in [lo, hi) from a splitmix64 hash of (seed, index), in parallel.
void fill(const Tensor& t, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
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

// ---- small-M products ------------------------------------------------------------------------

void gemv_section(const Options& o, double triad) {
  fmt::print(
      "\n## Small-M products: y[M, N] = x[M, K] · Wᵀ, W [N, K] (weight GB/s; % of triad {:.1f} GB/s)\n\n",
      triad);
  fmt::print(
      "| N x K | dtype | M | gemv GB/s | gemv % triad | gemv GFLOP/s | oneDNN GB/s | oneDNN GFLOP/s | gemv / "
      "oneDNN |\n");
  fmt::print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  struct Shape2 {
    int64_t n, k;
  };
  // The 1B model's MLP up projection and down projection.
  const std::vector<Shape2> shapes = {{8192, 2048}, {2048, 8192}};
  const std::vector<int64_t> ms =
      o.quick ? std::vector<int64_t>{1, 8, 32} : std::vector<int64_t>{1, 2, 4, 8, 16, 32, 64};
  for (const std::string& dt : o.dtypes) {
    const DType d = dtype_from_name(dt);
    for (const Shape2& s : shapes) {
      const int64_t max_m = ms.back();
      Arena arena(aligned_bytes(Shape{s.n, s.k}, d) + aligned_bytes(Shape{max_m, s.k}, d) +
                      aligned_bytes(Shape{max_m, s.n}, DType::kF32) + 4 * Arena::kAlignment,
                  "gemv");
      Tensor w = arena.tensor(Shape{s.n, s.k}, d);
      Tensor xall = arena.tensor(Shape{max_m, s.k}, d);
      Tensor yall = arena.tensor(Shape{max_m, s.n}, DType::kF32);
      fill(w, 1);
      fill(xall, 2);
      for (int64_t m : ms) {
        Tensor x = xall.slice0(0, m), y = yall.slice0(0, m);
        const int reps = o.quick ? 5 : 15;
        ops::gemv(x, w, y);
        ops::matmul(x, w, y, {.trans_b = true});
        const double tg = median_time(reps, [&] { ops::gemv(x, w, y); });
        const double td = median_time(reps, [&] { ops::matmul(x, w, y, {.trans_b = true}); });
        const double bytes = static_cast<double>(w.nbytes()),
                     flops = static_cast<double>(ops::gemv_flops(m, s.n, s.k));
        fmt::print("| {} x {} | {} | {} | {:.1f} | {:.0f}% | {:.1f} | {:.1f} | {:.1f} | {:.2f} |\n", s.n, s.k,
                   dt, m, bytes / tg / 1e9, 100 * bytes / tg / 1e9 / triad, flops / tg / 1e9,
                   bytes / td / 1e9, flops / td / 1e9, td / tg);
      }
    }
  }
}

int run(const Options& o) {
  fmt::print("# decode_bench: {} threads, {} kernels\n", num_threads(), isa_name(active_isa()));
  const double triad = triad_gbps();
  fmt::print("stream triad: {:.1f} GB/s (3 x {} MiB, best of 5)\n", triad, kTriadBytesEach >> 20);
  if (o.gemv) gemv_section(o, triad);
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
    } else if (a == "--skip-engine") {
      o.engine = false;
    } else if (a == "--models" && i + 1 < argc) {
      o.models = tessera::split(argv[++i]);
    } else if (a == "--dtypes" && i + 1 < argc) {
      o.dtypes = tessera::split(argv[++i]);
    } else {
      std::fprintf(stderr,
                   "usage: decode_bench [--quick] [--models 125m,1b] [--dtypes f32,bf16] [--skip-gemv] "
                   "[--skip-engine]\n");
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
