#define TESSERA_ISA_NS scalar
#include "tessera/backends/cpu/gemv_kernels.inc"
