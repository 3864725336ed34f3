// Backend: what the engine needs from a device, in the spirit of ggml's backends. The executor and
// the collectives' glue never touch memory themselves (no memset or memcpy above this line); they
// ask the backend of the tensors' device. Each backend lives in its own folder (backends/cpu/,
// later backends/cuda/) and implements:
//   - supports(op, dtype): whether it runs an op family in a compute dtype, so that binding a plan
//     to a device fails before the first step, naming the op, rather than inside a kernel;
//   - allocate / deallocate: device memory for arenas (the host's is mapped, madvised for huge
//     pages and pre-faulted: core/arena.h);
//   - fill_zero (and fill_zero_for_later) / copy: the memory operations of a step, queued on the
//     backend's stream;
//   - synchronize: waits for the work queued so far (a no-op on the CPU, where every call
//     returns when its work is done).
//   - calibrate_peak: its measured peak FLOP/s for MFU;
//   - kernels: its per-family tables of raw-pointer kernels (kernels.h), which the op entries call
//     after checking their arguments.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "tessera/core/device.h"
#include "tessera/core/dtype.h"
#include "tessera/core/tensor.h"

namespace tessera::backends {

struct KernelTables;  // kernels.h

// A device's peak FLOP/s, the denominator of MFU.
struct DevicePeak {
  double f32_flops = 0;   // FLOP/s, the whole device (on the CPU: all threads)
  double bf16_flops = 0;  // FLOP/s with bf16 operands (= the f32 peak where there is no faster path)
  bool bf16_amx = false;  // the CPU's bf16 figure is its AMX tiles' (backends/cpu/peak.h)
  // Where bf16 attention runs its products on this device ("amx", "vdpbf16ps" or "f32" on the CPU;
  // empty where the backend does not say).
  std::string_view bf16_attention;
  double for_dtype(DType compute) const { return compute == DType::kBF16 ? bf16_flops : f32_flops; }
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual Device device() const = 0;
  virtual std::string name() const = 0;  // for logs: "cpu (avx512)"

  // `op` is a graph op family name as graph::op_name spells it ("matmul", "rms_norm_bwd", ...);
  // `dtype` the compute dtype of its activations.
  virtual bool supports(std::string_view op, DType dtype) const = 0;

  // `bytes` of device memory, aligned to at least 64 bytes; throws kRuntime naming the size.
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* p, size_t bytes) = 0;

  // Sets every byte of a contiguous tensor to zero.
  virtual void fill_zero(const Tensor& t) = 0;
  // The same for a tensor whose next reader comes long after (a step's gradients, zeroed before its
  // forward pass): on the CPU its lines go to memory instead of displacing what is read sooner.
  virtual void fill_zero_for_later(const Tensor& t) = 0;
  // dst = src for contiguous tensors of equal size (a no-op when they are the same memory).
  virtual void copy(const Tensor& dst, const Tensor& src) = 0;
  virtual void synchronize() = 0;

  // The kernel tables (kernels.h); on the CPU those of the active ISA.
  virtual const KernelTables& kernels() const = 0;
  // Measures the peak with calibration loops of about `seconds_per_kind` each (on the CPU: every
  // thread at once, the active ISA's kernels).
  virtual DevicePeak calibrate_peak(double seconds_per_kind) const = 0;
};

// The backend of `device`; throws kRuntime when this build has none for it (e.g. a CUDA device in
// a build without -DTESSERA_CUDA=ON).
Backend& backend_for(Device device);

}  // namespace tessera::backends
