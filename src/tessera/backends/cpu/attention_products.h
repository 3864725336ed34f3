// Where bf16 attention (attention_kernels.inc) runs its matrix products, chosen once per process
// from what this CPU has and what its calibration measures:
//   kTiles  the AMX tiles (TDPBF16PS, attention_amx.h), where amx_tiles_in_use();
//   kDot    vdpbf16ps in the AVX-512 kernels, where it delivers more FLOP/s than the f32 FMAs
//           (AMD Zen 4/5: about twice; an AMX Xeon: half), by bf16_dot_speedup() >= 1.5;
//   kF32    bf16 tiles widened to f32 and every product in f32, at the f32 rate.
// The bf16 paths round P and dS to bf16 for their products (as FlashAttention does on GPUs) and
// need D and the key tile to be multiples of 32; other shapes take the f32 path.
#pragma once

#include <optional>
#include <string_view>

namespace tessera::cpu {

enum class Bf16Products { kF32, kDot, kTiles };

// Whether bf16 products run on the AMX tiles: the CPU and kernel offer them (amx_bf16_usable(),
// core/cpu_features.h) and oneDNN may use them (onednn_matmul_amx(): ONEDNN_MAX_CPU_ISA below
// AVX512_CORE_AMX keeps its GEMMs off them, and then attention and the bf16 peak stay off too).
bool amx_tiles_in_use();

std::string_view products_name(Bf16Products p);  // "f32", "vdpbf16ps", "amx"

// The rule above: tiles where AMX is in use, else the dot product where the AVX-512 kernels run and
// their bf16 dot product outpaces their f32 FMAs by `dot_speedup` >= 1.5, else f32.
Bf16Products choose_products(bool avx512, bool amx_usable, double dot_speedup);

// choose_products() for this CPU with the AVX-512 kernels (avx512) or without them: the dot
// product's speed-up is measured (a few ms, once per process) only where there is no AMX.
Bf16Products automatic_products(bool avx512);

// What bf16 attention uses now: the pinned choice if one is set, else automatic_products() for the
// active ISA.
Bf16Products bf16_attention_products();

// Pins a choice (tests, benchmarks); nullopt returns to the automatic one. Throws kRuntime when the
// CPU cannot run it (kTiles without AMX; kDot without the AVX-512 kernels).
void pin_bf16_attention_products(std::optional<Bf16Products> p);

}  // namespace tessera::cpu
