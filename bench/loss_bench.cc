// Benchmark of the loss-side ops: softmax cross-entropy (forward + backward), AdamW, SGD, and the
// embedding lookup and its scatter-add, each in GB/s against a stream triad measured in the same
// run (DESIGN.md principle 8: ratios, not absolute claims). These ops stream memory, so the
// fraction of triad bandwidth is what says how good they are.
//
//   loss_bench [--quick] [--in-cache]   ISA and thread count come from the machine and OMP_NUM_THREADS.
//
// Bytes are the compulsory traffic from each op's *_cost function (STREAM convention: a write
// counts once, the write-allocate read is not counted), times are the best of several repetitions.
// Kernels that write in place (AdamW, SGD, the in-place cross-entropy backward, the embedding
// scatter-add) can pass 100% of triad: the triad's stores go to a separate array and cost a
// write-allocate read that STREAM does not count (4/3 of the counted bytes move), theirs do not.
// Memory comes from tessera::Arena (huge pages, pre-faulted), one arena per case, freed after it.
//
// --in-cache: the same cases on one thread at sizes whose working sets fit in a core's L2 (one
// cross-entropy row, 16 K parameters, 64 embedding rows of a 1024-token table). Their GB/s are then
// what the arithmetic sustains, and "ceiling" (that rate times the triad's thread count, over the
// triad) is the most of the triad the case can reach at full size on this machine: below 100 %, it
// is compute-bound here.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "tessera/core/arena.h"
#include "tessera/core/cpu_features.h"
#include "tessera/ops/cross_entropy.h"
#include "tessera/ops/embedding.h"
#include "tessera/ops/optimizer.h"

namespace {

using namespace tessera;

struct Sizes {
  int64_t ce_n, ce_vocab;  // cross-entropy
  int64_t params;          // AdamW / SGD
  int64_t emb_n, emb_c, emb_vocab;
  int reps;            // at least this many timed calls per case,
  double min_seconds;  // and more until this much time has passed (short cases get many tries)
};

constexpr Sizes kFull = {8192, 32000, 125'000'000, 8192, 768, 32000, 5, 1.0};
constexpr Sizes kQuick = {512, 32000, 8'000'000, 1024, 768, 32000, 3, 0.2};
constexpr Sizes kInCache = {1, 32000, 16384, 64, 768, 1024, 200, 0.2};
// 64 MiB per array. Several times a typical last-level cache, but not every one: the header prints
// this machine's L3, and where 3 x 64 MiB is not well beyond it the triad flatters the machine.
constexpr int64_t kTriadBytesPerArray = int64_t{64} << 20;

// Best wall time in seconds over repeated calls after one warm-up call: at least z.reps calls and
// at least z.min_seconds of them in all. The best, not the mean: on a shared machine a parallel
// region waits whenever one of its threads is descheduled, and only the best call shows the kernel.
// `before` (if given) runs untimed ahead of every call, to restore what the call overwrites.
double best_seconds(const Sizes& z, const std::function<void()>& fn,
                    const std::function<void()>& before = {}) {
  using Clock = std::chrono::steady_clock;
  if (before) before();
  fn();
  double best = 1e30, spent = 0;
  for (int r = 0; r < 100000; ++r) {
    if (before) before();
    const auto t0 = Clock::now();
    fn();
    const double t = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::min(best, t);
    spent += t;
    if (r + 1 >= z.reps && spent >= z.min_seconds) break;
  }
  return best;
}

// Deterministic values in [lo, hi) without a serial RNG pass over gigabytes.
void fill_f32(float* x, int64_t n, float lo, float hi) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t h = static_cast<uint32_t>(i) * 2654435761u;  // Knuth's multiplicative hash
    x[i] = lo + (hi - lo) * static_cast<float>(h >> 8) * 0x1p-24f;
  }
}

void fill_bf16(uint16_t* x, int64_t n, float lo, float hi) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t h = static_cast<uint32_t>(i) * 2654435761u;
    x[i] = f32_to_bf16(lo + (hi - lo) * static_cast<float>(h >> 8) * 0x1p-24f);
  }
}

void fill(const Tensor& t, float lo, float hi) {
  if (t.dtype() == DType::kBF16) {
    fill_bf16(t.ptr<uint16_t>(), t.numel(), lo, hi);
  } else {
    fill_f32(t.ptr<float>(), t.numel(), lo, hi);
  }
}

void fill_ids(const Tensor& t, int64_t vocab) {
  for (int64_t i = 0; i < t.numel(); ++i)
    t.ptr<int32_t>()[i] = static_cast<int32_t>((static_cast<uint64_t>(i) * 2654435761u) % vocab);
}

// The last-level cache as the kernel reports it ("266240K"), or "unknown".
std::string l3_size() {
  std::ifstream f("/sys/devices/system/cpu/cpu0/cache/index3/size");
  std::string s;
  if (!(f >> s) || s.empty()) return "unknown";
  if (s.back() == 'K') return fmt::format("{} MiB", std::stoll(s) / 1024);
  return s;
}

