// A device's kernel tables, one per op family: what the op entries (ops/) call once they have
// checked their arguments. Each table is a struct of raw-pointer functions whose type and contract
// live in backends/kernels/<family>.h, written once for every device; a backend fills them with its
// own kernels (the CPU's per ISA: backends/cpu/isa_dispatch.h). The op entries find the table
// through the tensors' device, so nothing above backends/ names a device's headers.
#pragma once

#include "tessera/backends/kernels/activation.h"
#include "tessera/backends/kernels/attention.h"
#include "tessera/backends/kernels/cross_entropy.h"
#include "tessera/backends/kernels/decode_attention.h"
#include "tessera/backends/kernels/embedding.h"
#include "tessera/backends/kernels/gemm.h"
#include "tessera/backends/kernels/gemv.h"
#include "tessera/backends/kernels/moe.h"
#include "tessera/backends/kernels/norm.h"
#include "tessera/backends/kernels/optimizer.h"
#include "tessera/backends/kernels/rope.h"
#include "tessera/backends/kernels/vector.h"
#include "tessera/backends/kernels/vocab_parallel.h"
#include "tessera/core/device.h"
#include "tessera/core/tensor.h"

namespace tessera::backends {

struct KernelTables {
  const ActivationKernels* activation = nullptr;
  const AttentionKernels* attention = nullptr;
  const CrossEntropyKernels* cross_entropy = nullptr;
  const DecodeAttentionKernels* decode_attention = nullptr;
  const EmbeddingKernels* embedding = nullptr;
  const GemmKernels* gemm = nullptr;
  const GemvKernels* gemv = nullptr;
  const MoeKernels* moe = nullptr;
  const NormKernels* norm = nullptr;
  const OptimizerKernels* optimizer = nullptr;
  const RopeKernels* rope = nullptr;
  const VectorKernels* vector = nullptr;
  const VocabParallelKernels* vocab_parallel = nullptr;
};

// The tables of `device`'s backend (backend.h's backend_for: a device without a backend in this
// build is a kRuntime error); on the CPU, those of the active ISA.
const KernelTables& kernels_for(Device device);
inline const KernelTables& kernels_for(const Tensor& t) {
  return kernels_for(t.device());
}

}  // namespace tessera::backends
