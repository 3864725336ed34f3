// The CPU Engine for the Llama family (Llama 2/3/3.1, Mistral): weights in the compute dtype
// (`dtype`: f32 or bf16), a KV cache per layer of [max_slots, max_target_length, K, D] in the same
// dtype, GQA-aware attention of the new positions against the cache. make_engine builds it, or the
// graph engine (graph_engine.h) for the other families.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tessera/config/config.h"
#include "tessera/core/tensor.h"
#include "tessera/infer/engine.h"
#include "tessera/models/model_spec.h"

namespace tessera::infer {

// Which engine make_engine builds: the Llama engine (this file: decoding-specific layouts, the
// faster on the Llama family), the graph engine (graph_engine.h: every family, from the model
// definition), or the Llama engine where it runs the model and the graph engine elsewhere.
enum class EngineKind { kAuto, kLlama, kGraph };

struct EngineOptions {
  int max_slots = 1;               // sequences in flight
  int64_t max_target_length = 0;   // 0: the config's max_target_length
  int64_t max_prefill_length = 0;  // 0: the config's max_prefill_predict_length
  EngineKind kind = EngineKind::kAuto;
};

// Builds the engine for cfg's model and loads its parameters from cfg.load_parameters_path (a
// Tessera checkpoint folder, verified, or a safetensors file of Tessera parameter names). Throws
// kConfig when load_parameters_path is empty or names another model, kIo when it cannot be read.
std::unique_ptr<Engine> make_engine(const Config& cfg, const EngineOptions& options);

// The parameters the engine reads, by Tessera name, with their shapes as a checkpoint stores them
// (kernels [in, out]): the training graph's list (models/decoder.h), for any family.
std::vector<std::pair<std::string, Shape>> llama_parameter_shapes(const models::ModelSpec& spec);

// A parameter by Tessera name: an f32 tensor of its checkpoint shape, read before the next call.
using ParameterSource = std::function<Tensor(const std::string& name)>;

// The same engine with its parameters from memory (tests, benchmarks, a caller that holds them):
// `params` is asked once for each name of llama_parameter_shapes(spec). spec.dtype is the compute
// dtype; spec.batch and spec.seq are ignored. The options' lengths must be set (> 0). Throws
// kConfig for options or a spec the engine does not build, kShape for a tensor of the wrong
// shape or dtype.
std::unique_ptr<Engine> make_engine(const models::ModelSpec& spec, const EngineOptions& options,
                                    const ParameterSource& params);

}  // namespace tessera::infer
