// oneDNN matmul: engine, primitive cache and the shared scratchpad (see onednn_matmul.h).
#include "tessera/backends/cpu/onednn_matmul.h"

#include <fmt/format.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl_debug.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>
#include <utility>

#include "tessera/backends/cpu/vector_kernels.h"
#include "tessera/core/arena.h"
#include "tessera/core/cpu_features.h"
#include "tessera/core/error.h"

namespace tessera::cpu {

namespace {

using dims = dnnl::memory::dims;

dnnl::memory::data_type to_dnnl(DType t) {
  switch (t) {
    case DType::kF32:
      return dnnl::memory::data_type::f32;
    case DType::kBF16:
      return dnnl::memory::data_type::bf16;
    default:
      fail(ErrorKind::kInternal, "onednn_matmul: no oneDNN type for {}", dtype_name(t));
  }
}

// The cache key: the problem plus the OpenMP thread count the primitive was created for.
struct Key {
  GemmShape g;
  int threads = 0;
  bool operator==(const Key&) const = default;
};

struct KeyHash {
  size_t operator()(const Key& k) const {
    size_t h = 0;
    auto mix = [&h](uint64_t v) {
      h ^= std::hash<uint64_t>{}(v) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    };
    mix(static_cast<uint64_t>(k.g.m));
    mix(static_cast<uint64_t>(k.g.n));
    mix(static_cast<uint64_t>(k.g.k));
    mix(static_cast<uint64_t>(k.g.trans_a) | static_cast<uint64_t>(k.g.trans_b) << 1 |
        static_cast<uint64_t>(k.g.accumulate) << 2 | static_cast<uint64_t>(k.g.ab_dtype) << 8 |
        static_cast<uint64_t>(k.g.c_dtype) << 16 | static_cast<uint64_t>(k.threads) << 24);
    return h;
  }
};

// A primitive with the memory objects it runs on. The memory objects carry the descriptors; their
// data handles are set on every call.
struct Entry {
  dnnl::matmul prim;
  dnnl::memory a, b, c, scratchpad;
  size_t scratchpad_bytes = 0;
  // B copied into the layout oneDNN prefers before every call (prefers_blocked_b): the reorder, the
  // caller's B (b_plain) and the copy's size; b then describes the copy.
  dnnl::reorder to_blocked;
  dnnl::memory b_plain;
  size_t blocked_bytes = 0;
  std::string impl;
};

// Whether B runs from a copy in oneDNN's preferred (blocked) layout, made on every call. Only
// where B is a weight (forward x W, input gradient dy W^T; not trans_a, the weight gradient, whose
// B is an activation that reorders slowly), M >= 1024 rows (the copy then costs 1-2 % of the GEMM)
// and the copy is at most 128 MiB (not a large vocabulary's output projection). Measured on the
// 125M shapes (bench/RESULTS.md): f32 brgemm 5-17 % faster from the copy, both forward and input
// gradient; bf16 on the AMX tiles 22-50 % faster forward, but not faster with B transposed (the
// input gradient), which stays plain. Only on AVX-512: without it oneDNN 2.6 runs gemm:jit, which
// takes B in a plain layout, so the copy only transposed a transposed B (the input gradient 4-5 %
// slower on a Zen 1 EPYC, gemm_bench) and kept that copy in memory.
constexpr int64_t kBlockedMinRows = 1024;
constexpr size_t kBlockedMaxBytes = size_t{128} << 20;
bool prefers_blocked_b(const GemmShape& g) {
  const bool weight = !g.trans_a && (g.ab_dtype == DType::kF32 || !g.trans_b);
  return weight && g.m >= kBlockedMinRows && isa_supported(Isa::kAvx512) &&
         static_cast<size_t>(g.k * g.n) * dtype_size(g.ab_dtype) <= kBlockedMaxBytes;
}

[[noreturn]] void rethrow(const GemmShape& g, const char* stage, const char* what, dnnl_status_t status) {
  fail(ErrorKind::kRuntime, "oneDNN matmul ({}): {} failed: {} [{}]", gemm_shape_str(g), stage, what,
       dnnl_status2str(status));
}

class OnednnMatmul {
 public:
  static OnednnMatmul& instance() {
    static OnednnMatmul m;
    return m;
  }

