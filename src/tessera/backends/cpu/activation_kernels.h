// The CPU's activation kernel table, built for each ISA (isa_dispatch.h); the table's
// type and contract are in backends/kernels/activation.h.
#pragma once

#include "tessera/backends/cpu/isa_dispatch.h"
#include "tessera/backends/kernels/activation.h"

namespace tessera::cpu {

using namespace ::tessera::backends;  // the kernels' argument types, for the .inc files

TESSERA_DECLARE_KERNEL_TABLE(ActivationKernels, activation_kernels)

}  // namespace tessera::cpu
