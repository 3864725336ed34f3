// The tensor map of `tessera convert` and the golden tests: a family's rules (hf_family.h)
// expanded for one model into its Hugging Face tensors, and the copies between those and
// Tessera's parameters (transposes, blocks and interleaved columns of fused tensors, one tensor
// per expert, float32 / bfloat16), plus MXFP4 dequantisation.
//
// Layouts. Hugging Face stores nn.Linear weights [out, in]; Tessera stores kernels [in, out]
// (MaxText's layout), so those transpose on the way in and out. bfloat16 widens to float32
// exactly and float32 rounds to bfloat16 to nearest even, so HF -> Tessera -> HF is bitwise.
//
// MXFP4 (openai/gpt-oss-*): a tensor W is stored as W_blocks uint8 [X, R, G, 16] (two FP4 E2M1
// codes per byte, the low nibble first) and W_scales uint8 [X, R, G] (a shared power of two per
// 32 values, biased by 127). Dequantised, row r of expert x holds, for g < G and i < 16,
//   w[x, r, 32 g + 2 i]     = fp4(blocks[x, r, g, i] & 15) * 2^(scales[x, r, g] - 127)
//   w[x, r, 32 g + 2 i + 1] = fp4(blocks[x, r, g, i] >> 4) * 2^(scales[x, r, g] - 127)
// with fp4 = {0, .5, 1, 1.5, 2, 3, 4, 6, -0, -.5, -1, -1.5, -2, -3, -4, -6}, and W = w transposed
// to [X, 32 G, R] (transformers' integrations/mxfp4.py, convert_moe_packed_tensors). Each value is
// exact in float32 (two significant bits times a power of two in float32's range).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "tessera/convert/hf_family.h"
#include "tessera/core/safetensors.h"
#include "tessera/graph/plan.h"
#include "tessera/models/model_spec.h"

namespace tessera::convert {

// A Tessera parameter's part of one Hugging Face tensor: a rule at one layer (and expert).
struct HfPiece {
  std::string tessera;  // the parameter
  int64_t expert = -1;  // the slice of its axis 0 that the Hugging Face tensor holds; -1: all of it
  bool transpose = false;
  HfSplit split = HfSplit::kWhole;
  int index = 0, count = 1;
};

// A Hugging Face tensor of the model and the pieces that fill it.
struct HfTensorPlan {
  std::string hf;
  Shape shape;  // Hugging Face's
  std::vector<HfPiece> pieces;
};

// The Hugging Face tensors of a model of `family` whose parameters are `params` (name -> shape,
// as build_decoder declares them) with `layers` decoder layers, in the table's order (per layer
// for the rules of a layer). Throws kConfig naming a parameter that no rule maps (a Tessera
// option the family's Hugging Face model does not have, such as biases on Llama).
std::vector<HfTensorPlan> hf_tensor_plan(const HfFamily& family, const std::map<std::string, Shape>& params,
                                         int64_t layers);

// Expert `e` of a stacked parameter [X, ...] (contiguous): a view of shape [...].
Tensor expert_slice(const Tensor& stacked, int64_t e);

// Tessera's parameters of `spec` (name -> shape), as its family's graph declares them.
std::map<std::string, Shape> model_params(const models::ModelSpec& spec);

// dst (f32: the piece's parameter, or its expert slice) = the piece of src (the Hugging Face
// tensor, f32 or bf16, of the plan's shape). Throws kConfig naming `file` and `name` when src's
// dtype or shape does not fit.
void hf_piece_to_tessera(const Tensor& src, const HfPiece& piece, const Tensor& dst, const std::string& file,
                         const std::string& name);
// The piece of dst (the Hugging Face tensor, f32 or bf16) = src (f32: the parameter or its slice).
void tessera_to_hf_piece(const Tensor& src, const HfPiece& piece, const Tensor& dst);

// dst (f32 [X, 32 G, R]) = the MXFP4 tensor of blocks (u8 [X, R, G, 16]) and scales (u8 [X, R, G]),
// as above. Throws kConfig naming `file` and `name` when the dtypes or shapes do not fit.
void dequantize_mxfp4(const Tensor& blocks, const Tensor& scales, const Tensor& dst, const std::string& file,
                      const std::string& name);

// A parameter stored whole as one Hugging Face tensor (every tensor of the dense Llama-style
// families): the name pairs the golden tests walk.
struct HfName {
  std::string tessera;  // e.g. decoder.layers_0.self_attention.query.kernel
  std::string hf;       // e.g. model.layers.0.self_attn.q_proj.weight
  bool transpose;       // true for Linear weights
};
// The pairs of `spec`'s model, in the table's order. Throws kConfig when its family fuses or
// splits tensors (then hf_tensor_plan says how).
std::vector<HfName> hf_names(const models::ModelSpec& spec);

// Copies every parameter of the plan's model from `file` (Hugging Face names prefixed by
// `prefix`, f32 or bf16, in the layout of spec's family) into the plan's f32 masters, then
// refreshes the compute copies. Throws kConfig when a tensor is missing or does not fit, or the
// spec's decoder_block has no Hugging Face table.
void load_hf_parameters(graph::Plan& plan, const models::ModelSpec& spec, const SafetensorsFile& file,
                        const std::string& prefix = "");

}  // namespace tessera::convert
