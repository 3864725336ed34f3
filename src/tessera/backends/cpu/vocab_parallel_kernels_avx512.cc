#define TESSERA_ISA_NS avx512
#include "tessera/backends/cpu/vocab_parallel_kernels.inc"
