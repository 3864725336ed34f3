// pointwise_bench: memory bandwidth of the pointwise ops (norms, RoPE, SwiGLU) against the
// machine's stream-triad bandwidth measured in the same run.
//
//   pointwise_bench [--quick] [--threads N] [--isa avx2|avx512] [--reps R]
//
// Triad: a[i] = b[i] + s * c[i] over three 64 MiB f32 arrays from a pre-faulted Arena, all threads,
// counted as STREAM counts it (24 bytes per element: two reads, one write). Each op is timed at
// N = 8192 tokens, C = 768, F = 2048 (RoPE: B = 4, T = 2048, H = 12, D = 64, i.e. the same N x C),
// in f32 and bf16; its bytes are the minimal traffic from the ops' *_bytes functions (each input
// read once, each output written once; no write-allocate), so "of triad" compares like with like.
// Times are the best of R runs after one warm-up. Working sets below the last-level cache size
// printed at the top can run faster than DRAM; the table says each op's working set.
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
#include <vector>

#include "bench_util.h"
#include "tessera/core/arena.h"
#include "tessera/core/cpu_features.h"
#include "tessera/core/dtype.h"
#include "tessera/core/error.h"
#include "tessera/ops/activation.h"
#include "tessera/ops/norm.h"
#include "tessera/ops/rope.h"

namespace {

using namespace tessera;

constexpr int64_t kN = 8192, kC = 768, kF = 2048;
constexpr int64_t kB = 4, kT = 2048, kH = 12, kD = 64;  // kB * kT = kN, kH * kD = kC
constexpr size_t kTriadBytesEach = size_t{64} << 20;

struct Options {
  bool quick = false;
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
    } else if (a == "--reps") {
      o.reps = std::max(1, std::atoi(next().c_str()));
    } else if (a == "--threads") {
      o.threads = std::atoi(next().c_str());
    } else if (a == "--isa") {
      o.isa = next();
    } else {
      std::fprintf(stderr, "usage: pointwise_bench [--quick] [--reps R] [--threads N] [--isa avx2|avx512]\n");
      std::exit(a == "--help" || a == "-h" ? 0 : 2);
    }
  }
  return o;
}

