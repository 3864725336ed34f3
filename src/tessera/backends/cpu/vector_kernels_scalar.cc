#define TESSERA_ISA_NS scalar
#include "tessera/backends/cpu/vector_kernels.inc"
