// Attention benchmark: causal GQA forward and backward at the training shapes (T = 1024 and 4096,
// H = 12 query heads with Hkv = 4 or 12, D = 64; one D = 128 case), f32 and bf16, plus one
// non-causal row that shows what skipping the masked tiles saves. The "bf16" rows run the f32 path
// (bf16 widened, products in f32); with the AVX-512 kernels they run again on vdpbf16ps (dtype
// "dot") and, on a CPU with AMX tiles, on the tiles ("amx"), whichever attention_products.h would
// choose by itself (the header says which). Prints GFLOP/s for forward,
// backward and both, the fraction of the stated peak of 2 Zen 5 cores, and (column 'meas') the
// fraction of this machine's f32 FMA peak, measured right after each row.
//
// FLOPs are counted as MaxText does (ops/attention.h): causal forward 2*B*T^2*H*D, backward 2.5x.
// The batch of each row is chosen so that one forward + backward takes about --seconds (1 s;
// 0.15 s with --quick, which also leaves out T = 4096); each timing is the best of --reps runs
// (3; 2 with --quick) after a warm-up call.
//
//   build/attention_bench [--quick] [--seconds S] [--reps N] [--only f32|bf16|dot|amx]
//   (threads: OMP_NUM_THREADS). --only runs the rows of one first-column label (e.g. under perf).
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tessera/backends/cpu/attention_products.h"
#include "tessera/backends/cpu/peak.h"
#include "tessera/core/arena.h"
#include "tessera/core/cpu_features.h"
#include "tessera/core/dtype.h"
#include "tessera/ops/attention.h"

namespace {

using tessera::Arena;
using tessera::DType;
using tessera::Shape;
using tessera::Tensor;

// Peak of 2 Zen 5 cores (the machines Tessera's CPU runs are sized for), as stated references:
// 2 cores x 2 FMA pipes x 16 f32 lanes x 2 FLOPs x ~3.5 GHz ~ 445 GFLOP/s; bf16 dot products
// (vdpbf16ps) double it.
constexpr double kPeakF32 = 445e9, kPeakBf16 = 890e9;

struct Case {
  int64_t T, H, Hkv, D;
  DType dtype;
  bool causal;
  tessera::cpu::Bf16Products products = tessera::cpu::Bf16Products::kF32;  // bf16 rows: where products run
};

// This machine's f32 FMA peak with the active ISA on every thread: 24 (AVX-512) or 12 (AVX2)
// independent FMA chains per thread, so that no latency limits them; the best of 5 short runs.
// Results are also reported against it, a reference measured in the same run (bf16 runs on f32
// FMAs too, see attention_kernels.inc). The loop is written out once per ISA because the target
// attribute does not reach into templates or lambdas.
#define TESSERA_FMA_PEAK_LOOP(V, kChains, fmadd, add, set1)                                           \
  constexpr int64_t kIters = 1 << 22;                                                                 \
  double best = 0;                                                                                    \
  for (int rep = 0; rep < 5; ++rep) {                                                                 \
    double total = 0;                                                                                 \
    _Pragma("omp parallel reduction(+ : total)") {                                                    \
      V acc[kChains];                                                                                 \
      for (auto& a : acc) a = set1(1e-7f);                                                            \
      const V one = set1(1.0f), tiny = set1(1e-7f);                                                   \
      const double t0 = omp_get_wtime();                                                              \
      for (int64_t i = 0; i < kIters; ++i)                                                            \
        _Pragma("GCC unroll 24") for (int c = 0; c < kChains; ++c) acc[c] = fmadd(acc[c], one, tiny); \
      const double t = omp_get_wtime() - t0;                                                          \
      float sink[sizeof(V) / sizeof(float)]; /* keeps every chain alive */                            \
      for (int c = 1; c < kChains; ++c) acc[0] = add(acc[0], acc[c]);                                 \
      std::memcpy(sink, &acc[0], sizeof(sink));                                                       \
      total += (sink[0] == -1.0f ? 0.0 : 1.0) * kIters * kChains * 2.0 * (sizeof(V) / 4) / t;         \
    }                                                                                                 \
    best = std::max(best, total);                                                                     \
  }                                                                                                   \
  return best;

__attribute__((target("avx512f"))) double fma_peak_avx512() {
  TESSERA_FMA_PEAK_LOOP(__m512, 24, _mm512_fmadd_ps, _mm512_add_ps, _mm512_set1_ps)
}
__attribute__((target("avx2,fma"))) double fma_peak_avx2() {
  TESSERA_FMA_PEAK_LOOP(__m256, 12, _mm256_fmadd_ps, _mm256_add_ps, _mm256_set1_ps)
}
#undef TESSERA_FMA_PEAK_LOOP

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

template <typename F>
double best_time(int reps, F&& f) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const double t0 = now();
    f();
    best = std::min(best, now() - t0);
  }
  return best;
}

