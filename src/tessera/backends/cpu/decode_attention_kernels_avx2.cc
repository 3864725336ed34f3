#define TESSERA_ISA_NS avx2
#include "tessera/backends/cpu/decode_attention_kernels.inc"
