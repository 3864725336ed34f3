#define TESSERA_ISA_NS scalar
#include "tessera/backends/cpu/norm_kernels.inc"
