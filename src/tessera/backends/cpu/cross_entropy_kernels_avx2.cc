#define TESSERA_ISA_NS avx2
#include "tessera/backends/cpu/cross_entropy_kernels.inc"