  void run(const GemmShape& g, const void* a, const void* b, void* c) {
    std::lock_guard lock(mu_);
    run_cached(g, a, b, c);
  }

  // run() with mu_ held.
  void run_cached(const GemmShape& g, const void* a, const void* b, void* c) {
    if (widens(g))
      return widened(g, a, b, c, [this](const GemmShape& f, const void* fa, const void* fb, void* fc) {
        run_cached(f, fa, fb, fc);
      });
    Entry& e = entry(g);
    // Re-pointing a memory object with a plain (unpadded) layout only stores the pointer.
    dnnl_status_t st = dnnl_memory_set_data_handle(e.a.get(), const_cast<void*>(a));
    if (st == dnnl_success && e.blocked_bytes > 0) {  // B into the blocked copy first
      st = dnnl_memory_set_data_handle(e.b_plain.get(), const_cast<void*>(b));
      if (st == dnnl_success) st = dnnl_memory_set_data_handle(e.b.get(), blocked_.base());
      dnnl_exec_arg_t copy[2] = {{DNNL_ARG_FROM, e.b_plain.get()}, {DNNL_ARG_TO, e.b.get()}};
      if (st == dnnl_success) st = dnnl_primitive_execute(e.to_blocked.get(), stream_.get(), 2, copy);
    } else if (st == dnnl_success) {
      st = dnnl_memory_set_data_handle(e.b.get(), const_cast<void*>(b));
    }
    if (st == dnnl_success) st = dnnl_memory_set_data_handle(e.c.get(), c);
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, e.a.get()},
                               {DNNL_ARG_WEIGHTS, e.b.get()},
                               {DNNL_ARG_DST, e.c.get()},
                               {DNNL_ARG_SCRATCHPAD, e.scratchpad.get(/*allow_empty=*/true)}};
    const int nargs = e.scratchpad_bytes > 0 ? 4 : 3;
    if (st == dnnl_success && nargs == 4)
      st = dnnl_memory_set_data_handle(e.scratchpad.get(), scratchpad_.base());
    if (st == dnnl_success) st = dnnl_primitive_execute(e.prim.get(), stream_.get(), nargs, args);
    if (st == dnnl_success) st = dnnl_stream_wait(stream_.get());
    if (st != dnnl_success) rethrow(g, "execute", "the primitive did not run", st);
  }