struct Row {
  std::string name, size;
  double seconds, bytes, flops;
};

class Table {
 public:
  void add(Row r) { rows_.push_back(std::move(r)); }
  // ceiling_threads > 0: the rows after the first (the triad) ran in cache on one thread, and their
  // last column is the ceiling (file comment) for that many threads.
  void print(double triad_gbs, int ceiling_threads = 0) const {
    fmt::print("{:<34} {:<24} {:>10} {:>9} {:>9} {:>8}\n", "case", "size", "best ms", "GB/s", "GFLOP/s",
               ceiling_threads > 0 ? "ceiling" : "% triad");
    for (size_t i = 0; i < rows_.size(); ++i) {
      const Row& r = rows_[i];
      const double gbs = r.bytes / r.seconds * 1e-9;
      const int scale = ceiling_threads > 0 && i > 0 ? ceiling_threads : 1;
      fmt::print("{:<34} {:<24} {:>10.3f} {:>9.1f} {:>9} {:>7.0f}%\n", r.name, r.size, r.seconds * 1e3, gbs,
                 r.flops > 0 ? fmt::format("{:.1f}", r.flops / r.seconds * 1e-9) : "-",
                 100 * gbs * scale / triad_gbs);
    }
  }

 private:
  std::vector<Row> rows_;
};

// a[i] = b[i] + s c[i] over three 64 MiB arrays: 24 bytes per element (STREAM's count). Each timed
// call makes kTriadSweeps sweeps inside one parallel region, so that the reference is the memory
// system's bandwidth and not also the cost of waking the thread team (milliseconds on a loaded
// machine, where a worker waits for a scheduler tick).
constexpr int kTriadSweeps = 4;

