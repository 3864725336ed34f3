// GEMM on the CPU through oneDNN's matmul primitive: C[M,N] (+)= op(A)[M,K] · op(B)[K,N] on
// row-major, contiguous buffers. The op entry (ops/matmul.h) checks shapes and dtypes and calls
// this; nothing here checks user input beyond what oneDNN itself rejects.
//
// What it does:
//   - one oneDNN CPU engine and one stream for the process, created on first use;
//   - one primitive per GemmShape and thread count, created on first use and kept in a hash map
//     (creating a primitive JIT-compiles kernels: milliseconds, far more than a small GEMM);
//   - transposes are strides in the memory descriptors (no copies); accumulate is oneDNN's sum
//     post-op (C = A·B + 1.0·C), so C is read and written once;
//   - on AVX-512, GEMMs whose B is a weight with M >= 1024 (f32 not trans_a; bf16 neither
//     transposed) copy B into the layout oneDNN prefers before each call (one reorder, 1-2 % of the
//     GEMM), which its brgemm runs 5-50 % faster; the copy lives in one shared buffer like the scratchpad
//     (onednn_matmul.cc says when);
//   - bf16 inputs accumulate in f32 inside oneDNN; a bf16 C is rounded once, at the end. Where
//     oneDNN has no bf16 GEMM (2.6 needs AVX-512; AVX2-only CPUs such as AMD EPYC before Zen 4),
//     the operands are widened to f32 exactly, the f32 GEMM runs, and a bf16 C is rounded once:
//     the same products and rounding in another summation order, at the f32 GEMM's speed plus the
//     widening (one pass over each operand). The f32 copies live in one shared buffer, by chunks
//     of rows bounded to 256 MiB where the shape allows (onednn_matmul.cc);
//   - the scratchpad is one Tessera-owned buffer shared by every cached primitive
//     (scratchpad_mode::user), grown when a primitive that needs more is created and never in
//     steady state. oneDNN's own library mode would also allocate only at creation, but either per
//     primitive or per calling thread, outside Tessera's memory accounting;
//   - the memory objects that wrap A, B, C and the scratchpad are cached with the primitive and
//     re-pointed per call (set_data_handle), and the primitive runs through the C API with the
//     arguments on the stack, so a call allocates nothing on Tessera's side (oneDNN 2.6 itself
//     makes 6 small allocations, ~260 bytes, inside every execute). Measured on a 16x64x64 f32
//     GEMM (gemm_bench's overhead section): making the memory objects and argument map afresh
//     costs ~1.1 us per call, as much as the GEMM itself; Tessera's call is within ~0.15 us of
//     oneDNN's bare execute. At training sizes (milliseconds per GEMM) neither is visible.
//
// Threads: oneDNN runs on the OpenMP pool (tessera::set_num_threads). The thread count is part of
// the cache key because oneDNN fixes its work split when the primitive is created.
//
// Thread safety: calls are serialised by one mutex, so calling from several threads is correct but
// gains nothing; Tessera calls from the step loop's single thread and the parallelism lives inside
// oneDNN's OpenMP region. Do not call from inside an OpenMP parallel region (oneDNN would run on one
// thread).
//
// Left out: batched GEMM, bias, runtime dimensions outside the grouped GEMM (one primitive per M is
// cheap at training sizes, where M = B*T is fixed), f16/fp8.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "tessera/backends/kernels/gemm.h"
#include "tessera/core/dtype.h"

