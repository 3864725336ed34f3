#define TESSERA_ISA_NS avx2
#include "tessera/backends/cpu/optimizer_kernels.inc"
