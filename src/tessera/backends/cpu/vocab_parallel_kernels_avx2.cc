#define TESSERA_ISA_NS avx2
#include "tessera/backends/cpu/vocab_parallel_kernels.inc"
