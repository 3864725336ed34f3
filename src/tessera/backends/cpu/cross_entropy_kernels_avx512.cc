#define TESSERA_ISA_NS avx512
#include "tessera/backends/cpu/cross_entropy_kernels.inc"
