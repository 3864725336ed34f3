// GEMM benchmark: Tessera's ops::matmul against oneDNN called directly, in the same run.
//
// For each case (the GEMMs of a GPT-2-small-sized layer at 8192 tokens: attention projection,
// MLP up and down, logits; forward in f32 and bf16, bf16 output for one shape, and the backward's
// dx = dy·Wᵀ and dW += xᵀ·dy) and each thread count, both paths run on the same buffers (one
// arena, 64-byte aligned, pre-faulted), interleaved and alternating which goes first, after one
// warm-up call each. GFLOP/s are medians over repetitions. The ratio Tessera / oneDNN (target
// >= 0.95) is the median of the per-repetition ratios: each repetition runs the two paths back to
// back, so a ratio compares calls that saw the same machine load, which matters on a shared
// machine where load drifts between repetitions. "same" checks that both paths wrote the same
// output (non-accumulating cases). The direct path is the minimal use of oneDNN: its own engine, stream and
// primitive, built from the same memory descriptors, and executed with a prebuilt argument map.
// Tessera's f32 GEMMs whose B is a weight (M >= 1024, not trans_a) copy B into oneDNN's preferred
// layout before each call (onednn_matmul.h; the impl column says "B reordered"): their ratio counts
// that copy's cost and the faster GEMM it buys. On a CPU where oneDNN has no bf16 GEMM, Tessera's
// bf16 cases run widened to f32 (onednn_matmul.h) against oneDNN's f32 GEMM of the same shape.
//
// The last section measures per-call overhead on small GEMMs, where it could matter: Tessera's
// call (cached primitive, cached memory objects), the direct call, and the direct call that also
// creates its dnnl::memory objects and argument map on every call.
//
// Usage: gemm_bench [--quick] [--json FILE] [--threads 1,2] [--filter NAME]
//   --quick  M (the token count) is 1024 instead of 8192 and each case runs ~0.2 s; well under a
//            minute in all. The full run takes a few minutes on two cores.
//   --filter only the cases whose name contains NAME (e.g. "mlp_down", ".dW"); skips the
//            overhead section.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl_debug.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "tessera/backends/cpu/onednn_matmul.h"
#include "tessera/core/arena.h"
#include "tessera/core/cpu_features.h"
#include "tessera/core/error.h"
#include "tessera/ops/convert.h"
#include "tessera/ops/matmul.h"

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  bool quick = false;
  std::string json_path;
  std::vector<int> threads = {1, 2};
  std::string filter;  // run only cases whose name contains this
  bool overhead = true;
};

struct Case {
  std::string name;
  int64_t m, n, k;
  bool trans_a = false, trans_b = false, accumulate = false;
  DType ab = DType::kF32, c = DType::kF32;
};

// Forward shapes (M, N, K): y[M,N] = x[M,K]·W[K,N]. The backward of the same layer is
// dx[M,K] = dy[M,N]·Wᵀ (GEMM M x K x N, trans_b) and dW[K,N] += xᵀ·dy (GEMM K x N x M, trans_a).
std::vector<Case> make_cases(int64_t tokens) {
  struct Fwd {
    const char* name;
    int64_t n, k;
  };
  const Fwd fwd[] = {
      {"attn_proj", 768, 768}, {"mlp_up", 2048, 768}, {"mlp_down", 768, 2048}, {"logits", 32000, 768}};
  std::vector<Case> cases;
  for (DType ab : {DType::kF32, DType::kBF16})
    for (const Fwd& f : fwd)
      cases.push_back({f.name, tokens, f.n, f.k, false, false, false, ab, DType::kF32});
  cases.push_back({"mlp_up", tokens, 2048, 768, false, false, false, DType::kBF16, DType::kBF16});
  for (DType ab : {DType::kF32, DType::kBF16})
    for (const Fwd& f : {fwd[0], fwd[1]}) {
      cases.push_back({std::string(f.name) + ".dx", tokens, f.k, f.n, false, true, false, ab, DType::kF32});
      // As training sums the dx of products that read one input (graph/fuse.h): into the sum so far.
      cases.push_back(
          {std::string(f.name) + ".dx+acc", tokens, f.k, f.n, false, true, true, ab, DType::kF32});
      cases.push_back({std::string(f.name) + ".dW", f.k, f.n, tokens, true, false, true, ab, DType::kF32});
    }
  return cases;
}

