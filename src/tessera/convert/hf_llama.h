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

namespace tessera::convert {

struct HfName {
  std::string tessera;  // e.g. decoder.layers_0.self_attention.query.kernel
  std::string hf;       // e.g. model.layers.0.self_attn.q_proj.weight
  bool transpose;       // true for Linear weights
};

std::vector<HfName> llama_hf_names(const models::ModelSpec& spec);

// dst (f32, Tessera's layout) = src (float32 or bfloat16, Hugging Face's layout), transposing a
// Linear weight [out, in] into a kernel [in, out] when `transpose`; bfloat16 widens exactly. Throws
// kConfig naming `file` and `name` when src's dtype or shape does not fit dst.
void hf_to_tessera_tensor(const Tensor& src, bool transpose, const Tensor& dst, const std::string& file,
                          const std::string& name);
// dst (float32 or bfloat16, Hugging Face's layout) = src (f32, Tessera's layout), the inverse of the
// above; bfloat16 rounds to nearest even. Shapes must fit (an internal invariant).
void tessera_to_hf_tensor(const Tensor& src, bool transpose, const Tensor& dst);

// Copies every parameter from `file` (names prefixed by `prefix`, f32 or bf16) into the plan's
// f32 masters, transposing Linear weights, then refreshes the compute copies. Throws kIo naming
// the file and tensor when one is missing, kConfig when its dtype or shape does not fit.
void load_hf_llama(graph::Plan& plan, const models::ModelSpec& spec, const SafetensorsFile& file,
                   const std::string& prefix = "");

}  // namespace tessera::convert
