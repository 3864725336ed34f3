// The CPU's vector kernel table, built for each ISA (isa_dispatch.h); the table's
// type and contract are in backends/kernels/vector.h.
#pragma once

#include "tessera/backends/cpu/isa_dispatch.h"
#include "tessera/backends/kernels/vector.h"

namespace tessera::cpu {

using namespace ::tessera::backends;  // the kernels' argument types, for the .inc files

TESSERA_DECLARE_KERNEL_TABLE(VectorKernels, vector_kernels)

}  // namespace tessera::cpu
