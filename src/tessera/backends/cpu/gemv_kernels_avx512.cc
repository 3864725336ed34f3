#define TESSERA_ISA_NS avx512
#include "tessera/backends/cpu/gemv_kernels.inc"
