// Which instruction set the CPU kernels use, and how many threads they run on.
//
// Kernels exist in three builds of the same source (backends/cpu/*_avx512.cc, *_avx2.cc,
// *_scalar.cc): AVX-512 needs F, BW, VL, DQ and BF16 (Zen 4/5, Sapphire Rapids, Cooper Lake); AVX2
// needs FMA as well; the scalar build uses no ISA-specific code and runs on any 64-bit CPU. The
// best supported ISA is chosen at start-up, unless the environment variable TESSERA_ISA
// (scalar, avx2 or avx512) names one; tests force each in turn with set_active_isa to check every
// build on one machine.
//
// Threads: kernels and oneDNN share one OpenMP pool. set_num_threads(n) sizes it (0 = one per
// core the process may run on); the config key `num_threads` and the OMP_NUM_THREADS variable
// both end up here.
#pragma once

#include <optional>
#include <string_view>

namespace tessera {

enum class Isa { kScalar, kAvx2, kAvx512 };

std::string_view isa_name(Isa isa);                       // "scalar", "avx2", "avx512"
std::optional<Isa> isa_from_name(std::string_view name);  // nullopt for an unknown name
bool isa_supported(Isa isa);                              // kScalar always
Isa best_isa();                                           // AVX-512 > AVX2 > scalar

// The ISA a TESSERA_ISA value asks for. Throws kConfig, naming the variable, the value and the
// choices, when the name is unknown or this CPU lacks that ISA.
Isa isa_from_setting(std::string_view value);

// The ISA the kernels dispatch to. The first call initialises it from TESSERA_ISA (unset or empty:
// best_isa()), and throws as isa_from_setting does while that value is bad.
Isa active_isa();
void set_active_isa(Isa isa);  // throws kRuntime when the CPU does not support it

// AMX tiles with bf16 (TDPBF16PS; Sapphire Rapids and later): the CPU has them, the OS enables
// their state (XCR0), and Linux granted this process their use (arch_prctl ARCH_REQ_XCOMP_PERM, as
// oneDNN asks before its AMX kernels). Asked once; later calls return the first answer. oneDNN's
// bf16 GEMMs run on AMX where this holds, so the bf16 peak is AMX's there (backends/cpu/peak.h).
bool amx_bf16_usable();

int num_threads();
void set_num_threads(int n);

}  // namespace tessera
