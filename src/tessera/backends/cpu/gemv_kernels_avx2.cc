#define TESSERA_ISA_NS avx2
#include "tessera/backends/cpu/gemv_kernels.inc"