namespace tessera::cpu {

using backends::GemmShape;
using backends::GroupedGemmShape;

// Runs the GEMM. M, N and K must be >= 1. Throws tessera::Error(kRuntime) naming the shape when
// oneDNN fails (no implementation for these dtypes on this CPU, out of memory).
void onednn_matmul(const GemmShape& g, const void* a, const void* b, void* c);

// The grouped GEMM (backends/kernels/gemm.h): one oneDNN call per group with rows, on a primitive
// whose row dimension (M; for weight_grad the reduction K) is a runtime dimension, cached per
// (N, K, flags): group sizes change every step and must not create primitives.
void onednn_grouped_matmul(const backends::GroupedGemmShape& g, const int32_t* group_sizes, const void* a,
                           const void* b, void* c);

// GemmKernels::gemv_rows_below for oneDNN's GEMM, from decode_bench's small-M section
// (2048 x 8192 and 8192 x 2048, weights from memory):
//   bf16 on the AMX tiles: 16. gemv (bf16 widened to f32 FMAs) 1.01-1.11x oneDNN at 8 rows,
//     0.63-0.65x at 16, 0.26-0.41x at 32 (an Emerald Rapids Xeon);
//   f32 with AVX-512 kernels on both sides: 32. gemv 1.17-1.18x at 8 rows, 0.71-0.95x at 16,
//     0.68-0.75x at 32 (the same Xeon); 1.03-1.06x at 16 and 0.88-0.94x at 32 on an earlier Xeon;
//   otherwise (bf16 on vdpbf16ps or widened, AVX2): 64. bf16 on a half-rate vdpbf16ps: gemv
//     1.06-1.13x at 32 rows, 0.97-1.06x at 64; AVX2 has not been measured below 64.
int64_t onednn_gemv_rows_below(DType ab_dtype);

// oneDNN's name for the implementation it picked for `g` at the current thread count
// (e.g. "brg:avx512_core"); creates and caches the primitive if needed. For benchmarks and logs.
std::string onednn_matmul_impl(const GemmShape& g);

// The two shared buffers a call of `g` needs, in bytes (creates and caches the primitive if
// needed): its copy of B in oneDNN's blocked layout (0 where B runs from the caller's layout) and
// its scratchpad.
size_t onednn_matmul_blocked_bytes(const GemmShape& g);
size_t onednn_matmul_scratchpad_bytes(const GemmShape& g);

// The blocked copy's size without asking oneDNN (tessera compile's memory prediction): 0 where B
// runs from the caller's layout (always without AVX-512), else K x N elements padded to the blocks
// oneDNN 2.6's AVX-512 brgemm uses (K to 16 in f32 and 32 in bf16, N to 64).
// onednn_matmul_blocked_bytes gives the same figure (tested).
size_t blocked_b_copy_bytes(const GemmShape& g);

// Number of cached primitives, and the size of the shared scratchpad in bytes.
size_t onednn_matmul_cache_size();
size_t onednn_matmul_scratchpad_bytes();

// Whether oneDNN runs bf16 GEMMs natively on this CPU (else they are widened to f32), and the
// size of the widened operands' shared buffer in bytes (0 until a widened GEMM ran).
bool onednn_matmul_native_bf16();
size_t onednn_matmul_widened_bytes();
// Whether oneDNN may run GEMMs on the AMX tiles: the CPU has them and no limit set through oneDNN's
// ONEDNN_MAX_CPU_ISA (or DNNL_MAX_CPU_ISA) environment variable stops below AVX512_CORE_AMX.
// Tessera's own AMX users (bf16 attention, the bf16 peak) follow it, so that one setting moves every
// bf16 product of a run off the tiles (cpu::amx_tiles_in_use, attention_products.h).
bool onednn_matmul_amx();
// The widened operands' buffer a call of `g` needs (tessera compile's memory prediction; the
// buffer is shared, so a run needs its largest GEMM's): 0 unless `g` is bf16 and this CPU widens
// it. The GEMM then runs in f32, its blocked copy (blocked_b_copy_bytes) too.
size_t widened_operands_bytes(const GemmShape& g);
// For tests: widen bf16 GEMMs even where oneDNN has them (`on`), in chunks of at most
// `chunk_bytes` of f32 operands (at least 1024 rows a chunk); the default is 256 MiB. Frees the
// widened buffer, which the GEMMs that run next size afresh.
void onednn_matmul_force_widened_bf16(bool on, size_t chunk_bytes = size_t{256} << 20);

// "shape M x N x K, trans_a, trans_b, bf16 x bf16 -> f32, accumulate", for messages.
std::string gemm_shape_str(const GemmShape& g);

}  // namespace tessera::cpu
