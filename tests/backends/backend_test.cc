// The device axis: tensors and arenas carry their device, views keep it, and backend_for maps a
// device to its backend (the CPU's here; a device without a backend in the build is a clear error),
// and the op entries find their kernels through the tensors' device.
#include "tessera/backends/backend.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/backends/cpu/attention_products.h"
#include "tessera/backends/cpu/onednn_matmul.h"
#include "tessera/backends/cpu/peak.h"
#include "tessera/backends/cpu/peak_kernels.h"
#include "tessera/backends/kernels.h"
#include "tessera/core/arena.h"
#include "tessera/core/cpu_features.h"
#include "tessera/core/error.h"
#include "tessera/ops/norm.h"

namespace tessera {
namespace {

TEST(Device, NamesAndEquality) {
  EXPECT_EQ(Device::cpu().str(), "cpu");
  EXPECT_EQ(Device::cuda(1).str(), "cuda:1");
  EXPECT_TRUE(Device::cpu().is_cpu());
  EXPECT_FALSE(Device::cuda(0).is_cpu());
  EXPECT_EQ(Device::cuda(0), Device::cuda(0));
  EXPECT_NE(Device::cuda(0), Device::cuda(1));
  EXPECT_NE(Device::cpu(), Device::cuda(0));
}

TEST(Device, TensorsAndTheirViewsKeepTheirDevice) {
  std::vector<float> buf(24);
  Tensor t(buf.data(), {4, 6}, DType::kF32, Device::cuda(2));
  EXPECT_EQ(t.device(), Device::cuda(2));
  EXPECT_EQ(t.reshape({6, 4}).device(), Device::cuda(2));
  EXPECT_EQ(t.slice0(1, 3).device(), Device::cuda(2));
  EXPECT_EQ(t.str(), "float32[4, 6]@cuda:2");
  Tensor host(buf.data(), {4, 6}, DType::kF32);
  EXPECT_EQ(host.device(), Device::cpu());
  EXPECT_EQ(host.str(), "float32[4, 6]");  // host tensors' messages are unchanged
}

TEST(Device, ArenaTensorsAreOnTheHost) {
  Arena a(1 << 20, "device_test");
  EXPECT_EQ(a.device(), Device::cpu());
  EXPECT_EQ(a.tensor({8}, DType::kBF16).device(), Device::cpu());
}

TEST(Backend, CpuFillsCopiesAndSupportsTheComputeDtypes) {
  backends::Backend& cpu = backends::backend_for(Device::cpu());
  EXPECT_EQ(cpu.device(), Device::cpu());
  EXPECT_NE(cpu.name().find("cpu"), std::string::npos);
  EXPECT_TRUE(cpu.supports("matmul", DType::kF32));
  EXPECT_TRUE(cpu.supports("attention_bwd", DType::kBF16));
  EXPECT_FALSE(cpu.supports("matmul", DType::kI32));

  std::vector<float> a = {1, 2, 3, 4, 5}, b(5, -1.0f);
  Tensor ta(a.data(), {5}, DType::kF32), tb(b.data(), {5}, DType::kF32);
  cpu.copy(tb, ta);
  EXPECT_EQ(b, a);
  cpu.copy(tb, tb);  // the same memory: nothing to do
  EXPECT_EQ(b, a);
  cpu.fill_zero(tb);
  EXPECT_EQ(b, std::vector<float>(5, 0.0f));
  cpu.synchronize();

  void* p = cpu.allocate(size_t{3} << 20);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  cpu.deallocate(p, size_t{3} << 20);
}

// zero_bytes clears exactly its range, whatever its alignment and size (one memset below 1 MiB,
// threads taking 256 KiB chunks, with streaming stores for past_cache, from there), on every kernel
// build; the backend's two fills use it.
TEST(Backend, ZeroBytesClearsExactlyItsRangeOnEveryIsa) {
  const Isa before = active_isa();
  constexpr size_t kMiB = size_t{1} << 20;
  std::vector<unsigned char> buf(kMiB + 256);
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (!isa_supported(isa)) continue;
    set_active_isa(isa);
    const auto zero = backends::kernels_for(Device::cpu()).vector->zero_bytes;
    for (const size_t offset : {size_t{0}, size_t{1}, size_t{37}, size_t{64}})
      for (const size_t bytes : {size_t{0}, size_t{5}, size_t{100}, kMiB - 3, kMiB + 129})
        for (const bool past_cache : {false, true}) {
          std::fill(buf.begin(), buf.end(), 0xab);
          zero(buf.data() + offset, bytes, past_cache);
          const auto at = buf.begin() + static_cast<ptrdiff_t>(offset);
          const auto end = at + static_cast<ptrdiff_t>(bytes);
          const auto is = [](unsigned char x) { return [x](unsigned char b) { return b == x; }; };
          EXPECT_TRUE(std::all_of(buf.begin(), at, is(0xab)) && std::all_of(at, end, is(0)) &&
                      std::all_of(end, buf.end(), is(0xab)))
              << isa_name(isa) << " offset " << offset << " bytes " << bytes << " past_cache " << past_cache;
        }
  }
  set_active_isa(before);
  backends::Backend& cpu = backends::backend_for(Device::cpu());
  std::vector<float> v(3 * kMiB, 2.0f);  // 12 MiB: the threaded paths
  Tensor t(v.data(), {static_cast<int64_t>(v.size())}, DType::kF32);
  cpu.fill_zero_for_later(t);
  EXPECT_EQ(std::count(v.begin(), v.end(), 0.0f), static_cast<ptrdiff_t>(v.size()));
  std::fill(v.begin(), v.end(), 2.0f);
  cpu.fill_zero(t);
  EXPECT_EQ(std::count(v.begin(), v.end(), 0.0f), static_cast<ptrdiff_t>(v.size()));
}

TEST(Backend, ADeviceWithoutABackendIsAClearError) {
  try {
    backends::backend_for(Device::cuda(0));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kRuntime);
    EXPECT_NE(std::string(e.what()).find("no backend for device cuda:0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("TESSERA_CUDA=ON"), std::string::npos) << e.what();
  }
}

// Every family's table is filled for each kernel build the CPU runs.
TEST(Backend, CpuKernelTablesAreCompleteOnEveryIsa) {
  const Isa before = active_isa();
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (!isa_supported(isa)) continue;
    set_active_isa(isa);
    const backends::KernelTables& k = backends::kernels_for(Device::cpu());
    for (const void* t :
         {static_cast<const void*>(k.activation), static_cast<const void*>(k.attention),
          static_cast<const void*>(k.cross_entropy), static_cast<const void*>(k.decode_attention),
          static_cast<const void*>(k.embedding), static_cast<const void*>(k.gemm),
          static_cast<const void*>(k.gemv), static_cast<const void*>(k.norm),
          static_cast<const void*>(k.optimizer), static_cast<const void*>(k.rope),
          static_cast<const void*>(k.vector), static_cast<const void*>(k.vocab_parallel)})
      EXPECT_NE(t, nullptr) << isa_name(isa);
  }
  set_active_isa(before);
}

// An op entry given tensors of a device this build has no backend for says so, not a crash.
TEST(Backend, AnOpOnADeviceWithoutABackendIsAClearError) {
  std::vector<float> x(8, 1.0f), gamma(4, 1.0f), y(8), rstd(2);
  const Device gpu = Device::cuda(0);
  try {
    ops::rmsnorm_fwd(Tensor(x.data(), {2, 4}, DType::kF32, gpu), Tensor(gamma.data(), {4}, DType::kF32, gpu),
                     1e-6f, Tensor(y.data(), {2, 4}, DType::kF32, gpu),
                     Tensor(rstd.data(), {2}, DType::kF32, gpu));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kRuntime);
    EXPECT_NE(std::string(e.what()).find("no backend for device cuda:0"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

// The AMX calibration loop computes what it counts: four 16 x 16 accumulators of 32-long bf16 dot
// products of 2^-24 by 2^-24 per call, so after n calls every element of tiles 0 and 3 holds
// n x 32 x 2^-48 (exact in f32), and it reports n x 4 x 16384 FLOPs.
TEST(CpuPeak, AmxLoopAccumulatesWhatItCounts) {
  if (!amx_bf16_usable()) GTEST_SKIP() << "this CPU or kernel does not offer AMX bf16 tiles";
  float sink = 0;
  const double flops = cpu::amx::dot_bf16(1000, &sink);
  EXPECT_EQ(flops, 1000.0 * 4 * 16 * 16 * 32 * 2);
  EXPECT_EQ(sink, 2.0f * 256 * 1000 * 32 * std::ldexp(1.0f, -48));
}

// Where AMX is usable the bf16 peak is the AMX tiles' (oneDNN's bf16 GEMMs run there), and the
// calibration says so; elsewhere it is the bf16 dot product's.
TEST(CpuPeak, Bf16PeakIsTheAmxTilesWhereTheyAreUsable) {
  if (!isa_supported(Isa::kAvx512)) GTEST_SKIP() << "no AVX-512 on this CPU";
  const backends::DevicePeak p = cpu::calibrate_cpu_peak(0.01, Isa::kAvx512);
  EXPECT_EQ(p.bf16_amx, cpu::amx_tiles_in_use());
  EXPECT_GT(p.bf16_flops, 0);
  EXPECT_FALSE(cpu::calibrate_cpu_peak(0.01, Isa::kAvx2).bf16_amx);
  // Where bf16 attention runs its products (attention_products.h): the tiles, or vdpbf16ps or f32
  // by the calibration; below AVX-512 always f32.
  EXPECT_EQ(p.bf16_attention,
            cpu::products_name(cpu::choose_products(true, cpu::amx_tiles_in_use(), cpu::bf16_dot_speedup())));
  EXPECT_EQ(cpu::calibrate_cpu_peak(0.01, Isa::kAvx2).bf16_attention, "f32");
}

// One setting moves every bf16 product of a run off the AMX tiles: oneDNN's ISA limit
// (ONEDNN_MAX_CPU_ISA) decides whether its GEMMs run there, and attention and the bf16 peak follow.
// CTest runs this suite once more with ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16
// (backends_onednn_without_amx), where an AMX CPU must then use no tiles anywhere.
TEST(CpuPeak, Bf16ProductsUseTheAmxTilesOnlyWhereOneDnnDoes) {
  if (!isa_supported(Isa::kAvx512)) GTEST_SKIP() << "no AVX-512 on this CPU";
  EXPECT_EQ(cpu::amx_tiles_in_use(), amx_bf16_usable() && cpu::onednn_matmul_amx());
  const std::string impl = cpu::onednn_matmul_impl(
      {.m = 2048, .n = 768, .k = 768, .ab_dtype = DType::kBF16, .c_dtype = DType::kBF16});
  EXPECT_EQ(impl.find("amx") != std::string::npos, cpu::amx_tiles_in_use()) << impl;
  const char* limit = std::getenv("ONEDNN_MAX_CPU_ISA");
  if (limit != nullptr && std::string_view(limit) == "AVX512_CORE_BF16") {
    EXPECT_FALSE(cpu::amx_tiles_in_use());
  }
  const backends::DevicePeak p = cpu::calibrate_cpu_peak(0.01, Isa::kAvx512);
  EXPECT_EQ(p.bf16_amx, cpu::amx_tiles_in_use());
  EXPECT_EQ(p.bf16_attention == "amx", cpu::amx_tiles_in_use());
}

}  // namespace
}  // namespace tessera