// ---- oneDNN called directly: nothing from Tessera but the pointers ----

dnnl::memory::data_type dnnl_type(DType t) {
  return t == DType::kBF16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32;
}

struct DirectDescs {
  dnnl::memory::desc a, b, c;
  dnnl::primitive_attr attr;
};

DirectDescs direct_descs(const Case& t) {
  using dims = dnnl::memory::dims;
  DirectDescs d;
  d.a = dnnl::memory::desc({t.m, t.k}, dnnl_type(t.ab), t.trans_a ? dims{1, t.m} : dims{t.k, 1});
  d.b = dnnl::memory::desc({t.k, t.n}, dnnl_type(t.ab), t.trans_b ? dims{1, t.k} : dims{t.n, 1});
  d.c = dnnl::memory::desc({t.m, t.n}, dnnl_type(t.c), dims{t.n, 1});
  if (t.accumulate) {
    dnnl::post_ops ops;
    ops.append_sum(1.0f);
    d.attr.set_post_ops(ops);
  }
  return d;
}

struct DirectGemm {
  DirectDescs d;
  dnnl::matmul prim;
  std::unordered_map<int, dnnl::memory> args;
  std::string impl;

  DirectGemm(const dnnl::engine& eng, const Case& t, void* a, void* b, void* c) : d(direct_descs(t)) {
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(d.a, d.b, d.c), d.attr, eng);
    prim = dnnl::matmul(pd);
    impl = pd.impl_info_str();
    args = {{DNNL_ARG_SRC, dnnl::memory(d.a, eng, a)},
            {DNNL_ARG_WEIGHTS, dnnl::memory(d.b, eng, b)},
            {DNNL_ARG_DST, dnnl::memory(d.c, eng, c)}};
  }
  void run(dnnl::stream& s) {
    prim.execute(s, args);
    s.wait();
  }
  // The same call with memory objects and the argument map made afresh, as oneDNN's examples do.
  void run_fresh_memory(const dnnl::engine& eng, dnnl::stream& s, void* a, void* b, void* c) {
    prim.execute(s, {{DNNL_ARG_SRC, dnnl::memory(d.a, eng, a)},
                     {DNNL_ARG_WEIGHTS, dnnl::memory(d.b, eng, b)},
                     {DNNL_ARG_DST, dnnl::memory(d.c, eng, c)}});
    s.wait();
  }
};

// ---- buffers ----

// Uniform values in [-1, 1) from a hash of the index: fast, parallel and reproducible.
void fill_uniform(float* x, int64_t n, uint64_t seed) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    uint64_t z = (static_cast<uint64_t>(i) + seed) * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    x[i] = static_cast<float>(static_cast<double>(z >> 11) * 0x1p-52 - 1.0);
  }
}

// A fingerprint of the bits of t: a sum modulo 2^64 of hashed (position, 16-bit word) pairs.
// Integer addition is associative, so the result does not depend on how threads split the sum;
// any changed bit changes it with overwhelming probability.
uint64_t fingerprint(const Tensor& t) {
  const auto* w = static_cast<const uint16_t*>(t.data());
  const int64_t n = static_cast<int64_t>(t.nbytes() / 2);
  uint64_t s = 0;
#pragma omp parallel for reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += (static_cast<uint64_t>(i) << 16 | w[i]) * 0x9e3779b97f4a7c15ull >> 7;
  return s;
}

// Inputs in both dtypes (the bf16 copies are the f32 values rounded), and one output buffer
// large enough for the largest C in f32.
struct Buffers {
  Arena arena;
  float *a32, *b32;
  uint16_t *a16, *b16;
  void* c;

