#define TESSERA_ISA_NS scalar
#include "tessera/backends/cpu/attention_kernels.inc"