  // One GEMM whose rows (forward: M; weight_grad: the reduction K) are a runtime dimension of the
  // cached primitive, so that the ragged groups of a grouped GEMM, whose sizes change every step,
  // reuse one primitive per (N, K, flags). The memory objects carry the group's actual dims.
  void run_ragged(const GemmShape& g, bool rows_are_k, const void* a, const void* b, void* c) {
    if (widens(g))
      return widened(g, a, b, c,
                     [this, rows_are_k](const GemmShape& f, const void* fa, const void* fb, void* fc) {
                       run_ragged(f, rows_are_k, fa, fb, fc);
                     });
    GemmShape key = g;
    (rows_are_k ? key.k : key.m) = 0;  // the runtime dimension
    Entry& e = ragged_entry(key, rows_are_k);
    try {
      dnnl::memory am(a_desc(g, g.m, g.k), engine_, const_cast<void*>(a));
      dnnl::memory bm(b_desc(g, g.k, g.n), engine_, const_cast<void*>(b));
      dnnl::memory cm(c_desc(g, g.m, g.n), engine_, c);
      dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, am.get()},
                                 {DNNL_ARG_WEIGHTS, bm.get()},
                                 {DNNL_ARG_DST, cm.get()},
                                 {DNNL_ARG_SCRATCHPAD, e.scratchpad.get(/*allow_empty=*/true)}};
      const int nargs = e.scratchpad_bytes > 0 ? 4 : 3;
      dnnl_status_t st = dnnl_success;
      if (nargs == 4) st = dnnl_memory_set_data_handle(e.scratchpad.get(), scratchpad_.base());
      if (st == dnnl_success) st = dnnl_primitive_execute(e.prim.get(), stream_.get(), nargs, args);
      if (st == dnnl_success) st = dnnl_stream_wait(stream_.get());
      if (st != dnnl_success) rethrow(g, "execute", "the primitive did not run", st);
    } catch (const dnnl::error& err) {
      rethrow(g, "execute", err.what(), err.status);
    }
  }

  void grouped(const GroupedGemmShape& gg, const int32_t* sizes, const void* a, const void* b, void* c) {
    std::lock_guard lock(mu_);
    const int64_t ab = static_cast<int64_t>(dtype_size(gg.ab_dtype));
    const int64_t cb = static_cast<int64_t>(dtype_size(gg.c_dtype));
    const auto* ap = static_cast<const char*>(a);
    const auto* bp = static_cast<const char*>(b);
    auto* cp = static_cast<char*>(c);
    int64_t row = 0;
    for (int64_t grp = 0; grp < gg.groups; ++grp) {
      const int64_t m = sizes[grp];
      if (gg.weight_grad) {  // C[g] [K, N] (+)= A_gᵀ · B_g
        char* cg = cp + grp * gg.k * gg.n * cb;
        if (m == 0) {
          if (!gg.accumulate) std::memset(cg, 0, static_cast<size_t>(gg.k * gg.n * cb));
          continue;
        }
        const GemmShape s{.m = gg.k,
                          .n = gg.n,
                          .k = m,
                          .trans_a = true,
                          .ab_dtype = gg.ab_dtype,
                          .c_dtype = gg.c_dtype,
                          .accumulate = gg.accumulate};
        run_ragged(s, /*rows_are_k=*/true, ap + row * gg.k * ab, bp + row * gg.n * ab, cg);
      } else if (m > 0) {  // C_g [M_g, N] (+)= A_g · op(B[g]), in chunks of rows
        // oneDNN's runtime-M GEMM runs at 50-85 % of its fixed-shape one (brgemm) on row counts
        // of a few hundred, so a group runs as chunks of 512, 256, ..., 16 rows on fixed-shape
        // primitives (at most six per weight shape, cached), and only the last < 16 rows on the
        // runtime-M primitive.
        GemmShape s{.m = 0,
                    .n = gg.n,
                    .k = gg.k,
                    .trans_b = gg.trans_b,
                    .ab_dtype = gg.ab_dtype,
                    .c_dtype = gg.c_dtype,
                    .accumulate = gg.accumulate};
        const char* bg = bp + grp * gg.k * gg.n * ab;
        int64_t done = 0;
        for (int64_t chunk = 512; chunk >= 16; chunk /= 2)
          for (s.m = chunk; m - done >= chunk; done += chunk)
            run_cached(s, ap + (row + done) * gg.k * ab, bg, cp + (row + done) * gg.n * cb);
        if (done < m) {
          s.m = m - done;
          run_ragged(s, /*rows_are_k=*/false, ap + (row + done) * gg.k * ab, bg,
                     cp + (row + done) * gg.n * cb);
        }
      }
      row += m;
    }
  }

  std::string impl(const GemmShape& g) {
    std::lock_guard lock(mu_);
    if (widens(g)) return entry(as_f32(g)).impl + " (bf16 widened to f32)";
    return entry(g).impl;
  }

  std::pair<size_t, size_t> buffers(const GemmShape& g) {
    std::lock_guard lock(mu_);
    const Entry& e = entry(widens(g) ? as_f32(g) : g);
    return {e.blocked_bytes, e.scratchpad_bytes};
  }

  size_t widened_bytes() {
    std::lock_guard lock(mu_);
    return widened_.capacity();
  }

  size_t cache_size() {
    std::lock_guard lock(mu_);
    return cache_.size();
  }

  size_t scratchpad_bytes() {
    std::lock_guard lock(mu_);
    return scratchpad_.capacity();
  }

 private:
  OnednnMatmul() {
    try {
      engine_ = dnnl::engine(dnnl::engine::kind::cpu, 0);
      stream_ = dnnl::stream(engine_);
    } catch (const dnnl::error& e) {
      fail(ErrorKind::kRuntime, "oneDNN: cannot create the CPU engine and stream: {} [{}]", e.what(),
           dnnl_status2str(e.status));
    }
    // Whether oneDNN has a bf16 GEMM on this CPU (2.6 needs AVX-512): asked once, on a small shape.
    try {
      const dnnl::memory::desc md({16, 16}, dnnl::memory::data_type::bf16, dims{16, 1});
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(md, md, md), engine_);
      native_bf16_ = true;
    } catch (const dnnl::error&) {  // unimplemented (or any other failure): widen, which runs everywhere
    }
  }

  // ---- bf16 on CPUs where oneDNN has no bf16 GEMM ----------------------------------------------
  // The operands are widened to f32 (exactly), oneDNN's f32 GEMM runs, and a bf16 C is rounded once
  // at the end: what oneDNN's own bf16 GEMM computes (products of bf16 values summed in f32, C
  // rounded once), in another summation order. The f32 copies live in one shared buffer (widened_),
  // grown like the scratchpad when a larger GEMM first runs and never in steady state. To bound it,
  // a GEMM is widened in chunks of rows: M when A is not transposed (A's and C's rows; B is widened
  // whole, once), K when A is transposed and B is not (A's and B's rows; the chunks after the first
  // accumulate into C, kept in f32 until the last). A GEMM with both transposed is widened whole.
  static constexpr size_t kWidenedChunkBytes = size_t{256} << 20;

  bool widens(const GemmShape& g) const {
    return g.ab_dtype == DType::kBF16 && (!native_bf16_ || force_widened_);
  }

 public:
  bool native_bf16() const { return native_bf16_; }
  void force_widened(bool on, size_t chunk_bytes) {
    std::lock_guard lock(mu_);
    force_widened_ = on;
    widened_chunk_bytes_ = chunk_bytes;
    widened_ = Arena();  // sized afresh by the GEMMs that run next
  }
  size_t widened_operands_bytes(const GemmShape& g) {
    std::lock_guard lock(mu_);
    return widens(g) ? widened_split(g).bytes() : 0;
  }

 private:
  static GemmShape as_f32(GemmShape g) {
    g.ab_dtype = g.c_dtype = DType::kF32;
    return g;
  }

  // How widened() splits `g`: by rows of the reduction (split_k: A transposed, B not) or of M,
  // `chunk` rows a chunk, within widened_chunk_bytes_ where the shape allows.
  struct WidenedSplit {
    bool split_k = false;
    int64_t chunk = 0;
    int64_t whole = 0, per_row = 0;  // f32 elements widened whole, and per chunk row
    size_t bytes() const { return static_cast<size_t>(whole + chunk * per_row) * sizeof(float); }
  };
  WidenedSplit widened_split(const GemmShape& g) const {
    const bool c_bf16 = g.c_dtype == DType::kBF16;
    // Chunks of M need A's rows contiguous (A not transposed); with both transposed, M is one chunk.
    WidenedSplit w;
    w.split_k = g.trans_a && !g.trans_b;
    const bool split_m = !g.trans_a;
    const int64_t rows = w.split_k ? g.k : g.m;
    w.whole = w.split_k ? (c_bf16 ? g.m * g.n : 0) : g.k * g.n;
    w.per_row = w.split_k ? g.m + g.n : g.k + (c_bf16 ? g.n : 0);
    w.chunk = rows;
    if (split_m || w.split_k) {
      const int64_t budget = static_cast<int64_t>(widened_chunk_bytes_ / sizeof(float));
      const int64_t fit = (budget - w.whole) / w.per_row;
      if (fit < rows) w.chunk = std::max<int64_t>(fit / 64 * 64, std::min<int64_t>(rows, 1024));
    }
    return w;
  }

  template <typename RunF32>
  void widened(const GemmShape& g, const void* a, const void* b, void* c, RunF32&& run_f32) {
    const VectorKernels& vk = vector_kernels();
    const auto* a16 = static_cast<const uint16_t*>(a);
    const auto* b16 = static_cast<const uint16_t*>(b);
    const bool c_bf16 = g.c_dtype == DType::kBF16;
    const WidenedSplit split = widened_split(g);
    const bool split_k = split.split_k;
    const int64_t chunk = split.chunk;
    if (split.bytes() > widened_.capacity()) {
      widened_ = Arena();
      widened_ = Arena(split.bytes(), "bf16 GEMM widened to f32");
    }
    auto* buf = reinterpret_cast<float*>(widened_.base());
    GemmShape f = as_f32(g);
    if (!split_k) {  // B whole, then A and C by chunks of rows
      float *bf = buf, *af = bf + g.k * g.n, *cf = af + chunk * g.k;
      vk.bf16_to_f32(b16, bf, g.k * g.n);
      for (int64_t r = 0; r < g.m; r += chunk) {
        f.m = std::min(chunk, g.m - r);
        vk.bf16_to_f32(a16 + r * g.k, af, f.m * g.k);
        if (!c_bf16) {
          run_f32(f, af, bf, static_cast<float*>(c) + r * g.n);
          continue;
        }
        uint16_t* c16 = static_cast<uint16_t*>(c) + r * g.n;
        if (g.accumulate) vk.bf16_to_f32(c16, cf, f.m * g.n);
        run_f32(f, af, bf, cf);
        vk.f32_to_bf16(cf, c16, f.m * g.n);
      }
      return;
    }
    // split_k: C whole (in f32 when it is bf16), A and B by chunks of the reduction
    float *cf = c_bf16 ? buf : static_cast<float*>(c), *af = buf + (c_bf16 ? g.m * g.n : 0),
          *bf = af + chunk * g.m;
    if (c_bf16 && g.accumulate) vk.bf16_to_f32(static_cast<const uint16_t*>(c), cf, g.m * g.n);
    for (int64_t r = 0; r < g.k; r += chunk) {
      f.k = std::min(chunk, g.k - r);
      f.accumulate = g.accumulate || r > 0;
      vk.bf16_to_f32(a16 + r * g.m, af, f.k * g.m);
      vk.bf16_to_f32(b16 + r * g.n, bf, f.k * g.n);
      run_f32(f, af, bf, cf);
    }
    if (c_bf16) vk.f32_to_bf16(cf, static_cast<uint16_t*>(c), g.m * g.n);
  }

  Entry& entry(const GemmShape& g) {
    Key key{g, omp_get_max_threads()};
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    return keep(cache_, key, create(g, false, false));
  }

  // A primitive whose M (or, with rows_are_k, K) is DNNL_RUNTIME_DIM_VAL; `g` has that dim 0.
  Entry& ragged_entry(const GemmShape& g, bool rows_are_k) {
    Key key{g, omp_get_max_threads()};
    auto it = ragged_.find(key);
    if (it != ragged_.end()) return it->second;
    return keep(ragged_, key, create(g, !rows_are_k, rows_are_k));
  }

  Entry& keep(std::unordered_map<Key, Entry, KeyHash>& cache, const Key& key, Entry e) {
    // Both buffers grow only when a new primitive needs more; the old buffer is unmapped first (the
    // peak is the new size alone) and every call re-points its memory objects at the current one.
    if (e.scratchpad_bytes > scratchpad_.capacity()) {
      scratchpad_ = Arena();
      scratchpad_ = Arena(e.scratchpad_bytes, "oneDNN scratchpad");
    }
    if (e.blocked_bytes > blocked_.capacity()) {
      blocked_ = Arena();
      blocked_ = Arena(e.blocked_bytes, "oneDNN blocked weights");
    }
    return cache.emplace(key, std::move(e)).first->second;
  }

  // Row-major storage, logical dims [rows, cols] with strides {row stride, 1}; a transposed operand
  // keeps its logical dims and swaps the strides. A dim of DNNL_RUNTIME_DIM_VAL leaves the strides
  // that do not depend on it.
  static dnnl::memory::desc a_desc(const GemmShape& g, int64_t m, int64_t k) {
    return {{m, k}, to_dnnl(g.ab_dtype), g.trans_a ? dims{1, m} : dims{k, 1}};
  }
  static dnnl::memory::desc b_desc(const GemmShape& g, int64_t k, int64_t n) {
    return {{k, n}, to_dnnl(g.ab_dtype), g.trans_b ? dims{1, k} : dims{n, 1}};
  }
  static dnnl::memory::desc c_desc(const GemmShape& g, int64_t m, int64_t n) {
    return {{m, n}, to_dnnl(g.c_dtype), dims{n, 1}};
  }

  // Builds the primitive for `g`, with M or K a runtime dimension when asked (the grouped GEMM's
  // rows; a transposed A with runtime M, or a runtime K with trans_b, is not asked for).
  Entry create(const GemmShape& g, bool runtime_m, bool runtime_k) {
    const int64_t m = runtime_m ? DNNL_RUNTIME_DIM_VAL : g.m, k = runtime_k ? DNNL_RUNTIME_DIM_VAL : g.k;
    TESSERA_ASSERT(!(runtime_m && g.trans_a) && !(runtime_k && g.trans_b));
    try {
      const dnnl::memory::desc a_md = a_desc(g, m, k), b_md = b_desc(g, k, g.n), c_md = c_desc(g, m, g.n);
      dnnl::primitive_attr attr;
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      if (g.accumulate) {
        dnnl::post_ops ops;
        ops.append_sum(1.0f);  // C = A·B + 1.0 * C, read in C's dtype and added in f32
        attr.set_post_ops(ops);
      }
      const bool blocked = !runtime_m && !runtime_k && prefers_blocked_b(g);
      const dnnl::memory::desc b_pd =
          blocked ? dnnl::memory::desc({k, g.n}, to_dnnl(g.ab_dtype), dnnl::memory::format_tag::any) : b_md;
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_pd, c_md), attr, engine_);
      Entry e;
      e.prim = dnnl::matmul(pd);
      if (!runtime_m && !runtime_k) {  // a runtime-row primitive gets its memory objects per call
        e.a = dnnl::memory(a_md, engine_, DNNL_MEMORY_NONE);
        e.b = dnnl::memory(pd.weights_desc(), engine_, DNNL_MEMORY_NONE);
        e.c = dnnl::memory(c_md, engine_, DNNL_MEMORY_NONE);
        if (pd.weights_desc() != b_md) {
          e.b_plain = dnnl::memory(b_md, engine_, DNNL_MEMORY_NONE);
          e.to_blocked = dnnl::reorder(e.b_plain, e.b);
          e.blocked_bytes = pd.weights_desc().get_size();
        }
      }
      dnnl::memory::desc s_md = pd.scratchpad_desc();
      e.scratchpad_bytes = s_md.get_size();
      if (e.scratchpad_bytes > 0) e.scratchpad = dnnl::memory(s_md, engine_, DNNL_MEMORY_NONE);
      e.impl = std::string(pd.impl_info_str()) + (e.blocked_bytes > 0 ? " (B reordered)" : "");
      return e;
    } catch (const dnnl::error& err) {
      rethrow(g, "creating the primitive", err.what(), err.status);
    }
  }

  std::mutex mu_;
  dnnl::engine engine_;
  dnnl::stream stream_;
  std::unordered_map<Key, Entry, KeyHash> cache_;
  std::unordered_map<Key, Entry, KeyHash> ragged_;  // the grouped GEMM's runtime-row primitives
  Arena scratchpad_;  // shared by all primitives; capacity 0 until one needs scratch
  Arena blocked_;     // the blocked copy of B, shared likewise (calls are serialised)
  Arena widened_;     // bf16 operands widened to f32 where oneDNN has no bf16 GEMM (widened())
  bool native_bf16_ = false;
  bool force_widened_ = false;  // tests: widen even where oneDNN has a bf16 GEMM
  size_t widened_chunk_bytes_ = kWidenedChunkBytes;
};

}  // namespace

