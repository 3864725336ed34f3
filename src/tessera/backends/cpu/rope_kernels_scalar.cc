#define TESSERA_ISA_NS scalar
#include "tessera/backends/cpu/rope_kernels.inc"
