#define TESSERA_ISA_NS avx512
#include "tessera/backends/cpu/optimizer_kernels.inc"
