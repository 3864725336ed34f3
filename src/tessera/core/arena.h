// Arena: one large region of memory, mapped once, madvised for transparent huge pages and
// pre-faulted, from which tensors are carved by offset. Nothing in a step loop allocates: the
// plan sizes the arenas before step 1 (DESIGN.md principle 3).
//
// An Arena is host memory (its device() is the CPU) and tags the tensors it carves with it. Memory
// on another device comes from that device's backend (backends/backend.h: allocate).
//
// Why pre-fault: on the virtual machines Tessera runs on, the first touch of a fresh 4 KiB page
// costs ~14 us (~0.3 GB/s); with MADV_HUGEPAGE the same region faults in at ~17 GB/s.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "tessera/core/tensor.h"

namespace tessera {

class Arena {
 public:
  static constexpr size_t kAlignment = 64;  // one cache line; also an AVX-512 register

  Arena() = default;
  // Maps `capacity` bytes (rounded up to 2 MiB), madvises huge pages and touches every page.
  explicit Arena(size_t capacity, std::string name = "arena");
  ~Arena();
  Arena(Arena&& o) noexcept;
  Arena& operator=(Arena&& o) noexcept;
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  // Bump allocation; throws kRuntime naming the arena when it is full.
  void* allocate(size_t bytes, size_t alignment = kAlignment);
  Tensor tensor(Shape shape, DType dtype);
  // Forget every allocation (the memory stays mapped and faulted).
  void reset() { used_ = 0; }

  size_t capacity() const { return capacity_; }
  size_t used() const { return used_; }
  char* base() const { return base_; }
  Device device() const { return Device::cpu(); }

 private:
  char* base_ = nullptr;
  size_t capacity_ = 0;
  size_t used_ = 0;
  std::string name_;
};

// Bytes needed for `shape` of `dtype` once aligned to Arena::kAlignment.
size_t aligned_bytes(Shape shape, DType dtype);

}  // namespace tessera
