#include "tessera/backends/cpu/attention_products.h"

#include <atomic>

#include "tessera/backends/cpu/onednn_matmul.h"
#include "tessera/backends/cpu/peak.h"
#include "tessera/core/cpu_features.h"
#include "tessera/core/error.h"

namespace tessera::cpu {
namespace {

constexpr int kAutomatic = -1;
std::atomic<int> pinned{kAutomatic};

}  // namespace

std::string_view products_name(Bf16Products p) {
  switch (p) {
    case Bf16Products::kF32:
      return "f32";
    case Bf16Products::kDot:
      return "vdpbf16ps";
    case Bf16Products::kTiles:
      return "amx";
  }
  return "unknown";
}

bool amx_tiles_in_use() {
  static const bool in_use = amx_bf16_usable() && onednn_matmul_amx();
  return in_use;
}

Bf16Products choose_products(bool avx512, bool amx_usable, double dot_speedup) {
  if (avx512 && amx_usable) return Bf16Products::kTiles;
  if (avx512 && dot_speedup >= 1.5) return Bf16Products::kDot;
  return Bf16Products::kF32;
}

Bf16Products automatic_products(bool avx512) {
  if (!avx512) return Bf16Products::kF32;
  const bool amx = amx_tiles_in_use();
  return choose_products(true, amx, amx ? 0.0 : bf16_dot_speedup());
}

Bf16Products bf16_attention_products() {
  const int p = pinned.load(std::memory_order_relaxed);
  if (p != kAutomatic) return static_cast<Bf16Products>(p);
  if (active_isa() != Isa::kAvx512) return Bf16Products::kF32;
  static const Bf16Products chosen = automatic_products(true);
  return chosen;
}

void pin_bf16_attention_products(std::optional<Bf16Products> p) {
  if (p == Bf16Products::kTiles)
    TESSERA_CHECK(amx_bf16_usable(), ErrorKind::kRuntime,
                  "bf16 attention on the AMX tiles: this CPU has none");
  if (p == Bf16Products::kDot)
    TESSERA_CHECK(isa_supported(Isa::kAvx512), ErrorKind::kRuntime,
                  "bf16 attention on vdpbf16ps needs the AVX-512 kernels, which this CPU cannot run");
  pinned.store(p ? static_cast<int>(*p) : kAutomatic, std::memory_order_relaxed);
}

}  // namespace tessera::cpu
