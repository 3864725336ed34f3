#define TESSERA_ISA_NS scalar
#include "tessera/backends/cpu/optimizer_kernels.inc"
