#define TESSERA_ISA_NS scalar
#include "tessera/backends/cpu/cross_entropy_kernels.inc"
