// The map between Tessera's Llama parameters and Hugging Face's LlamaForCausalLM / MistralForCausalLM
// state-dict names. Hugging Face stores nn.Linear weights [out, in]; Tessera stores kernels
// [in, out] (MaxText's layout), so those transpose on the way in and out. Hugging Face's q/k
// projections are already permuted for rotate_half RoPE, which is the layout Tessera uses.
#pragma once

#include <string>
#include <vector>

#include "tessera/core/safetensors.h"
#include "tessera/graph/plan.h"
#include "tessera/models/model_spec.h"

namespace tessera::models {

struct HfName {
  std::string tessera;   // e.g. decoder.layers_0.self_attention.query.kernel
  std::string hf;        // e.g. model.layers.0.self_attn.q_proj.weight
  bool transpose;        // true for Linear weights
};

std::vector<HfName> llama_hf_names(const ModelSpec& spec);

// Copies every parameter from `file` (names prefixed by `prefix`, f32 or bf16) into the plan's
// f32 masters, transposing Linear weights, then refreshes the compute copies. Throws kIo naming
// the file and tensor when one is missing or its shape does not fit.
void load_hf_llama(graph::Plan& plan, const ModelSpec& spec, const SafetensorsFile& file,
                   const std::string& prefix = "");

}  // namespace tessera::models
