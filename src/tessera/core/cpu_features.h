// Which instruction set the CPU kernels use, and how many threads they run on.
//
// Kernels exist in two builds of the same source (backends/cpu/*_avx512.cc, *_avx2.cc): AVX-512
// needs F, BW, VL, DQ and BF16 (Zen 4/5, Sapphire Rapids, Cooper Lake); everything else with AVX2
// and FMA gets the AVX2 build. The best supported ISA is chosen at start-up; tests force each in
// turn with set_active_isa to check both builds on one machine.
//
// Threads: kernels and oneDNN share one OpenMP pool. set_num_threads(n) sizes it (0 = one per
// core the process may run on); the config key `num_threads` and the OMP_NUM_THREADS variable
// both end up here.
#pragma once

#include <string_view>

namespace tessera {

enum class Isa { kAvx2, kAvx512 };

std::string_view isa_name(Isa isa);
bool isa_supported(Isa isa);
Isa best_isa();  // throws kRuntime when the CPU lacks even AVX2 + FMA
Isa active_isa();
void set_active_isa(Isa isa);  // throws kRuntime when the CPU does not support it

int num_threads();
void set_num_threads(int n);

}  // namespace tessera
