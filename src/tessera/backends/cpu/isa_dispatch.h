// How a kernel family is built for three ISAs and dispatched at run time.
//
// A family `foo` has:
//   foo_kernels.h      a struct of function pointers (`FooKernels`) and `foo_kernels()`, which
//                      returns the table for active_isa();
//   foo_kernels.inc    the kernels, written once in plain C++ with `#pragma omp simd` where the
//                      compiler needs leave to vectorise a reduction; it defines the table inside
//                      namespace TESSERA_ISA_NS;
//   foo_kernels_avx512.cc / foo_kernels_avx2.cc / foo_kernels_scalar.cc
//                      two lines each: define TESSERA_ISA_NS, include the .inc. CMake compiles the
//                      first two with -mavx512{f,bw,vl,dq,bf16} and -mavx2 -mfma respectively, the
//                      scalar one with the baseline flags of the rest of the tree.
// Hand-written intrinsics go in the .inc behind `#if defined(__AVX512F__)` / `__AVX2__` where
// auto-vectorisation does not reach the roofline, with a plain C++ branch (GCC vector types at
// most, which the compiler lowers to whatever the baseline target has) for the scalar build; each
// such block states the scalar math it implements.
#pragma once

#include "tessera/core/cpu_features.h"

#define TESSERA_DECLARE_KERNEL_TABLE(Table, getter) \
  namespace avx512 {                                \
  extern const Table k##Table;                      \
  }                                                 \
  namespace avx2 {                                  \
  extern const Table k##Table;                      \
  }                                                 \
  namespace scalar {                                \
  extern const Table k##Table;                      \
  }                                                 \
  inline const Table& getter() {                    \
    switch (::tessera::active_isa()) {              \
      case ::tessera::Isa::kAvx512:                 \
        return avx512::k##Table;                    \
      case ::tessera::Isa::kAvx2:                   \
        return avx2::k##Table;                      \
      case ::tessera::Isa::kScalar:                 \
        break;                                      \
    }                                               \
    return scalar::k##Table;                        \
  }
