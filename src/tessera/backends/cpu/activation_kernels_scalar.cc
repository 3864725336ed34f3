#define TESSERA_ISA_NS scalar
#include "tessera/backends/cpu/activation_kernels.inc"
