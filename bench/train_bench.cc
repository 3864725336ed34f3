// Training throughput of a configured model: builds the Trainer from a config (default: the
// llama-125m preset at batch 8 x 1024 tokens) and runs warm-up plus measured steps, then prints
// the median step's model TFLOP/s, tokens/s and MFU as one JSON line per run. The peak used for
// MFU is printed too, so a reference (tools/torch_train_bench.py) can divide by the same number,
// with the hardware rate (every FLOP executed, recompute included), its fraction of that peak (HFU)
// and what the bf16 peak stands on: vdpbf16ps's one-thread rate over the f32 FMAs', and AMX.
//
//   build/train_bench [--warmup 2] [--steps 10] [--profile] [--bf16-attention f32|vdpbf16ps|amx]
//                     configs/base.yml model_name=llama-125m dtype=bfloat16 ...
//
// --bf16-attention pins where bf16 attention runs its products (attention_products.h) instead of
// the automatic choice. With ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 and vdpbf16ps, an AMX Xeon runs
// every bf16 product of the step on vdpbf16ps, the path of a CPU without AMX (AMD Zen 4/5).
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "tessera/backends/cpu/attention_products.h"
#include "tessera/backends/cpu/peak.h"
#include "tessera/config/config.h"
#include "tessera/core/cpu_features.h"
#include "tessera/core/error.h"
#include "tessera/core/source_dir.h"
#include "tessera/train/trainer.h"

namespace {

long peak_rss_kib() {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  long kib = -1;
  while (std::fgets(line, sizeof line, f))
    if (std::strncmp(line, "VmHWM:", 6) == 0) kib = std::strtol(line + 6, nullptr, 10);
  std::fclose(f);
  return kib;
}

}  // namespace

int main(int argc, char** argv) {
  int warmup = 2, steps = 10;
  bool profile = false;
  std::string attention;  // empty: the automatic choice
  std::string config = (tessera::source_dir() / "configs" / "base.yml").string();
  std::vector<std::string> overrides;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--warmup" && i + 1 < argc)
      warmup = std::stoi(argv[++i]);
    else if (a == "--steps" && i + 1 < argc)
      steps = std::stoi(argv[++i]);
    else if (a == "--profile")
      profile = true;
    else if (a == "--bf16-attention" && i + 1 < argc)
      attention = argv[++i];
    else if (a.find('=') == std::string::npos)
      config = a;
    else
      overrides.push_back(a);
  }
  // The benchmark's shape unless the command line says otherwise.
  for (std::string d : {"model_name=llama-125m", "per_device_batch_size=8", "max_target_length=1024",
                        "run_name=train_bench", "enable_checkpointing=false", "enable_tensorboard=false"}) {
    std::string key = d.substr(0, d.find('=') + 1);
    if (std::none_of(overrides.begin(), overrides.end(),
                     [&](const std::string& o) { return o.starts_with(key); }))
      overrides.push_back(d);
  }
  overrides.push_back(fmt::format("steps={}", warmup + steps));
  overrides.push_back("log_period=1");
  try {
    using tessera::cpu::Bf16Products;
    if (!attention.empty()) {
      std::optional<Bf16Products> pin;
      for (Bf16Products p : {Bf16Products::kF32, Bf16Products::kDot, Bf16Products::kTiles})
        if (tessera::cpu::products_name(p) == attention) pin = p;
      if (!pin)
        throw tessera::Error(tessera::ErrorKind::kConfig,
                             "--bf16-attention " + attention + ": expected f32, vdpbf16ps or amx");
      tessera::cpu::pin_bf16_attention_products(pin);
    }
    tessera::Config cfg = tessera::load_config(config, overrides);
    tessera::train::Trainer trainer(cfg, std::cerr);
    std::vector<tessera::train::StepMetrics> measured;
    trainer.run([&](const tessera::train::StepMetrics& m) {
      if (m.step + 1 == warmup) trainer.executor().set_profiling(profile);
      if (m.step >= warmup) measured.push_back(m);
    });
    if (profile) std::cerr << trainer.executor().profile_report();
    if (measured.empty())
      throw tessera::Error(tessera::ErrorKind::kConfig, "no step was measured (steps <= warmup?)");
    std::sort(measured.begin(), measured.end(), [](auto& a, auto& b) { return a.seconds < b.seconds; });
    const auto& med = measured[measured.size() / 2];
    const auto& mem = trainer.plan().memory();
    std::cout << fmt::format(
                     "{{\"impl\": \"tessera\", \"dtype\": \"{}\", \"remat_policy\": \"{}\", "
                     "\"step_seconds\": {:.4f}, "
                     "\"tflops_per_device\": {:.4f}, \"tokens_per_second\": {:.1f}, \"mfu\": {:.4f}, "
                     "\"hw_tflops_per_device\": {:.4f}, \"hfu\": {:.4f}, "
                     "\"peak_gflops\": {:.1f}, \"bf16_dot_speedup\": {:.2f}, \"amx\": {}, "
                     "\"bf16_attention\": \"{}\", \"startup_seconds\": {:.3f}, \"planned_bytes\": {}, "
                     "\"peak_rss_bytes\": {}, \"loss\": {:.4f}}}",
                     cfg.dtype, cfg.remat_policy, med.seconds, med.tflops_per_device, med.tokens_per_device,
                     med.mfu, med.hw_tflops_per_device, med.hfu, med.tflops_per_device * 1e3 / med.mfu,
                     tessera::cpu::bf16_dot_speedup(), tessera::cpu::amx_tiles_in_use(),
                     tessera::cpu::products_name(tessera::cpu::bf16_attention_products()),
                     trainer.startup_seconds(), mem.total(), peak_rss_kib() * 1024, measured.back().loss)
              << std::endl;
  } catch (const tessera::Error& e) {
    std::cerr << "train_bench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
