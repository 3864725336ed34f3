#define TESSERA_ISA_NS scalar
#include "tessera/backends/cpu/embedding_kernels.inc"
