// The device axis: tensors and arenas carry their device, views keep it, and backend_for maps a
// device to its backend (the CPU's here; a device without a backend in the build is a clear error).
#include "tessera/backends/backend.h"

#include <gtest/gtest.h>

#include <vector>

#include "tessera/core/arena.h"
#include "tessera/core/error.h"

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

}  // namespace
}  // namespace tessera