// Best wall time of `reps` runs of f after one warm-up, in seconds.
double best_time(int reps, const std::function<void()>& f) {
  f();
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    auto t1 = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double>(t1 - t0).count());
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
  const size_t es = dtype_size(dt);
  const Shape nc{kN, kC}, nf{kN, kF}, bthd{kB, kT, kH, kD};
  size_t need = 4 * aligned_bytes(nc, dt) + 6 * aligned_bytes(nf, dt) +
                4 * aligned_bytes(Shape{kC}, DType::kF32) + 2 * aligned_bytes(Shape{kN}, DType::kF32) +
                aligned_bytes(Shape{kB, kT}, DType::kI32);
  Arena arena(need, "pointwise_bench");
  Tensor x = arena.tensor(nc, dt), y = arena.tensor(nc, dt), dy = arena.tensor(nc, dt),
         dx = arena.tensor(nc, dt);
  Tensor gamma = arena.tensor(Shape{kC}, DType::kF32), beta = arena.tensor(Shape{kC}, DType::kF32);
  Tensor dgamma = arena.tensor(Shape{kC}, DType::kF32), dbeta = arena.tensor(Shape{kC}, DType::kF32);
  Tensor mean = arena.tensor(Shape{kN}, DType::kF32), rstd = arena.tensor(Shape{kN}, DType::kF32);
  Tensor positions = arena.tensor(Shape{kB, kT}, DType::kI32);
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
  for (int64_t b = 0; b < kB; ++b)
    for (int64_t t = 0; t < kT; ++t) positions.ptr<int32_t>()[b * kT + t] = static_cast<int32_t>(t);
  ops::RopeConfig rc;
  rc.head_dim = kD;
  rc.max_positions = kT;
  ops::RopeTable table(rc);
  Tensor xr = x.reshape(bthd), yr = y.reshape(bthd);

  const int64_t act = kN * kC * static_cast<int64_t>(es), big = kN * kF * static_cast<int64_t>(es);
  auto add = [&](const char* name, int64_t bytes, int64_t working_set, const std::function<void()>& f) {
    rows.push_back({name, dt, bytes, working_set, best_time(o.reps, f)});
  };
  ops::rmsnorm_fwd(x, gamma, 1e-5f, y, rstd);  // the backward needs a valid rstd
  add("rmsnorm_fwd", ops::rmsnorm_fwd_bytes(kN, kC, dt), 2 * act,
      [&] { ops::rmsnorm_fwd(x, gamma, 1e-5f, y, rstd); });
  add("rmsnorm_bwd", ops::rmsnorm_bwd_bytes(kN, kC, dt), 3 * act,
      [&] { ops::rmsnorm_bwd(x, gamma, rstd, dy, dx, dgamma); });
  add("layernorm_fwd", ops::layernorm_fwd_bytes(kN, kC, dt, true), 2 * act,
      [&] { ops::layernorm_fwd(x, gamma, beta, 1e-5f, y, mean, rstd); });
  add("layernorm_bwd", ops::layernorm_bwd_bytes(kN, kC, dt, true), 3 * act,
      [&] { ops::layernorm_bwd(x, gamma, mean, rstd, dy, dx, dgamma, dbeta); });
  add("rope_fwd (rotate_half)", ops::rope_bytes(kN, kH, kD, dt, kT), 2 * act,
      [&] { ops::rope_fwd(xr, positions, table, ops::RopeLayout::kRotateHalf, yr); });
  add("swiglu_fwd", ops::glu_fwd_bytes(kN, kF, dt), 3 * big,
      [&] { ops::glu_fwd(ops::Activation::kSilu, gate, up, out); });
  add("swiglu_bwd", ops::glu_bwd_bytes(kN, kF, dt), 5 * big,
      [&] { ops::glu_bwd(ops::Activation::kSilu, gate, up, dout, dgate, dup); });
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
    std::printf("pointwise_bench: isa %s, %d threads, last-level cache %.0f MiB, %d reps%s\n",
                std::string(isa_name(active_isa())).c_str(), num_threads(), llc > 0 ? llc / 1048576.0 : 0.0,
                o.reps, o.quick ? " (--quick)" : "");
    std::printf(
        "shapes: N = %lld tokens, C = %lld, F = %lld; RoPE [B, T, H, D] = [%lld, %lld, %lld, %lld]\n\n",
        static_cast<long long>(kN), static_cast<long long>(kC), static_cast<long long>(kF),
        static_cast<long long>(kB), static_cast<long long>(kT), static_cast<long long>(kH),
        static_cast<long long>(kD));
    const double triad = bench::stream_triad_gbps(kTriadBytesEach, o.reps);
    std::printf("stream triad (3 x 64 MiB f32, a = b + s*c): %.1f GB/s\n\n", triad);

    std::vector<Row> rows;
    for (DType dt : {DType::kF32, DType::kBF16}) bench_dtype(dt, o, rows);

    std::printf("%-24s %-9s %10s %10s %10s %9s %9s\n", "op", "dtype", "set MiB", "bytes MB", "time ms",
                "GB/s", "of triad");
    for (const Row& r : rows) {
      const double gbps = static_cast<double>(r.bytes) / r.seconds / 1e9;
      std::printf("%-24s %-9s %10.1f %10.1f %10.3f %9.1f %8.0f%%\n", r.op.c_str(),
                  std::string(dtype_name(r.dtype)).c_str(), r.working_set / 1048576.0, r.bytes / 1e6,
                  r.seconds * 1e3, gbps, 100.0 * gbps / triad);
    }
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "pointwise_bench: %s\n", e.what());
    return 1;
  }
}
