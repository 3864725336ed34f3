// The CPU's gemv kernel table, built for each ISA (isa_dispatch.h); the table's
// type and contract are in backends/kernels/gemv.h.
#pragma once

#include "tessera/backends/cpu/isa_dispatch.h"
#include "tessera/backends/kernels/gemv.h"

namespace tessera::cpu {

using namespace ::tessera::backends;  // the kernels' argument types, for the .inc files

TESSERA_DECLARE_KERNEL_TABLE(GemvKernels, gemv_kernels)

}  // namespace tessera::cpu