void fill(const Tensor& t, uint64_t seed) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (t.dtype() == DType::kBF16)
      t.ptr<uint16_t>()[i] = tessera::f32_to_bf16(dist(rng));
    else
      t.ptr<float>()[i] = dist(rng);
  }
}

struct Buffers {
  Arena arena;
  Tensor q, k, v, out, lse, dout, dq, dk, dv;
  Buffers(const Case& c, int64_t B) {
    const Shape qs{B, c.T, c.H, c.D}, ks{B, c.T, c.Hkv, c.D}, ls{B, c.H, c.T};
    size_t bytes = 5 * tessera::aligned_bytes(qs, c.dtype) + 4 * tessera::aligned_bytes(ks, c.dtype) +
                   tessera::aligned_bytes(ls, DType::kF32);
    arena = Arena(bytes, "attention_bench");
    q = arena.tensor(qs, c.dtype), out = arena.tensor(qs, c.dtype), dout = arena.tensor(qs, c.dtype);
    dq = arena.tensor(qs, c.dtype);
    k = arena.tensor(ks, c.dtype), v = arena.tensor(ks, c.dtype), dk = arena.tensor(ks, c.dtype);
    dv = arena.tensor(ks, c.dtype);
    lse = arena.tensor(ls, DType::kF32);
    fill(q, 1), fill(k, 2), fill(v, 3), fill(dout, 4);
  }
};

double measured_fma_peak() {
  return tessera::active_isa() == tessera::Isa::kAvx512 ? fma_peak_avx512() : fma_peak_avx2();
}

// The row's name in the first column: f32, bf16 (the f32 path), dot (vdpbf16ps) or amx.
const char* row_label(const Case& c) {
  using tessera::cpu::Bf16Products;
  if (c.dtype != DType::kBF16) return "f32";
  return c.products == Bf16Products::kTiles ? "amx" : c.products == Bf16Products::kDot ? "dot" : "bf16";
}