Row bench_triad(const Sizes& z) {
  const int64_t n = kTriadBytesPerArray / 4;
  Arena arena(3 * kTriadBytesPerArray + 3 * Arena::kAlignment, "triad");
  float* a = arena.tensor(Shape{n}, DType::kF32).ptr<float>();
  float* b = arena.tensor(Shape{n}, DType::kF32).ptr<float>();
  float* c = arena.tensor(Shape{n}, DType::kF32).ptr<float>();
  fill_f32(b, n, -1, 1);
  fill_f32(c, n, -1, 1);
  const float s = 3.0f;
  const double sec = best_seconds(z, [&] {
#pragma omp parallel
    for (int sweep = 0; sweep < kTriadSweeps; ++sweep) {
#pragma omp for simd schedule(static)
      for (int64_t i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
    }
  });
  return {"stream triad a = b + s*c", "3 x 64 MiB f32", sec / kTriadSweeps, 3.0 * kTriadBytesPerArray,
          2.0 * n};
}

// Forward then backward in place (the logits become their gradient): as two calls (as evaluation and
// the vocabulary-parallel loss run them), or as the one call training makes.
Row bench_cross_entropy(const Sizes& z, DType dtype, bool fused) {
  const int64_t n = z.ce_n, vocab = z.ce_vocab;
  Arena arena(static_cast<size_t>(n * vocab) * dtype_size(dtype) + (n * 16 + 1024), "cross_entropy");
  Tensor logits = arena.tensor(Shape{n, vocab}, dtype);
  Tensor targets = arena.tensor(Shape{n}, DType::kI32), loss = arena.tensor(Shape{n}, DType::kF32);
  Tensor lse = arena.tensor(Shape{n}, DType::kF32), dloss = arena.tensor(Shape{n}, DType::kF32);
  fill(logits, -8, 8);
  fill_ids(targets, vocab);
  fill_f32(dloss.ptr<float>(), n, 1.0f / n, 1.0f / n);
  // In place the logits become gradients, whose exps sit near 0 rather than spread over [-8, 8]: each
  // call starts from the same values, and the refill is not timed.
  std::vector<char> saved(logits.nbytes());
  std::memcpy(saved.data(), logits.data(), saved.size());
  const double best = best_seconds(
      z,
      [&] {
        if (fused) {
          ops::cross_entropy_forward_backward(logits, targets, dloss, loss, lse, logits);
        } else {
          ops::cross_entropy_forward(logits, targets, loss, lse);
          ops::cross_entropy_backward(logits, targets, lse, dloss, logits);
        }
      },
      [&] { std::memcpy(logits.data(), saved.data(), saved.size()); });
  ops::CrossEntropyCost c = ops::cross_entropy_forward_backward_cost(n, vocab, dtype);
  if (!fused) {
    const auto f = ops::cross_entropy_forward_cost(n, vocab, dtype);
    const auto b = ops::cross_entropy_backward_cost(n, vocab, dtype);
    c = {f.flops + b.flops, f.bytes + b.bytes};
  }
  return {fmt::format("cross-entropy {} {}", fused ? "fused fwd+bwd" : "fwd then bwd", dtype_name(dtype)),
          fmt::format("N={} V={}", n, vocab), best, c.bytes, c.flops};
}

std::vector<Row> bench_optimizers(const Sizes& z) {
  const int64_t n = z.params;
  Arena arena(static_cast<size_t>(n) * 18 + 4096, "optimizer");
  Tensor p = arena.tensor(Shape{n}, DType::kF32), g = arena.tensor(Shape{n}, DType::kF32);
  Tensor m = arena.tensor(Shape{n}, DType::kF32), v = arena.tensor(Shape{n}, DType::kF32);
  Tensor pb = arena.tensor(Shape{n}, DType::kBF16);
  fill(p, -0.1f, 0.1f);
  fill(g, -1e-3f, 1e-3f);  // m and v start at 0: the arena's pages are zero
  const std::string size =
      n >= 1'000'000 ? fmt::format("{:.1f} M params", n * 1e-6) : fmt::format("{} params", n);
  std::vector<Row> rows;
  for (bool copy : {false, true}) {
    ops::AdamWHyperparams hp;
    const double sec = best_seconds(z, [&] {
      ops::adamw_update(p, g, m, v, hp, copy ? pb : Tensor());
      ++hp.step;
    });
    const auto c = ops::adamw_cost(n, copy);
    rows.push_back({copy ? "adamw + bf16 copy" : "adamw", size, sec, c.bytes, c.flops});
  }
  const double sec = best_seconds(z, [&] { ops::sgd_update(p, g, {1e-3, 1.0}); });
  const auto c = ops::sgd_cost(n, false);
  rows.push_back({"sgd", size, sec, c.bytes, c.flops});
  return rows;
}

std::vector<Row> bench_embedding(const Sizes& z) {
  const int64_t n = z.emb_n, c = z.emb_c, vocab = z.emb_vocab;
  Arena arena(static_cast<size_t>(vocab * c) * 10 + static_cast<size_t>(n * c) * 6 + n * 4 + 8192,
              "embedding");
  Tensor table32 = arena.tensor(Shape{vocab, c}, DType::kF32),
         table16 = arena.tensor(Shape{vocab, c}, DType::kBF16);
  Tensor out32 = arena.tensor(Shape{n, c}, DType::kF32), out16 = arena.tensor(Shape{n, c}, DType::kBF16);
  Tensor dtable = arena.tensor(Shape{vocab, c}, DType::kF32), ids = arena.tensor(Shape{n}, DType::kI32);
  fill(table32, -1, 1);
  fill(table16, -1, 1);
  fill(out32, -1e-3f, 1e-3f);
  fill(out16, -1e-3f, 1e-3f);
  fill_ids(ids, vocab);
  const std::string size = fmt::format("N={} C={} V={}", n, c, vocab);
  std::vector<Row> rows;
  for (auto [table, out] :
       {std::pair{table32, out32}, std::pair{table16, out16}, std::pair{table16, out32}}) {
    const double sec = best_seconds(z, [&] { ops::embedding_forward(table, ids, out); });
    const auto k = ops::embedding_forward_cost(n, c, table.dtype(), out.dtype());
    rows.push_back({fmt::format("embedding fwd {} -> {}", dtype_name(table.dtype()), dtype_name(out.dtype())),
                    size, sec, k.bytes, k.flops});
  }
  fill(out32, -1e-3f, 1e-3f);
  fill(out16, -1e-3f, 1e-3f);
  for (const Tensor& dout : {out32, out16}) {
    const double sec = best_seconds(z, [&] { ops::embedding_backward(dout, ids, dtable); });
    const auto k = ops::embedding_backward_cost(n, c, dout.dtype());
    rows.push_back(
        {fmt::format("embedding bwd {} dout", dtype_name(dout.dtype())), size, sec, k.bytes, k.flops});
  }
  return rows;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, in_cache = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      quick = true;
    } else if (a == "--in-cache") {
      in_cache = true;
    } else {
      fmt::print(stderr, "usage: {} [--quick] [--in-cache]\n  unknown argument '{}'\n", argv[0], a);
      return 2;
    }
  }
  const Sizes& z = in_cache ? kInCache : quick ? kQuick : kFull;
  const int threads = num_threads();
  fmt::print("tessera loss_bench{}{}: isa {}, {} threads, L3 {}\n\n", quick ? " --quick" : "",
             in_cache ? " --in-cache (one thread after the triad)" : "", isa_name(active_isa()), threads,
             l3_size());
  try {
    Table table;
    const Row triad = bench_triad(quick || in_cache ? kQuick : kFull);
    table.add(triad);
    if (in_cache) set_num_threads(1);
    for (DType dt : {DType::kF32, DType::kBF16})
      for (bool fused : {false, true}) table.add(bench_cross_entropy(z, dt, fused));
    for (auto& r : bench_optimizers(z)) table.add(r);
    for (auto& r : bench_embedding(z)) table.add(r);
    table.print(triad.bytes / triad.seconds * 1e-9, in_cache ? threads : 0);
  } catch (const std::exception& e) {
    fmt::print(stderr, "loss_bench: {}\n", e.what());
    return 1;
  }
  return 0;
}
