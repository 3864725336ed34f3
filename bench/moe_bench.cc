// Grouped matmul benchmark: ops::grouped_matmul over ragged expert groups against one dense
// ops::matmul of the same total FLOPs (M = all the groups' rows), in the same run.
//
// The groups are the rows a 16-expert top-2 layer dispatches: R = tokens x 2 rows split over 16
// experts, either balanced (R / 16 each) or skewed (Zipf with exponent 1 over the experts: the
// largest group holds ~30 % of the rows, the smallest ~2 %). Each case runs the forward (rows x
// W[e]), the input gradient (rows x W[e]ᵀ) and the weight gradient (rowsᵀ x dy per expert,
// accumulated), in f32 and bf16. Both paths run on the same pre-faulted buffers, interleaved, after
// a warm-up; the ratio grouped / dense (throughput) is the median of per-repetition ratios, each
// repetition running the two back to back. Targets (the MoE issue): >= 0.90 balanced, >= 0.75
// skewed.
//
// Usage: moe_bench [--quick] [--tokens N] [--emb E] [--mlp F]
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench_util.h"
#include "tessera/core/arena.h"
#include "tessera/core/cpu_features.h"
#include "tessera/ops/matmul.h"
#include "tessera/ops/moe.h"

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_of(const std::function<void()>& f) {
  const auto t0 = Clock::now();
  f();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::vector<int32_t> group_sizes(int64_t rows, int64_t experts, bool skewed) {
  std::vector<double> share(static_cast<size_t>(experts), 1.0);
  if (skewed)
    for (int64_t e = 0; e < experts; ++e) share[static_cast<size_t>(e)] = 1.0 / static_cast<double>(e + 1);
  double total = 0;
  for (double s : share) total += s;
  std::vector<int32_t> sizes(static_cast<size_t>(experts));
  int64_t used = 0;
  for (int64_t e = 0; e < experts; ++e) {
    sizes[static_cast<size_t>(e)] =
        static_cast<int32_t>(std::floor(static_cast<double>(rows) * share[static_cast<size_t>(e)] / total));
    used += sizes[static_cast<size_t>(e)];
  }
  sizes[0] += static_cast<int32_t>(rows - used);
  return sizes;
}

int run(int argc, char** argv) {
  int64_t tokens = 4096, emb = 1024, mlp = 1024;
  int reps = 21;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      tokens = 1024;
      reps = 5;
    } else if (a == "--tokens" && i + 1 < argc) {
      tokens = std::stoll(argv[++i]);
    } else if (a == "--emb" && i + 1 < argc) {
      emb = std::stoll(argv[++i]);
    } else if (a == "--mlp" && i + 1 < argc) {
      mlp = std::stoll(argv[++i]);
    } else {
      fmt::print(stderr, "usage: moe_bench [--quick] [--tokens N] [--emb E] [--mlp F]\n");
      return 2;
    }
  }
  const int64_t experts = 16, k = 2, R = tokens * k;
  fmt::print(
      "moe_bench: {} tokens x top-{} = {} rows over {} experts, emb {}, expert width {}; {} threads, "
      "{}\n\n",
      tokens, k, R, experts, emb, mlp, omp_get_max_threads(), isa_name(active_isa()));
  fmt::print("| case | dtype | routing | dense GFLOP/s | grouped GFLOP/s | grouped / dense (median) |\n");
  fmt::print("|---|---|---|---|---|---|\n");
  for (DType dt : {DType::kF32, DType::kBF16}) {
    const size_t es = dtype_size(dt);
    const size_t bytes = static_cast<size_t>(R * std::max(emb, mlp)) * es * 4 +
                         static_cast<size_t>((experts + 1) * emb * mlp) * (es + 4) + (size_t{1} << 20);
    Arena arena(bytes, "moe_bench");
    auto make = [&](Shape s, DType d) {
      Tensor t(arena.allocate(static_cast<size_t>(s.numel()) * dtype_size(d)), s, d);
      bench::fill_uniform(t, static_cast<uint64_t>(s.numel()));
      return t;
    };
    const Tensor x = make(Shape{R, emb}, dt), dy = make(Shape{R, mlp}, dt), y = make(Shape{R, mlp}, dt);
    const Tensor dx = make(Shape{R, emb}, dt), w = make(Shape{experts, emb, mlp}, dt);
    const Tensor dw = make(Shape{experts, emb, mlp}, DType::kF32);
    const Tensor w2 = make(Shape{emb, mlp}, dt), dw2 = make(Shape{emb, mlp}, DType::kF32);
    Tensor sizes(arena.allocate(static_cast<size_t>(experts) * 4), Shape{experts}, DType::kI32);
    const double flops = 2.0 * static_cast<double>(R) * static_cast<double>(emb) * static_cast<double>(mlp);
    for (bool skewed : {false, true}) {
      const std::vector<int32_t> gs = group_sizes(R, experts, skewed);
      std::copy(gs.begin(), gs.end(), sizes.ptr<int32_t>());
      struct Case {
        const char* name;
        std::function<void()> dense, grouped;
      };
      const Case cases[] = {
          {"forward", [&] { ops::matmul(x, w2, y); }, [&] { ops::grouped_matmul(x, w, sizes, y); }},
          {"input gradient", [&] { ops::matmul(dy, w2, dx, {.trans_b = true}); },
           [&] { ops::grouped_matmul(dy, w, sizes, dx, {.trans_b = true}); }},
          {"weight gradient", [&] { ops::matmul(x, dy, dw2, {.trans_a = true, .accumulate = true}); },
           [&] { ops::grouped_matmul(x, dy, sizes, dw, {.weight_grad = true, .accumulate = true}); }},
      };
      for (const Case& c : cases) {
        c.dense();
        c.grouped();
        std::vector<double> td, tg, ratio;
        for (int r = 0; r < reps; ++r) {
          const bool dense_first = r % 2 == 0;
          double a = 0, b = 0;
          if (dense_first) {
            a = seconds_of(c.dense);
            b = seconds_of(c.grouped);
          } else {
            b = seconds_of(c.grouped);
            a = seconds_of(c.dense);
          }
          td.push_back(a);
          tg.push_back(b);
          ratio.push_back(a / b);
        }
        auto median = [](std::vector<double> v) {
          std::sort(v.begin(), v.end());
          return v[v.size() / 2];
        };
        fmt::print("| {} | {} | {} | {:.1f} | {:.1f} | {:.3f} |\n", c.name, dtype_name(dt),
                   skewed ? "Zipf" : "balanced", flops / median(td) / 1e9, flops / median(tg) / 1e9,
                   median(ratio));
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  return tessera::run(argc, argv);
}
