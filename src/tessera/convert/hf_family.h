// The Hugging Face side of each model family: one table per config.json model_type, listing its
// config fields and their Tessera keys, and its state-dict tensors and the Tessera parameters they
// hold. `tessera convert` (hf_convert.h), the config map (hf_config.h) and the tensor map
// (hf_tensors.h) read these tables and nothing else about a family; the tables live beside each
// other in hf_llama.cc (llama, mistral), hf_qwen.cc (qwen2, qwen3), hf_gpt2.cc (gpt2),
// hf_mixtral.cc (mixtral), hf_gpt_oss.cc (gpt_oss) and hf_gemma.cc (gemma, gemma2, gemma3_text). Adding a
// family is adding a table here.
//
// Tensor rules. A rule maps one Tessera parameter to one Hugging Face tensor, or to a part of one:
//   tessera   the parameter's name; "{l}" is the decoder layer
//   hf        the state-dict name; "{l}" the layer, and "{e}" the expert when Hugging Face stores
//             one tensor per expert (Mixtral's experts.{e}.w1): the Tessera parameter [X, ...] is
//             the stack of the X tensors
//   transpose Hugging Face's last two axes are Tessera's swapped (nn.Linear stores [out, in],
//             Tessera's kernels are [in, out]); per expert for stacked experts
//   split     Tessera's tensor is one part of Hugging Face's last axis (before any transpose):
//             block `index` of `count` equal blocks (GPT-2's fused c_attn: q, k, v), or every
//             count-th entry from `index` (GPT-OSS's interleaved gate_up_proj: gate even, up odd)
// A rule whose Tessera parameter the configured model does not have (a bias, QK-norm, an untied
// output projection) is skipped, so one table covers a family's variants; a Hugging Face tensor
// that no rule reads is an error, except the redundant ones the importer knows (rotary inv_freq,
// a tied lm_head equal to the embedding, GPT-2's causal-mask buffers).
//
// Config fields. A field maps a config.json number or flag to a Tessera key, with transformers'
// default when the field is absent (or null). Fixed fields must hold one value when present and are
// written with it; fixed keys are the Tessera keys the family's model.yml always sets, and export
// refuses a config whose keys differ. RoPE, sliding windows and quantization have fixed meanings
// shared by the families (hf_config.h) and are switched on per table.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::convert {

enum class HfSplit { kWhole, kBlock, kInterleaved };

struct HfTensorRule {
  std::string_view tessera;
  std::string_view hf;
  bool transpose = false;
  HfSplit split = HfSplit::kWhole;
  int index = 0, count = 1;  // kBlock / kInterleaved: the index-th of count parts
};

// A positive integer, a number, true/false; kCap: a positive number or null (none: Tessera's 0,
// as Gemma's soft caps), where null is not the same as absent (which takes the fallback).
enum class HfValue { kCount, kReal, kBool, kCap };

struct HfField {
  std::string_view hf;       // config.json key
  std::string_view tessera;  // the Tessera key it sets
  HfValue type;
  // transformers' default when absent or null, as text: "" (required), a JSON literal ("1e-06",
  // "false"), "@field" (another field's value), "@a/@b" (their quotient), "4*@a" (a multiple).
  std::string_view fallback = "";
  // Not a config.json field but a value of the others (GPT-2's head_dim = n_embd / n_head): set
  // from `fallback` on import, checked against it on export, never read or written.
  bool derived = false;
};

struct HfFixed {
  std::string_view hf;
  std::string_view json;  // the only value Tessera reads, as JSON text; written on export
  std::string_view why;   // said when another value is found
  // Another value read as the same (Gemma's legacy hidden_act "gelu", which transformers runs as
  // gelu_pytorch_tanh), as JSON text; never written.
  std::string_view also = "";
};

struct HfKey {
  std::string_view tessera;
  std::string_view yaml;  // its value in model.yml, as YAML text
};

// How the family's config.json says which layers slide a window.
enum class HfWindow {
  kNone,         // no window (Llama, GPT-2); Qwen's use_sliding_window must be false
  kOptional,     // sliding_window: an int for every layer, or null (Mistral, Mixtral)
  kAlternating,  // layer_types: sliding, full, sliding, ... with sliding_window (GPT-OSS, Gemma 2)
  kFiveToOne,    // layer_types: five sliding, then one full (l % 6 == 5), ... (Gemma 3)
};

