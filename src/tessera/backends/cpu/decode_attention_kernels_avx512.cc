#define TESSERA_ISA_NS avx512
#include "tessera/backends/cpu/decode_attention_kernels.inc"