  explicit Buffers(const std::vector<Case>& cases) {
    int64_t na = 0, nb = 0, nc = 0;
    for (const Case& t : cases) {
      na = std::max(na, t.m * t.k);
      nb = std::max(nb, t.k * t.n);
      nc = std::max(nc, t.m * t.n);
    }
    arena =
        Arena(aligned_bytes(Shape{na}, DType::kF32) * 3 / 2 + aligned_bytes(Shape{nb}, DType::kF32) * 3 / 2 +
                  aligned_bytes(Shape{nc}, DType::kF32) + 4 * Arena::kAlignment,
              "gemm_bench");
    Tensor ta32 = arena.tensor(Shape{na}, DType::kF32), tb32 = arena.tensor(Shape{nb}, DType::kF32);
    Tensor ta16 = arena.tensor(Shape{na}, DType::kBF16), tb16 = arena.tensor(Shape{nb}, DType::kBF16);
    a32 = ta32.ptr<float>();
    b32 = tb32.ptr<float>();
    a16 = ta16.ptr<uint16_t>();
    b16 = tb16.ptr<uint16_t>();
    c = arena.tensor(Shape{nc}, DType::kF32).data();
    fill_uniform(a32, na, 1);
    fill_uniform(b32, nb, 2);
    ops::convert(ta32, ta16);
    ops::convert(tb32, tb16);
  }
  void* a(DType t) { return t == DType::kBF16 ? static_cast<void*>(a16) : a32; }
  void* b(DType t) { return t == DType::kBF16 ? static_cast<void*>(b16) : b32; }
};

// ---- measurement ----

