// pointwise_bench: memory bandwidth of the pointwise ops (norms, RoPE, SwiGLU) against the
// machine's stream-triad bandwidth measured in the same run.
//
//   pointwise_bench [--quick] [--in-cache] [--threads N] [--isa avx2|avx512] [--reps R]
//
// Triad: a[i] = b[i] + s * c[i] over three 64 MiB f32 arrays from a pre-faulted Arena, all threads,
// counted as STREAM counts it (24 bytes per element: two reads, one write). Each op is timed at
// N = 8192 tokens, C = 768, F = 2048 (RoPE: B = 4, T = 2048, H = 12, D = 64, i.e. the same N x C),
// in f32 and bf16; its bytes are the minimal traffic from the ops' *_bytes functions (each input
// read once, each output written once; no write-allocate), so "of triad" compares like with like.
// Times are the best of R runs after one warm-up. Working sets below the last-level cache size
// printed at the top can run faster than DRAM; the table says each op's working set.
//
// Last, zeroing a gradient-sized tensor (512 MiB) three ways: bench_zeroing below.
//
// --in-cache: the same ops on one thread at N = 8 tokens (RoPE: B = 1, T = 8), whose working sets
// fit in a core's L2, best of R x 200 calls. Their GB/s are then what the arithmetic sustains, not
// the memory, and "ceiling" (that rate times the triad's thread count, over the triad) is the most
// of the triad the op can reach at full size on this machine: below 100 %, it is compute-bound here
// (on Zen 1's 128-bit units, for instance, the bf16 conversions and SwiGLU's exp and division).
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "bench_util.h"
#include "tessera/backends/backend.h"
#include "tessera/core/arena.h"
#include "tessera/core/cpu_features.h"
#include "tessera/core/dtype.h"
#include "tessera/core/error.h"
#include "tessera/ops/activation.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/norm.h"
#include "tessera/ops/rope.h"

namespace {

using namespace tessera;

struct Shapes {
  int64_t n, c, f;     // tokens, model width, MLP width
  int64_t b, t, h, d;  // RoPE's [B, T, H, D]: b * t = n, h * d = c
};
constexpr Shapes kFull = {8192, 768, 2048, 4, 2048, 12, 64};
constexpr Shapes kInCache = {8, 768, 2048, 1, 8, 12, 64};
constexpr int kInCacheCalls = 200;  // calls per timed rep in --in-cache
constexpr size_t kTriadBytesEach = size_t{64} << 20;

struct Options {
  bool quick = false;
  bool in_cache = false;
  int reps = 10;
  int threads = 0;  // 0: leave the OpenMP default
  std::string isa;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--quick") {
      o.quick = true;
      o.reps = 3;
    } else if (a == "--in-cache") {
      o.in_cache = true;
    } else if (a == "--reps") {
      o.reps = std::max(1, std::atoi(next().c_str()));
    } else if (a == "--threads") {
      o.threads = std::atoi(next().c_str());
    } else if (a == "--isa") {
      o.isa = next();
    } else {
      std::fprintf(
          stderr,
          "usage: pointwise_bench [--quick] [--in-cache] [--reps R] [--threads N] [--isa avx2|avx512]\n");
      std::exit(a == "--help" || a == "-h" ? 0 : 2);
    }
  }
  return o;
}

// Best wall time of `reps` runs of `calls` calls of f after one warm-up, in seconds per call.
double best_time(int reps, int calls, const std::function<void()>& f) {
  f();
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    for (int c = 0; c < calls; ++c) f();
    auto t1 = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double>(t1 - t0).count() / calls);
  }
  return best;
}

struct Row {
  std::string op;
  DType dtype;
  int64_t bytes;
  int64_t working_set;  // bytes the op touches (inputs + outputs), to compare with the LLC
  double seconds;
};

