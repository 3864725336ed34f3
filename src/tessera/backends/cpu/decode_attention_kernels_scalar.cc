#define TESSERA_ISA_NS scalar
#include "tessera/backends/cpu/decode_attention_kernels.inc"
