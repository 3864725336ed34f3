// The CPU Engine for the Llama family (Llama 2/3/3.1, Mistral): weights in the compute dtype
// (`dtype`: f32 or bf16), a KV cache per layer of [max_slots, max_target_length, K, D] in the same
// dtype, GQA-aware attention of the new positions against the cache.
#pragma once

#include <memory>

#include "tessera/config/config.h"
#include "tessera/infer/engine.h"

namespace tessera::infer {

struct EngineOptions {
  int max_slots = 1;               // sequences in flight
  int64_t max_target_length = 0;   // 0: the config's max_target_length
  int64_t max_prefill_length = 0;  // 0: the config's max_prefill_predict_length
};

// Builds the engine for cfg's model and loads its parameters from cfg.load_parameters_path (a
// Tessera checkpoint folder, verified, or a safetensors file of Tessera parameter names). Throws
// kConfig when load_parameters_path is empty or names another model, kIo when it cannot be read.
std::unique_ptr<Engine> make_engine(const Config& cfg, const EngineOptions& options);

}  // namespace tessera::infer
