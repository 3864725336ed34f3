// The CPU's rope kernel table, built for each ISA (isa_dispatch.h); the table's
// type and contract are in backends/kernels/rope.h.
#pragma once

#include "tessera/backends/cpu/isa_dispatch.h"
#include "tessera/backends/kernels/rope.h"

namespace tessera::cpu {

using namespace ::tessera::backends;  // the kernels' argument types, for the .inc files

TESSERA_DECLARE_KERNEL_TABLE(RopeKernels, rope_kernels)

}  // namespace tessera::cpu
