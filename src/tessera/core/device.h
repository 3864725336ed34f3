// Device: where a tensor's memory lives and which backend runs the ops on it. Tensors and arenas
// carry one; backends/backend.h maps a device to its backend (allocate, copy, fill, supports).
// Today the CPU is the only device with a backend in the build; a CUDA device is named so that
// plans and messages can speak of it, and asking for its backend is a clear error.
#pragma once

#include <cstdint>
#include <string>

namespace tessera {

enum class DeviceKind : uint8_t { kCpu, kCuda };

struct Device {
  DeviceKind kind = DeviceKind::kCpu;
  int16_t index = 0;  // the device's ordinal among those of its kind (0 for the host)

  static constexpr Device cpu() { return Device{}; }
  static constexpr Device cuda(int16_t i) { return Device{DeviceKind::kCuda, i}; }
  bool is_cpu() const { return kind == DeviceKind::kCpu; }
  bool operator==(const Device&) const = default;
  std::string str() const;  // "cpu", "cuda:0"
};

}  // namespace tessera