double seconds_of(const auto& f) {
  auto t0 = Clock::now();
  f();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

struct Result {
  Case c;
  int threads;
  int reps;
  double tessera_s, onednn_s;  // medians
  double tessera_min_s, onednn_min_s;
  double ratio;  // median over repetitions of oneDNN time / Tessera time
  std::string impl, same;
};

Result measure(const Case& t, int threads, const Options& opt, Buffers& buf, const dnnl::engine& eng,
               dnnl::stream& strm) {
  set_num_threads(threads);
  Tensor a(buf.a(t.ab), t.trans_a ? Shape{t.k, t.m} : Shape{t.m, t.k}, t.ab);
  Tensor b(buf.b(t.ab), t.trans_b ? Shape{t.n, t.k} : Shape{t.k, t.n}, t.ab);
  Tensor c(buf.c, Shape{t.m, t.n}, t.c);
  std::memset(c.data(), 0, c.nbytes());  // accumulate starts from zeros, never from stale bits
  const ops::MatmulOptions mo{.trans_a = t.trans_a, .trans_b = t.trans_b, .accumulate = t.accumulate};
  // Where oneDNN has no bf16 GEMM (AVX2 without AVX-512), Tessera widens bf16 to f32 and oneDNN
  // cannot be called in bf16: the direct path then runs the f32 GEMM of the same shape on the f32
  // inputs, so the ratio is the widening's cost, and the outputs are not compared.
  const bool widened = t.ab == DType::kBF16 && !cpu::onednn_matmul_native_bf16();
  Case direct_case = t;
  if (widened) direct_case.ab = direct_case.c = DType::kF32;
  DirectGemm direct(eng, direct_case, buf.a(direct_case.ab), buf.b(direct_case.ab), c.data());
  auto run_tessera = [&] { ops::matmul(a, b, c, mo); };
  auto run_direct = [&] { direct.run(strm); };

  run_tessera();  // warm-up; the first call also creates the primitive
  const double warm = seconds_of(run_direct);
  const double budget = opt.quick ? 0.2 : 1.0;  // seconds per case, both paths together
  const int reps = std::clamp(static_cast<int>(budget / (2 * warm)), 3, opt.quick ? 10 : 25);
  std::vector<double> ts, td, ratios;
  Result r{t, threads, reps, 0, 0, 0, 0, 0, "", "-"};
  for (int i = 0; i < reps; ++i) {
    const bool last = i == reps - 1;
    uint64_t first = 0;
    if (i % 2 == 0) {
      ts.push_back(seconds_of(run_tessera));
      if (last) first = fingerprint(c);
      td.push_back(seconds_of(run_direct));
    } else {
      td.push_back(seconds_of(run_direct));
      if (last) first = fingerprint(c);
      ts.push_back(seconds_of(run_tessera));
    }
    // Same descriptors and thread count: both paths must write the same bits.
    if (last && !t.accumulate && !widened) r.same = first == fingerprint(c) ? "yes" : "NO";
    ratios.push_back(td.back() / ts.back());
  }
  r.tessera_s = median(ts);
  r.onednn_s = median(td);
  r.tessera_min_s = *std::min_element(ts.begin(), ts.end());
  r.onednn_min_s = *std::min_element(td.begin(), td.end());
  r.ratio = median(ratios);
  r.impl = widened ? "f32 " + direct.impl + " (no bf16 GEMM here; tessera widens to it)" : direct.impl;
  const std::string tessera_impl =
      cpu::onednn_matmul_impl({t.m, t.n, t.k, t.trans_a, t.trans_b, t.ab, t.c, t.accumulate});
  if (tessera_impl != direct.impl && !widened) r.impl += " (tessera: " + tessera_impl + ")";
  return r;
}

std::string dtype_label(const Case& t) {
  auto s = [](DType d) { return d == DType::kBF16 ? "bf16" : "f32"; };
  return fmt::format("{}->{}", s(t.ab), s(t.c));
}

std::string flags_label(const Case& t) {
  std::string f = std::string(t.trans_a ? "T" : "N") + (t.trans_b ? "T" : "N");
  return t.accumulate ? f + "+acc" : f;
}

double gflops(const Case& t, double s) {
  return ops::matmul_flops(t.m, t.n, t.k) / s * 1e-9;
}

void print_row(const Result& r) {
  const Case& t = r.c;
  fmt::print("{:<14} {:<10} {:>5} {:>5} {:>5}  {:<6} {:>3} {:>4}  {:>9.1f} {:>9.1f}  {:>6.3f}  {:<4} {}\n",
             t.name, dtype_label(t), t.m, t.n, t.k, flags_label(t), r.threads, r.reps, gflops(t, r.tessera_s),
             gflops(t, r.onednn_s), r.ratio, r.same, r.impl);
  std::fflush(stdout);
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

// Per-call overhead on small GEMMs: microseconds per call, median of batches.
void overhead_section(const dnnl::engine& eng, dnnl::stream& strm, Buffers& buf, nlohmann::json& out) {
  set_num_threads(1);
  fmt::print("\nper-call overhead, 1 thread, f32 (us per call, median of 15 batches of 200 calls):\n");
  fmt::print("{:<16} {:>9} {:>9} {:>16}\n", "M x N x K", "tessera", "oneDNN", "oneDNN+new mem");
  for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 768, 768}, {16, 64, 64}, {128, 768, 768}}) {
    Case t{"overhead", m, n, k};
    Tensor a(buf.a32, Shape{m, k}, DType::kF32), b(buf.b32, Shape{k, n}, DType::kF32);
    Tensor c(buf.c, Shape{m, n}, DType::kF32);
    DirectGemm direct(eng, t, a.data(), b.data(), c.data());
    auto per_call = [](const auto& f) {
      std::vector<double> v;
      for (int batch = 0; batch < 16; ++batch) {
        double s = seconds_of([&] {
          for (int i = 0; i < 200; ++i) f();
        });
        if (batch > 0) v.push_back(s / 200 * 1e6);  // batch 0 warms up
      }
      return median(v);
    };
    double us_t = per_call([&] { ops::matmul(a, b, c); });
    double us_d = per_call([&] { direct.run(strm); });
    double us_f = per_call([&] { direct.run_fresh_memory(eng, strm, a.data(), b.data(), c.data()); });
    std::string shape = fmt::format("{} x {} x {}", m, n, k);
    fmt::print("{:<16} {:>9.2f} {:>9.2f} {:>16.2f}\n", shape, us_t, us_d, us_f);
    out.push_back(
        {{"shape", shape}, {"tessera_us", us_t}, {"onednn_us", us_d}, {"onednn_new_memory_us", us_f}});
  }
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    if (s == "--quick") {
      o.quick = true;
    } else if (s == "--json" && i + 1 < argc) {
      o.json_path = argv[++i];
    } else if (s == "--filter" && i + 1 < argc) {
      o.filter = argv[++i];
      o.overhead = false;
    } else if (s == "--threads" && i + 1 < argc) {
      o.threads.clear();
      std::string list = argv[++i];
      for (size_t p = 0; p < list.size();) {
        size_t q = list.find(',', p);
        if (q == std::string::npos) q = list.size();
        o.threads.push_back(std::stoi(list.substr(p, q - p)));
        p = q + 1;
      }
    } else {
      fail(ErrorKind::kConfig,
           "gemm_bench: unknown argument '{}'; usage: gemm_bench [--quick] [--json FILE] "
           "[--threads 1,2] [--filter NAME]",
           s);
    }
  }
  return o;
}

