// The CPU's attention kernel table, built for each ISA (isa_dispatch.h); the table's
// type and contract are in backends/kernels/attention.h.
#pragma once

#include "tessera/backends/cpu/isa_dispatch.h"
#include "tessera/backends/kernels/attention.h"

namespace tessera::cpu {

using namespace ::tessera::backends;  // the kernels' argument types, for the .inc files

TESSERA_DECLARE_KERNEL_TABLE(AttentionKernels, attention_kernels)

}  // namespace tessera::cpu
