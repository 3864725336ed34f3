#include "tessera/core/arena.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <utility>

#include "tessera/core/checked.h"
#include "tessera/core/error.h"

namespace tessera {

namespace {
constexpr size_t kHugePage = size_t{2} << 20;
size_t round_up(size_t x, size_t a) {
  return checked_add(x, a - 1, "arena size") / a * a;
}
}  // namespace

Arena::Arena(size_t capacity, std::string name) : name_(std::move(name)) {
  capacity_ = round_up(capacity == 0 ? 1 : capacity, kHugePage);
  // Over-map by one huge page so the region can start on a 2 MiB boundary (THP needs it).
  size_t map_bytes = checked_add(capacity_, kHugePage, "arena size");
  void* p = mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    fail(ErrorKind::kRuntime, "arena '{}': cannot map {} bytes: {}", name_, map_bytes, std::strerror(errno));
  auto addr = reinterpret_cast<uintptr_t>(p);
  auto aligned = round_up(addr, kHugePage);
  if (aligned > addr) munmap(p, aligned - addr);
  size_t tail = (addr + map_bytes) - (aligned + capacity_);
  if (tail > 0) munmap(reinterpret_cast<void*>(aligned + capacity_), tail);
  base_ = reinterpret_cast<char*>(aligned);
  madvise(base_, capacity_, MADV_HUGEPAGE);  // advisory: failure only costs speed
  // Pre-fault: one write per 4 KiB page (a huge page faults on its first write).
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  // Threads fault in parallel: on a fresh virtual machine each first touch also faults on the host.
  const auto pages = static_cast<int64_t>(capacity_ / page);
#pragma omp parallel for schedule(static) if (pages > 4096)
  for (int64_t p = 0; p < pages; ++p) base_[static_cast<size_t>(p) * page] = 0;
}

Arena::~Arena() {
  if (base_) munmap(base_, capacity_);
}

Arena::Arena(Arena&& o) noexcept {
  *this = std::move(o);
}

Arena& Arena::operator=(Arena&& o) noexcept {
  if (this != &o) {
    if (base_) munmap(base_, capacity_);
    base_ = std::exchange(o.base_, nullptr);
    capacity_ = std::exchange(o.capacity_, 0);
    used_ = std::exchange(o.used_, 0);
    name_ = std::move(o.name_);
  }
  return *this;
}

void* Arena::allocate(size_t bytes, size_t alignment) {
  size_t start = round_up(used_, alignment);
  if (bytes > capacity_ || start > capacity_ - bytes)
    fail(ErrorKind::kRuntime, "arena '{}' is full: {} bytes asked, {} of {} used", name_, bytes, used_,
         capacity_);
  used_ = start + bytes;
  return base_ + start;
}

Tensor Arena::tensor(Shape shape, DType dtype) {
  return Tensor(allocate(checked_mul(static_cast<size_t>(shape.numel()), dtype_size(dtype), shape.str())),
                shape, dtype, device());
}

size_t aligned_bytes(Shape shape, DType dtype) {
  return round_up(checked_mul(static_cast<size_t>(shape.numel()), dtype_size(dtype), shape.str()),
                  Arena::kAlignment);
}

}  // namespace tessera