void bench_dtype(DType dt, const Options& o, std::vector<Row>& rows) {
  const Shapes& z = o.in_cache ? kInCache : kFull;
  const size_t es = dtype_size(dt);
  const Shape nc{z.n, z.c}, nf{z.n, z.f}, bthd{z.b, z.t, z.h, z.d};
  size_t need = 4 * aligned_bytes(nc, dt) + 6 * aligned_bytes(nf, dt) +
                4 * aligned_bytes(Shape{z.c}, DType::kF32) + 2 * aligned_bytes(Shape{z.n}, DType::kF32) +
                aligned_bytes(Shape{z.b, z.t}, DType::kI32);
  Arena arena(need, "pointwise_bench");
  Tensor x = arena.tensor(nc, dt), y = arena.tensor(nc, dt), dy = arena.tensor(nc, dt),
         dx = arena.tensor(nc, dt);
  Tensor gamma = arena.tensor(Shape{z.c}, DType::kF32), beta = arena.tensor(Shape{z.c}, DType::kF32);
  Tensor dgamma = arena.tensor(Shape{z.c}, DType::kF32), dbeta = arena.tensor(Shape{z.c}, DType::kF32);
  Tensor mean = arena.tensor(Shape{z.n}, DType::kF32), rstd = arena.tensor(Shape{z.n}, DType::kF32);
  Tensor positions = arena.tensor(Shape{z.b, z.t}, DType::kI32);
  Tensor gate = arena.tensor(nf, dt), up = arena.tensor(nf, dt), out = arena.tensor(nf, dt);
  Tensor dout = arena.tensor(nf, dt), dgate = arena.tensor(nf, dt), dup = arena.tensor(nf, dt);
  bench::fill_uniform(x, 1);
  bench::fill_uniform(dy, 2);
  bench::fill_uniform(gamma, 3, 0.5f, 1.5f);
  bench::fill_uniform(beta, 4);
  bench::fill_uniform(gate, 5, -4.0f, 4.0f);
  bench::fill_uniform(up, 6);
  bench::fill_uniform(dout, 7);
  std::memset(dgamma.data(), 0, dgamma.nbytes());
  std::memset(dbeta.data(), 0, dbeta.nbytes());
  for (int64_t b = 0; b < z.b; ++b)
    for (int64_t t = 0; t < z.t; ++t) positions.ptr<int32_t>()[b * z.t + t] = static_cast<int32_t>(t);
  ops::RopeConfig rc;
  rc.head_dim = z.d;
  rc.max_positions = z.t;
  ops::RopeTable table(rc);
  Tensor xr = x.reshape(bthd), yr = y.reshape(bthd);

  const int64_t act = z.n * z.c * static_cast<int64_t>(es), big = z.n * z.f * static_cast<int64_t>(es);
  auto add = [&](const char* name, int64_t bytes, int64_t working_set, const std::function<void()>& f) {
    rows.push_back({name, dt, bytes, working_set, best_time(o.reps, o.in_cache ? kInCacheCalls : 1, f)});
  };
  ops::rmsnorm_fwd(x, gamma, 1e-5f, y, rstd);  // the backward needs a valid rstd
  add("rmsnorm_fwd", ops::rmsnorm_fwd_bytes(z.n, z.c, dt), 2 * act,
      [&] { ops::rmsnorm_fwd(x, gamma, 1e-5f, y, rstd); });
  add("rmsnorm_bwd", ops::rmsnorm_bwd_bytes(z.n, z.c, dt), 3 * act,
      [&] { ops::rmsnorm_bwd(x, gamma, rstd, dy, dx, dgamma); });
  // Training's residual-stream gradient sum: the backward then an add, against the backward adding
  // dx to the sum so far (graph/fuse.h); both rows' times add up to the first way.
  add("add (dx + dy)", 3 * act, 3 * act, [&] { ops::add(dx, dy, y); });
  add("rmsnorm_bwd, dx accumulated", ops::rmsnorm_bwd_bytes(z.n, z.c, dt) + act, 3 * act,
      [&] { ops::rmsnorm_bwd(x, gamma, rstd, dy, dx, dgamma, 0, /*accumulate_dx=*/true); });
  add("layernorm_fwd", ops::layernorm_fwd_bytes(z.n, z.c, dt, true), 2 * act,
      [&] { ops::layernorm_fwd(x, gamma, beta, 1e-5f, y, mean, rstd); });
  add("layernorm_bwd", ops::layernorm_bwd_bytes(z.n, z.c, dt, true), 3 * act,
      [&] { ops::layernorm_bwd(x, gamma, mean, rstd, dy, dx, dgamma, dbeta); });
  add("rope_fwd (rotate_half)", ops::rope_bytes(z.n, z.h, z.d, dt, z.t), 2 * act,
      [&] { ops::rope_fwd(xr, positions, table, ops::RopeLayout::kRotateHalf, yr); });
  add("swiglu_fwd", ops::glu_fwd_bytes(z.n, z.f, dt), 3 * big,
      [&] { ops::glu_fwd(ops::Activation::kSilu, gate, up, out); });
  add("swiglu_bwd", ops::glu_bwd_bytes(z.n, z.f, dt), 5 * big,
      [&] { ops::glu_bwd(ops::Activation::kSilu, gate, up, dout, dgate, dup); });
}

