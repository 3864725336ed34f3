// The CPU's optimizer kernel table, built for each ISA (isa_dispatch.h); the table's
// type and contract are in backends/kernels/optimizer.h.
#pragma once

#include "tessera/backends/cpu/isa_dispatch.h"
#include "tessera/backends/kernels/optimizer.h"

namespace tessera::cpu {

using namespace ::tessera::backends;  // the kernels' argument types, for the .inc files

TESSERA_DECLARE_KERNEL_TABLE(OptimizerKernels, optimizer_kernels)

}  // namespace tessera::cpu