struct HfFamily {
  std::string_view model_type;    // config.json's model_type: "llama"
  std::string_view architecture;  // its architectures entry: "LlamaForCausalLM"
  // The Tessera decoder_block values exported as this model_type; the first is model.yml's.
  std::vector<std::string_view> blocks;
  std::vector<HfField> fields;
  std::vector<HfFixed> fixed;
  std::vector<HfKey> keys;
  // Other fields the family's config.json may hold that change neither the weights nor the
  // forward pass (space-separated); generic PretrainedConfig fields are known to every family.
  std::string_view harmless = "";
  // The RoPE kinds its rope_scaling / rope_parameters may name (space-separated: default, llama3,
  // yarn); "": no rotary positions, and no RoPE fields (GPT-2).
  std::string_view rope_types = "default";
  double default_rope_theta = 10000.0;
  // RoPE per layer type (Gemma 3): full_attention layers rotate with rope_theta and the table's
  // rope_types (default, linear), sliding_attention ones with their own theta
  // (rope_local_base_freq) and no scaling. default_rope_theta is the full layers'.
  bool local_rope = false;
  double default_local_rope_theta = 10000.0;
  HfWindow window = HfWindow::kNone;
  int64_t default_window = 0;  // transformers' sliding_window when absent (kOptional: 0 is null)
  bool mxfp4 = false;          // quantization_config quant_method mxfp4: *_blocks + *_scales tensors
  // Importing also reads checkpoints saved without this prefix of every name (GPT-2's Hub
  // checkpoint names h.0.attn.c_attn.weight, transformers' state dict transformer.h.0...).
  std::string_view optional_prefix = "";
  // Suffixes of Hugging Face buffers that are not parameters (skipped on import).
  std::string_view buffers = ".rotary_emb.inv_freq";
  std::vector<HfTensorRule> tensors;
};

// Every table, in docs/convert.md's order.
const std::vector<const HfFamily*>& hf_families();
// The table of config.json's model_type, or nullptr.
const HfFamily* hf_family_of_model_type(std::string_view model_type);
// The table exporting decoder_block, or nullptr.
const HfFamily* hf_family_of_block(std::string_view decoder_block);
// The words of a space-separated list (HfFamily::harmless, buffers, rope_types).
std::vector<std::string_view> hf_words(std::string_view list);
// "llama, mistral, qwen2, ..." and "llama2, mistral, ..." for messages.
std::string hf_model_types();
std::string hf_blocks();

// The tables (one file each, beside this one).
extern const HfFamily kHfLlama, kHfMistral;            // hf_llama.cc
extern const HfFamily kHfQwen2, kHfQwen3;              // hf_qwen.cc
extern const HfFamily kHfGpt2;                         // hf_gpt2.cc
extern const HfFamily kHfMixtral;                      // hf_mixtral.cc
extern const HfFamily kHfGptOss;                       // hf_gpt_oss.cc
extern const HfFamily kHfGemma, kHfGemma2, kHfGemma3;  // hf_gemma.cc
// The Llama decoder's tensors (embedding, attention with optional biases and QK-norm, gated MLP,
// norms, head), which Mistral and Qwen share and Mixtral and GPT-OSS extend.
// (Functions, not globals: the tables of other files are built from them during static
// initialisation.)
std::vector<HfTensorRule> hf_llama_attention_tensors();  // one layer's, and its norms
std::vector<HfTensorRule> hf_llama_outer_tensors();      // embedding, final norm, head
std::vector<HfTensorRule> hf_llama_dense_tensors();      // the whole dense decoder
// The fields of a Llama-style config.json, with transformers' defaults of num_key_value_heads and
// rms_norm_eps; and its fixed SwiGLU and dropout fields.
std::vector<HfField> hf_llama_fields(std::string_view kv_heads, std::string_view eps);
std::vector<HfFixed> hf_swiglu_fixed();
// `outer` (embedding first; final norm and head last) around `layer`.
std::vector<HfTensorRule> hf_decoder_tensors(const std::vector<HfTensorRule>& layer);

}  // namespace tessera::convert