void run_case(const Case& c, double seconds, int reps) {
  tessera::ops::AttentionOptions opt;
  opt.causal = c.causal;
  auto fwd = [&](const Buffers& b) { tessera::ops::attention_fwd(b.q, b.k, b.v, b.out, b.lse, opt); };
  auto bwd = [&](const Buffers& b) {
    tessera::ops::attention_bwd(b.dout, b.q, b.k, b.v, b.out, b.lse, b.dq, b.dk, b.dv, opt);
  };
  // Calibrate on B = 1 (after a warm-up call that grows the scratch), then size the batch.
  tessera::cpu::pin_bf16_attention_products(c.products);
  auto buf = std::make_unique<Buffers>(c, 1);
  fwd(*buf), bwd(*buf);
  const double per_row = best_time(1, [&] { fwd(*buf), bwd(*buf); });
  const int64_t B = std::clamp<int64_t>(static_cast<int64_t>(seconds / per_row + 0.5), 1, 256);
  if (B > 1) {
    buf = std::make_unique<Buffers>(c, B);
    fwd(*buf), bwd(*buf);  // warm-up at this batch
  }
  const double tf = best_time(reps, [&] { fwd(*buf); }), tb = best_time(reps, [&] { bwd(*buf); });
  tessera::cpu::pin_bf16_attention_products(std::nullopt);
  const double measured_peak = measured_fma_peak();  // right after, so that both see the same machine
  const double ff = tessera::ops::attention_fwd_flops(B, c.T, c.H, c.D, 0, c.causal);
  const double fb = tessera::ops::attention_bwd_flops(B, c.T, c.H, c.D, 0, c.causal);
  const double peak = c.dtype == DType::kBF16 ? kPeakBf16 : kPeakF32;
  const double gf = ff / tf / 1e9, gb = fb / tb / 1e9, gfb = (ff + fb) / (tf + tb) / 1e9;
  std::printf(
      "%-5s %-6s %5lld %3lld %3lld %4lld %4lld | %8.1f %7.1f %5.1f%% | %8.1f %7.1f %5.1f%% | %7.1f %5.1f%% "
      "%5.1f%% of %.0f\n",
      row_label(c), c.causal ? "causal" : "full", static_cast<long long>(c.T), static_cast<long long>(c.H),
      static_cast<long long>(c.Hkv), static_cast<long long>(c.D), static_cast<long long>(B), tf * 1e3, gf,
      100 * gf * 1e9 / peak, tb * 1e3, gb, 100 * gb * 1e9 / peak, gfb, 100 * gfb * 1e9 / peak,
      100 * gfb * 1e9 / measured_peak, measured_peak / 1e9);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 1.0;
  int reps = 3;
  bool quick = false;
  std::string only;  // run only the rows of this label
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      quick = true;
    } else if (a == "--seconds" && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else if (a == "--reps" && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else if (a == "--only" && i + 1 < argc) {
      only = argv[++i];
      if (only != "f32" && only != "bf16" && only != "dot" && only != "amx") {
        std::fprintf(stderr, "--only %s: expected f32, bf16, dot or amx\n", only.c_str());
        return 2;
      }
    } else {
      std::fprintf(stderr, "usage: %s [--quick] [--seconds S] [--reps N] [--only f32|bf16|dot|amx]\n",
                   argv[0]);
      return 2;
    }
  }
  if (quick) seconds = std::min(seconds, 0.15), reps = std::min(reps, 2);
  std::printf("attention benchmark: isa %s, %d threads\n",
              std::string(tessera::isa_name(tessera::active_isa())).c_str(), tessera::num_threads());
  std::printf("stated reference peaks (2 Zen 5 cores): %.0f GFLOP/s f32, %.0f GFLOP/s bf16\n", kPeakF32 / 1e9,
              kPeakBf16 / 1e9);
  std::printf(
      "FLOPs as MaxText counts them: causal forward 2*B*T^2*H*D (full: 4*B*T^2*H*D), backward 2.5x\n");
  std::printf(
      "'meas': f+b against this machine's f32 FMA peak (isa, threads above), measured after each row\n");
  if (tessera::active_isa() == tessera::Isa::kAvx512)
    std::printf("vdpbf16ps / f32 FMA FLOP/s on one thread: %.2f; bf16 attention runs its products on: %s\n",
                tessera::cpu::bf16_dot_speedup(),
                std::string(tessera::cpu::products_name(tessera::cpu::bf16_attention_products())).c_str());
  std::printf("batch B sized for ~%.2f s of forward + backward; times are the best of %d\n\n", seconds, reps);
  std::printf("%-5s %-6s %5s %3s %3s %4s %4s | %8s %7s %6s | %8s %7s %6s | %7s %6s %6s\n", "dtype", "mask",
              "T", "H", "Hkv", "D", "B", "fwd ms", "GFLOP/s", "peak", "bwd ms", "GFLOP/s", "peak", "f+b GF",
              "peak", "meas");
  std::vector<Case> cases;
  for (DType dt : {DType::kF32, DType::kBF16}) {
    cases.push_back({1024, 12, 4, 64, dt, true});
    cases.push_back({1024, 12, 12, 64, dt, true});
    if (!quick) {  // one call at T = 4096 takes most of a second on 2 cores
      cases.push_back({4096, 12, 4, 64, dt, true});
      cases.push_back({4096, 12, 12, 64, dt, true});
    }
    cases.push_back({1024, 12, 4, 128, dt, true});
  }
  cases.push_back({1024, 12, 4, 64, DType::kF32, false});
  using tessera::cpu::Bf16Products;
  std::vector<Bf16Products> paths;
  if (tessera::active_isa() == tessera::Isa::kAvx512) paths.push_back(Bf16Products::kDot);
  if (tessera::active_isa() == tessera::Isa::kAvx512 && tessera::amx_bf16_usable())
    paths.push_back(Bf16Products::kTiles);
  const size_t n = cases.size();
  for (Bf16Products path : paths)
    for (size_t i = 0; i < n; ++i)
      if (cases[i].dtype == DType::kBF16) {
        Case a = cases[i];
        a.products = path;
        cases.push_back(a);
      }
  if (!only.empty()) {
    std::erase_if(cases, [&](const Case& c) { return row_label(c) != only; });
    if (cases.empty()) {
      std::fprintf(stderr, "--only %s: this CPU runs no such rows\n", only.c_str());
      return 2;
    }
  }
  for (const Case& c : cases) run_case(c, seconds, reps);
  return 0;
}