nlohmann::json to_json(const Result& r) {
  const Case& t = r.c;
  return {{"case", t.name},
          {"m", t.m},
          {"n", t.n},
          {"k", t.k},
          {"trans_a", t.trans_a},
          {"trans_b", t.trans_b},
          {"accumulate", t.accumulate},
          {"ab_dtype", dtype_name(t.ab)},
          {"c_dtype", dtype_name(t.c)},
          {"threads", r.threads},
          {"reps", r.reps},
          {"tessera_median_s", r.tessera_s},
          {"onednn_median_s", r.onednn_s},
          {"tessera_min_s", r.tessera_min_s},
          {"onednn_min_s", r.onednn_min_s},
          {"tessera_gflops", gflops(t, r.tessera_s)},
          {"onednn_gflops", gflops(t, r.onednn_s)},
          {"ratio", r.ratio},
          {"same_output", r.same},
          {"impl", r.impl}};
}

int run(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  const int64_t tokens = opt.quick ? 1024 : 8192;
  const std::vector<Case> cases = make_cases(tokens);
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream strm(eng);
  const dnnl_version_t* v = dnnl_version();
  fmt::print("gemm_bench: Tessera ops::matmul vs oneDNN called directly (same descriptors, same buffers)\n");
  fmt::print("cpu: {}; {} cores available, OpenMP max threads {}\n", cpu_model(), omp_get_num_procs(),
             omp_get_max_threads());
  fmt::print("isa: tessera kernels {}; oneDNN {}.{}.{} uses {}\n", isa_name(best_isa()), v->major, v->minor,
             v->patch, dnnl_cpu_isa2str(dnnl_get_effective_cpu_isa()));
  fmt::print("mode: {} (M = {} tokens); threads: {}; median of reps after one warm-up, interleaved\n",
             opt.quick ? "quick" : "full", tokens, fmt::join(opt.threads, ", "));
  Buffers buf(cases);
  fmt::print("\n{:<14} {:<10} {:>5} {:>5} {:>5}  {:<6} {:>3} {:>4}  {:>9} {:>9}  {:>6}  {:<4} {}\n", "case",
             "dtype", "M", "N", "K", "op", "thr", "reps", "tessera", "oneDNN", "ratio", "same",
             "oneDNN impl");
  fmt::print("{:<14} {:<10} {:>5} {:>5} {:>5}  {:<6} {:>3} {:>4}  {:>9} {:>9}\n", "", "", "", "", "", "", "",
             "", "GFLOP/s", "GFLOP/s");
  std::vector<Result> results;
  for (int threads : opt.threads)
    for (const Case& t : cases) {
      if (t.name.find(opt.filter) == std::string::npos) continue;
      results.push_back(measure(t, threads, opt, buf, eng, strm));
      print_row(results.back());
    }
  double worst = 1e9;
  for (const Result& r : results) worst = std::min(worst, r.ratio);
  fmt::print("\nlowest ratio Tessera/oneDNN: {:.3f} (target >= 0.95: {})\n", worst,
             worst >= 0.95 ? "met" : "NOT met");
  fmt::print("Tessera's oneDNN scratchpad, shared by all its primitives: {:.1f} MiB\n",
             cpu::onednn_matmul_scratchpad_bytes() / 1048576.0);

  nlohmann::json out = {{"cpu", cpu_model()},
                        {"tessera_isa", isa_name(best_isa())},
                        {"onednn_isa", dnnl_cpu_isa2str(dnnl_get_effective_cpu_isa())},
                        {"mode", opt.quick ? "quick" : "full"},
                        {"results", nlohmann::json::array()},
                        {"overhead", nlohmann::json::array()}};
  for (const Result& r : results) out["results"].push_back(to_json(r));
  if (opt.overhead) overhead_section(eng, strm, buf, out["overhead"]);
  if (!opt.json_path.empty()) {
    std::ofstream f(opt.json_path);
    f << out.dump(2) << "\n";
    if (!f) fail(ErrorKind::kIo, "gemm_bench: cannot write {}", opt.json_path);
    fmt::print("wrote {}\n", opt.json_path);
  }
  return 0;
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  try {
    return tessera::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gemm_bench: %s\n", e.what());
    return 1;
  }
}
