// How a kernel family is built for two ISAs and dispatched at run time.
//
// A family `foo` has:
//   foo_kernels.h      a struct of function pointers (`FooKernels`) and `foo_kernels()`, which
//                      returns the table for active_isa();
//   foo_kernels.inc    the kernels, written once in plain C++ with `#pragma omp simd` where the
//                      compiler needs leave to vectorise a reduction; it defines the table inside
//                      namespace TESSERA_ISA_NS;
//   foo_kernels_avx512.cc / foo_kernels_avx2.cc
//                      two lines each: define TESSERA_ISA_NS, include the .inc. CMake compiles them
//                      with -mavx512{f,bw,vl,dq,bf16} and -mavx2 -mfma respectively.
// Hand-written intrinsics go in the .inc behind `#ifdef __AVX512F__` where auto-vectorisation does
// not reach the roofline; each such block states the scalar math it implements.
#pragma once

#include "tessera/core/cpu_features.h"

#define TESSERA_DECLARE_KERNEL_TABLE(Table, getter)                                      \
  namespace avx512 {                                                                     \
  extern const Table k##Table;                                                           \
  }                                                                                      \
  namespace avx2 {                                                                       \
  extern const Table k##Table;                                                           \
  }                                                                                      \
  inline const Table& getter() {                                                         \
    return ::tessera::active_isa() == ::tessera::Isa::kAvx512 ? avx512::k##Table : avx2::k##Table; \
  }
