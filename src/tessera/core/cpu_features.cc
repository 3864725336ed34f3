#include "tessera/core/cpu_features.h"

#include <omp.h>
#include <sched.h>

#include <atomic>

#include "tessera/core/error.h"

namespace tessera {

namespace {
std::atomic<int> g_active{-1};

bool has_avx512() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512bf16");
}
bool has_avx2() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }
}  // namespace

std::string_view isa_name(Isa isa) { return isa == Isa::kAvx512 ? "avx512" : "avx2"; }

bool isa_supported(Isa isa) { return isa == Isa::kAvx512 ? has_avx512() : has_avx2(); }

Isa best_isa() {
  if (has_avx512()) return Isa::kAvx512;
  if (has_avx2()) return Isa::kAvx2;
  fail(ErrorKind::kRuntime, "this CPU lacks AVX2 and FMA; Tessera's CPU backend needs at least both");
}

Isa active_isa() {
  int a = g_active.load(std::memory_order_relaxed);
  if (a < 0) {
    a = static_cast<int>(best_isa());
    g_active.store(a, std::memory_order_relaxed);
  }
  return static_cast<Isa>(a);
}

void set_active_isa(Isa isa) {
  if (!isa_supported(isa)) fail(ErrorKind::kRuntime, "this CPU does not support the {} kernels", isa_name(isa));
  g_active.store(static_cast<int>(isa), std::memory_order_relaxed);
}

int num_threads() { return omp_get_max_threads(); }

void set_num_threads(int n) {
  if (n < 0) fail(ErrorKind::kConfig, "num_threads must be >= 0 (0 = all cores), got {}", n);
  if (n == 0) {
    cpu_set_t set;
    n = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : omp_get_num_procs();
  }
  omp_set_num_threads(n);
}

}  // namespace tessera