void onednn_matmul(const GemmShape& g, const void* a, const void* b, void* c) {
  OnednnMatmul::instance().run(g, a, b, c);
}

void onednn_grouped_matmul(const backends::GroupedGemmShape& g, const int32_t* group_sizes, const void* a,
                           const void* b, void* c) {
  OnednnMatmul::instance().grouped(g, group_sizes, a, b, c);
}

std::string onednn_matmul_impl(const GemmShape& g) {
  return OnednnMatmul::instance().impl(g);
}

size_t onednn_matmul_blocked_bytes(const GemmShape& g) {
  return OnednnMatmul::instance().buffers(g).first;
}

size_t onednn_matmul_scratchpad_bytes(const GemmShape& g) {
  return OnednnMatmul::instance().buffers(g).second;
}

size_t blocked_b_copy_bytes(const GemmShape& g) {
  if (!prefers_blocked_b(g)) return 0;
  const int64_t k_block = g.ab_dtype == DType::kBF16 ? 32 : 16, n_block = 64;
  const int64_t k = (g.k + k_block - 1) / k_block * k_block, n = (g.n + n_block - 1) / n_block * n_block;
  return static_cast<size_t>(k * n) * dtype_size(g.ab_dtype);
}

namespace {
// Whether oneDNN's effective ISA includes `isa` (the ISA values are nested bit sets).
bool onednn_isa_includes(dnnl_cpu_isa_t isa) {
  const auto bits = static_cast<unsigned>(isa);
  return (static_cast<unsigned>(dnnl_get_effective_cpu_isa()) & bits) == bits;
}
}  // namespace

