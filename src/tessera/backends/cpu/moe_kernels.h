// The CPU's mixture-of-experts kernels (the table's contract is backends/kernels/moe.h): one build
// for every ISA, since they move rows and reduce over a few experts; the compiler vectorises the
// row loops.
#pragma once

#include "tessera/backends/kernels/moe.h"

namespace tessera::cpu {

extern const backends::MoeKernels kMoeKernels;

}  // namespace tessera::cpu
