#include "tessera/backends/cpu/peak.h"

#include <omp.h>

#include <algorithm>
#include <chrono>

#include "tessera/backends/cpu/attention_products.h"
#include "tessera/backends/cpu/peak_kernels.h"
#include "tessera/core/error.h"

namespace tessera::cpu {

namespace {

// Runs `kernel` on all threads for about `seconds`; returns FLOP/s over the slowest thread's time.
double measure(double (*kernel)(int64_t, float*), double seconds) {
  float sink = 0;
  kernel(1000, &sink);  // warm up: brings the cores to their AVX-512 clocks
  int64_t iters = 1000;
  for (;;) {  // grow until one call lasts about `seconds`
    auto t0 = std::chrono::steady_clock::now();
    kernel(iters, &sink);
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (dt > seconds / 4) {
      iters = static_cast<int64_t>(static_cast<double>(iters) * seconds / dt);
      break;
    }
    iters *= 4;
  }
  double total = 0, slowest = 0;
#pragma omp parallel reduction(+ : total) reduction(max : slowest)
  {
    float s = 0;
    auto t0 = std::chrono::steady_clock::now();
    total += kernel(iters, &s);
    slowest = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s == 12345.0f) total += 1;  // keeps s alive
  }
  return total / slowest;
}

// The best of five single-thread runs (0.3-0.7 ms each here), in FLOP/s.
double single_thread_rate(double (*kernel)(int64_t, float*)) {
  float sink = 0;
  kernel(200000, &sink);  // warm up: brings the core to its AVX-512 clock
  double best = 0;
  for (int run = 0; run < 5; ++run) {
    const auto t0 = std::chrono::steady_clock::now();
    const double flops = kernel(200000, &sink);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, flops / dt);
  }
  return best;
}

}  // namespace

double bf16_dot_speedup() {
  static const double speedup = [] {
    if (!isa_supported(Isa::kAvx512)) return 0.0;
    const cpu::PeakKernels& k = cpu::avx512::kPeakKernels;
    return single_thread_rate(k.dot_bf16) / single_thread_rate(k.fma_f32);
  }();
  return speedup;
}

DevicePeak calibrate_cpu_peak(double seconds) {
  return calibrate_cpu_peak(seconds, active_isa());
}

DevicePeak calibrate_cpu_peak(double seconds, Isa isa) {
  TESSERA_CHECK(isa_supported(isa), ErrorKind::kRuntime, "this CPU does not support the {} kernels",
                isa_name(isa));
  const cpu::PeakKernels& k = isa == Isa::kAvx512 ? cpu::avx512::kPeakKernels
                              : isa == Isa::kAvx2 ? cpu::avx2::kPeakKernels
                                                  : cpu::scalar::kPeakKernels;
  DevicePeak p;
  p.f32_flops = measure(k.fma_f32, seconds);
  p.bf16_flops = k.dot_bf16 ? measure(k.dot_bf16, seconds) : p.f32_flops;
  // Where AMX is in use oneDNN's bf16 GEMMs run on it, many times the vdpbf16ps rate: the bf16
  // peak is then AMX's (on a 2-core Xeon VM: about 10x; an MFU against vdpbf16ps read 290 %).
  if (isa == Isa::kAvx512 && amx_tiles_in_use()) {
    p.bf16_flops = std::max(p.bf16_flops, measure(amx::dot_bf16, seconds));
    p.bf16_amx = true;
  }
  // What this run's bf16 attention uses: a pinned choice (benchmarks) shows, for the active ISA.
  p.bf16_attention = products_name(isa == active_isa() ? bf16_attention_products()
                                                       : automatic_products(isa == Isa::kAvx512));
  return p;
}

}  // namespace tessera::cpu