int64_t onednn_gemv_rows_below(DType ab_dtype) {
  if (ab_dtype == DType::kBF16) return onednn_matmul_amx() ? 16 : 64;
  return active_isa() == Isa::kAvx512 && onednn_isa_includes(dnnl_cpu_isa_avx512_core) ? 32 : 64;
}

bool onednn_matmul_native_bf16() {
  return OnednnMatmul::instance().native_bf16();
}

bool onednn_matmul_amx() {
  return onednn_isa_includes(dnnl_cpu_isa_avx512_core_amx);  // the bits every AMX level includes
}

void onednn_matmul_force_widened_bf16(bool on, size_t chunk_bytes) {
  OnednnMatmul::instance().force_widened(on, chunk_bytes);
}

size_t onednn_matmul_widened_bytes() {
  return OnednnMatmul::instance().widened_bytes();
}

size_t widened_operands_bytes(const GemmShape& g) {
  return OnednnMatmul::instance().widened_operands_bytes(g);
}

size_t onednn_matmul_cache_size() {
  return OnednnMatmul::instance().cache_size();
}

size_t onednn_matmul_scratchpad_bytes() {
  return OnednnMatmul::instance().scratchpad_bytes();
}

std::string gemm_shape_str(const GemmShape& g) {
  return fmt::format("M={} N={} K={}{}{}, {} x {} -> {}{}", g.m, g.n, g.k, g.trans_a ? ", trans_a" : "",
                     g.trans_b ? ", trans_b" : "", dtype_name(g.ab_dtype), dtype_name(g.ab_dtype),
                     dtype_name(g.c_dtype), g.accumulate ? ", accumulate" : "");
}

}  // namespace tessera::cpu
