#define TESSERA_ISA_NS scalar
#include "tessera/backends/cpu/vocab_parallel_kernels.inc"