// Zeroing a step's gradients (the 125M model's are 537 MB, larger than most last-level caches):
// one 512 MiB tensor by memset on the calling thread (as Executor::zero_grads did), by the
// backend's fill_zero (threads) and by fill_zero_for_later (threads, streaming stores). Bytes are
// the tensor's size.
void bench_zeroing(const Options& o) {
  const Shape shape{int64_t{128} << 20};
  Arena arena(aligned_bytes(shape, DType::kF32), "pointwise_bench zeroing");
  const Tensor t = arena.tensor(shape, DType::kF32);
  backends::Backend& cpu = backends::backend_for(Device::cpu());
  const std::vector<std::pair<const char*, std::function<void()>>> ways = {
      {"memset, one thread", [&] { std::memset(t.data(), 0, t.nbytes()); }},
      {"fill_zero", [&] { cpu.fill_zero(t); }},
      {"fill_zero_for_later", [&] { cpu.fill_zero_for_later(t); }}};
  std::printf("\nzeroing %.0f MiB of gradients\n%-24s %10s %9s\n", t.nbytes() / 1048576.0, "way", "time ms",
              "GB/s");
  for (const auto& [name, f] : ways) {
    const double sec = best_time(o.reps, 1, f);
    std::printf("%-24s %10.3f %9.1f\n", name, sec * 1e3, static_cast<double>(t.nbytes()) / sec / 1e9);
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tessera;
  Options o = parse(argc, argv);
  try {
    if (o.threads > 0) set_num_threads(o.threads);
    if (o.isa == "avx2")
      set_active_isa(Isa::kAvx2);
    else if (o.isa == "avx512")
      set_active_isa(Isa::kAvx512);
    else if (!o.isa.empty())
      fail(ErrorKind::kConfig, "--isa must be avx2 or avx512, got '{}'", o.isa);
    const long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
    const Shapes& z = o.in_cache ? kInCache : kFull;
    std::printf("pointwise_bench: isa %s, %d threads, last-level cache %.0f MiB, %d reps%s%s\n",
                std::string(isa_name(active_isa())).c_str(), num_threads(), llc > 0 ? llc / 1048576.0 : 0.0,
                o.reps, o.quick ? " (--quick)" : "", o.in_cache ? ", in cache on one thread" : "");
    std::printf(
        "shapes: N = %lld tokens, C = %lld, F = %lld; RoPE [B, T, H, D] = [%lld, %lld, %lld, %lld]\n\n",
        static_cast<long long>(z.n), static_cast<long long>(z.c), static_cast<long long>(z.f),
        static_cast<long long>(z.b), static_cast<long long>(z.t), static_cast<long long>(z.h),
        static_cast<long long>(z.d));
    const double triad = bench::stream_triad_gbps(kTriadBytesEach, o.reps);
    const int triad_threads = num_threads();
    std::printf("stream triad (3 x 64 MiB f32, a = b + s*c, %d threads): %.1f GB/s\n\n", triad_threads,
                triad);
    if (o.in_cache) set_num_threads(1);

    std::vector<Row> rows;
    for (DType dt : {DType::kF32, DType::kBF16}) bench_dtype(dt, o, rows);

    // In cache, the time is per call in microseconds, and "ceiling" replaces "of triad" (file comment).
    std::printf("%-24s %-9s %10s %10s %10s %9s %9s\n", "op", "dtype", "set MiB", "bytes MB",
                o.in_cache ? "time us" : "time ms", "GB/s", o.in_cache ? "ceiling" : "of triad");
    for (const Row& r : rows) {
      const double gbps = static_cast<double>(r.bytes) / r.seconds / 1e9;
      const double share = o.in_cache ? gbps * triad_threads / triad : gbps / triad;
      std::printf("%-24s %-9s %10.3f %10.3f %10.3f %9.1f %8.0f%%\n", r.op.c_str(),
                  std::string(dtype_name(r.dtype)).c_str(), r.working_set / 1048576.0, r.bytes / 1e6,
                  r.seconds * (o.in_cache ? 1e6 : 1e3), gbps, 100.0 * share);
    }
    if (!o.in_cache) bench_zeroing(o);
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "pointwise_bench: %s\n", e.what());
    return 1;
  }
}
