#include "tessera/core/cpu_features.h"

#include <omp.h>
#include <sched.h>
#include <unistd.h>
#if defined(__x86_64__) && defined(__linux__)
#include <cpuid.h>
#include <sys/syscall.h>
#endif

#include <algorithm>
#include <atomic>
#include <cstdlib>

#include "tessera/core/error.h"

namespace tessera {

namespace {
std::atomic<int> g_active{-1};

constexpr Isa kAllIsas[] = {Isa::kScalar, Isa::kAvx2, Isa::kAvx512};

#if defined(__x86_64__) || defined(__i386__)
bool has_avx512() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512bf16");
}
bool has_avx2() {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
#else
bool has_avx512() {
  return false;
}
bool has_avx2() {
  return false;
}
#endif

std::string supported_names() {
  std::string s;
  for (Isa isa : kAllIsas)
    if (isa_supported(isa)) s += (s.empty() ? "" : ", ") + std::string(isa_name(isa));
  return s;
}
}  // namespace

bool amx_bf16_usable() {
  static const bool usable = [] {
#if defined(__x86_64__) && defined(__linux__)
    unsigned a = 0, b = 0, c = 0, d = 0;
    // CPUID.(7,0):EDX bit 22 AMX-BF16, bit 24 AMX-TILE; CPUID.1:ECX bit 27 OSXSAVE.
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 22)) || !(d & (1u << 24))) return false;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return false;
    unsigned xcr0_lo = 0, xcr0_hi = 0;
    __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    constexpr unsigned kTileState = (1u << 17) | (1u << 18);  // XTILECFG, XTILEDATA
    if ((xcr0_lo & kTileState) != kTileState) return false;
    constexpr long kReqXcompPerm = 0x1023, kXfeatureXtileData = 18;  // <asm/prctl.h>
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtileData) == 0;
#else
    return false;
#endif
  }();
  return usable;
}

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return "scalar";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
  }
  return "unknown";
}

std::optional<Isa> isa_from_name(std::string_view name) {
  for (Isa isa : kAllIsas)
    if (name == isa_name(isa)) return isa;
  return std::nullopt;
}

bool isa_supported(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return true;
    case Isa::kAvx2:
      return has_avx2();
    case Isa::kAvx512:
      return has_avx512();
  }
  return false;
}

Isa best_isa() {
  if (has_avx512()) return Isa::kAvx512;
  if (has_avx2()) return Isa::kAvx2;
  return Isa::kScalar;
}

Isa isa_from_setting(std::string_view value) {
  const std::optional<Isa> isa = isa_from_name(value);
  if (!isa)
    fail(ErrorKind::kConfig, "TESSERA_ISA={}: unknown instruction set; expected scalar, avx2 or avx512",
         value);
  if (!isa_supported(*isa))
    fail(ErrorKind::kConfig, "TESSERA_ISA={}: this CPU does not support the {} kernels; it supports {}",
         value, value, supported_names());
  return *isa;
}

Isa active_isa() {
  int a = g_active.load(std::memory_order_relaxed);
  if (a < 0) {
    const char* env = std::getenv("TESSERA_ISA");
    a = static_cast<int>(env != nullptr && *env != '\0' ? isa_from_setting(env) : best_isa());
    g_active.store(a, std::memory_order_relaxed);
  }
  return static_cast<Isa>(a);
}

void set_active_isa(Isa isa) {
  if (!isa_supported(isa))
    fail(ErrorKind::kRuntime, "this CPU does not support the {} kernels", isa_name(isa));
  g_active.store(static_cast<int>(isa), std::memory_order_relaxed);
}

int num_threads() {
  return omp_get_max_threads();
}

void set_num_threads(int n) {
  if (n < 0) fail(ErrorKind::kConfig, "num_threads must be >= 0 (0 = all cores), got {}", n);
  cpu_set_t set;
  const int cores = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : omp_get_num_procs();
  // More threads than kMaxThreadsPerCore per core only adds contention, and thousands of them make
  // libgomp abort the process when it cannot create them: refused with the largest useful value.
  constexpr int kMaxThreadsPerCore = 8;
  const int most = std::max(1, cores) * kMaxThreadsPerCore;
  if (n > most)
    fail(ErrorKind::kConfig,
         "num_threads={} is more than {} threads per core for the {} cores this process may run on; "
         "use at most {} (0 = one per core)",
         n, kMaxThreadsPerCore, cores, most);
  if (n == 0) n = cores;
  omp_set_num_threads(n);
}

}  // namespace tessera
