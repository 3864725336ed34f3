// The CPU backend (cpu_backend.h). Memory operations are the C library's: fill_zero and copy run on
// the calling thread, as the executor's own memset and memcpy did (the tensors they touch between
// nodes are small next to the kernels' work, and a single stream keeps them in order).
#include "tessera/backends/cpu/cpu_backend.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "tessera/core/cpu_features.h"
#include "tessera/core/error.h"

namespace tessera::cpu {
namespace {

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
    std::memset(t.data(), 0, t.nbytes());
  }
  void copy(const Tensor& dst, const Tensor& src) override {
    TESSERA_ASSERT(dst.device().is_cpu() && src.device().is_cpu() && dst.nbytes() == src.nbytes());
    if (dst.data() != src.data()) std::memcpy(dst.data(), src.data(), src.nbytes());
  }
  void synchronize() override {}
};

}  // namespace

backends::Backend& cpu_backend() {
  static CpuBackend backend;
  return backend;
}

}  // namespace tessera::cpu
