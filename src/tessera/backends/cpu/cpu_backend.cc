// The CPU backend (cpu_backend.h). copy is the C library's memcpy on the calling thread (the
// tensors it moves between nodes are small next to the kernels' work); fill_zero splits a large
// tensor over the threads (the vector kernels' zero_bytes), fill_zero_for_later also with
// streaming stores. Each returns when its work is done, so one stream keeps them in order.
#include "tessera/backends/cpu/cpu_backend.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "tessera/backends/cpu/activation_kernels.h"
#include "tessera/backends/cpu/attention_kernels.h"
#include "tessera/backends/cpu/cross_entropy_kernels.h"
#include "tessera/backends/cpu/decode_attention_kernels.h"
#include "tessera/backends/cpu/embedding_kernels.h"
#include "tessera/backends/cpu/gemv_kernels.h"
#include "tessera/backends/cpu/moe_kernels.h"
#include "tessera/backends/cpu/norm_kernels.h"
#include "tessera/backends/cpu/onednn_matmul.h"
#include "tessera/backends/cpu/optimizer_kernels.h"
#include "tessera/backends/cpu/peak.h"
#include "tessera/backends/cpu/rope_kernels.h"
#include "tessera/backends/cpu/vector_kernels.h"
#include "tessera/backends/cpu/vocab_parallel_kernels.h"
#include "tessera/backends/kernels.h"
#include "tessera/core/cpu_features.h"
#include "tessera/core/error.h"

namespace tessera::cpu {
namespace {

constexpr backends::GemmKernels kOnednnGemm{
    .gemm = onednn_matmul, .grouped_gemm = onednn_grouped_matmul, .gemv_rows_below = onednn_gemv_rows_below};

// The tables of one ISA's kernel build (isa_dispatch.h); GEMM is oneDNN's on every ISA, and the
// MoE kernels (data movement and small reductions) are one build for all.
#define TESSERA_CPU_KERNEL_TABLES(ns)                                                                      \
  backends::KernelTables {                                                                                 \
    .activation = &ns::kActivationKernels, .attention = &ns::kAttentionKernels,                            \
    .cross_entropy = &ns::kCrossEntropyKernels, .decode_attention = &ns::kDecodeAttentionKernels,          \
    .embedding = &ns::kEmbeddingKernels, .gemm = &kOnednnGemm, .gemv = &ns::kGemvKernels,                  \
    .moe = &kMoeKernels, .norm = &ns::kNormKernels, .optimizer = &ns::kOptimizerKernels,                   \
    .rope = &ns::kRopeKernels, .vector = &ns::kVectorKernels, .vocab_parallel = &ns::kVocabParallelKernels \
  }

const backends::KernelTables& tables_for(Isa isa) {
  static const backends::KernelTables avx512_tables = TESSERA_CPU_KERNEL_TABLES(avx512);
  static const backends::KernelTables avx2_tables = TESSERA_CPU_KERNEL_TABLES(avx2);
  static const backends::KernelTables scalar_tables = TESSERA_CPU_KERNEL_TABLES(scalar);
  switch (isa) {
    case Isa::kAvx512:
      return avx512_tables;
    case Isa::kAvx2:
      return avx2_tables;
    case Isa::kScalar:
      break;
  }
  return scalar_tables;
}
#undef TESSERA_CPU_KERNEL_TABLES

class CpuBackend final : public backends::Backend {
 public:
  Device device() const override { return Device::cpu(); }
  std::string name() const override { return fmt::format("cpu ({})", isa_name(active_isa())); }

  // Every graph op has a CPU kernel for float32 and bfloat16 activations (integer inputs such as
  // token ids and positions are the ops' own business).
  bool supports(std::string_view op, DType dtype) const override {
    return dtype == DType::kF32 || dtype == DType::kBF16;
  }

  void* allocate(size_t bytes) override {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
      fail(ErrorKind::kRuntime, "cpu: cannot map {} bytes: {}", bytes, std::strerror(errno));
    return p;
  }
  void deallocate(void* p, size_t bytes) override {
    if (p) ::munmap(p, bytes);
  }

  void fill_zero(const Tensor& t) override {
    TESSERA_ASSERT(t.device().is_cpu() && t.is_contiguous());
    kernels().vector->zero_bytes(t.data(), t.nbytes(), false);
  }
  void fill_zero_for_later(const Tensor& t) override {
    TESSERA_ASSERT(t.device().is_cpu() && t.is_contiguous());
    kernels().vector->zero_bytes(t.data(), t.nbytes(), true);
  }
  void copy(const Tensor& dst, const Tensor& src) override {
    TESSERA_ASSERT(dst.device().is_cpu() && src.device().is_cpu() && dst.nbytes() == src.nbytes());
    if (dst.data() != src.data()) std::memcpy(dst.data(), src.data(), src.nbytes());
  }
  void synchronize() override {}
  const backends::KernelTables& kernels() const override { return tables_for(active_isa()); }
  backends::DevicePeak calibrate_peak(double seconds_per_kind) const override {
    return calibrate_cpu_peak(seconds_per_kind);
  }
};

}  // namespace

backends::Backend& cpu_backend() {
  static CpuBackend backend;
  return backend;
}

}  // namespace tessera::cpu
