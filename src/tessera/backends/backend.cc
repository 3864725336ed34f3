// Device -> backend (backend.h). The CPU backend is always built; a CUDA build registers its own.
#include "tessera/backends/backend.h"

#include "tessera/backends/cpu/cpu_backend.h"
#include "tessera/backends/kernels.h"
#include "tessera/core/error.h"

namespace tessera::backends {

Backend& backend_for(Device device) {
  if (device.is_cpu()) return cpu::cpu_backend();
  fail(ErrorKind::kRuntime,
       "no backend for device {} in this build: Tessera was built for the CPU only "
       "(configure with -DTESSERA_CUDA=ON for NVIDIA GPUs)",
       device.str());
}

const KernelTables& kernels_for(Device device) {
  return backend_for(device).kernels();
}

}  // namespace tessera::backends
