#define TESSERA_ISA_NS avx512
#include "tessera/backends/cpu/attention_kernels.inc"
