// `tessera convert`: checkpoints between Hugging Face's safetensors layout and Tessera's checkpoint
// folder, for every family with a Hugging Face table (hf_family.h: Llama, Mistral, Qwen 2/3,
// GPT-2, Mixtral, GPT-OSS). The tables say which tensors and config fields map to what; this
// file only moves them. docs/convert.md is the user's guide.
//
// Hugging Face -> Tessera. Reads HF_DIR/config.json (convert/hf_config.h) and the weights:
// model.safetensors, or the shards named by model.safetensors.index.json. Writes OUT_DIR/ with
//   params.safetensors  f32 masters under Tessera's names (Linear weights transposed to [in, out];
//                       bfloat16 widens exactly)
//   manifest.json       a Tessera checkpoint manifest (step 0, size and CRC32C of params.safetensors,
//                       the resolved config), plus "source": the HF folder and its config.json
//   model.yml           the model's config keys (and the tokenizer's), so that
//                         tessera train OUT_DIR/model.yml load_parameters_path=OUT_DIR run_name=...
//                       runs the converted model with no edits
//   tokenizer files     copied when present: tokenizer.model (SentencePiece: Llama 2, Mistral),
//                       else tokenizer.json or vocab.json + merges.txt, with tokenizer_config.json
//                       (byte-level BPE: Llama 3); model.yml points at them by absolute path
// Every tensor the model needs must be present with its shape (float32 or bfloat16; MXFP4 expert
// weights where the table allows them, dequantised). HF tensors known to be redundant are
// skipped: the table's buffers (rotary inv_freq, GPT-2's causal masks), and the head of a tied
// model when it equals the embedding; any other extra tensor is an error.
//
// Tessera -> Hugging Face. Reads a checkpoint folder (verified against its manifest) or a bare
// params.safetensors, with its config: the given config file and overrides, else the manifest's
// resolved config. Writes OUT_DIR/config.json and model.safetensors, or shards
// model-0000k-of-0000n.safetensors and model.safetensors.index.json when the weights exceed the
// shard size, in float32 or bfloat16 (rounded to nearest even).
//
// Both directions write into OUT_DIR.tmp/ (files fsynced), then rename it to OUT_DIR, so OUT_DIR
// is complete or absent; OUT_DIR must not exist or be empty. Errors name the file, the tensor, and
// what was expected and found: kConfig for a model or file content Tessera does not convert (a
// tensor missing, extra or of the wrong shape; an unsupported config field), kIo for files that are
// missing, unreadable or corrupt.
//
// Memory: HF -> Tessera holds the converted f32 parameters (4 bytes each; tensors that need no
// change are written from the mapped input); Tessera -> HF holds one output shard at a time.
// Left out: PyTorch .bin weights, float16 tensors (core's safetensors reader has no F16), the
// tokenizer on the way back to Hugging Face, writing MXFP4 (an export is float32 or bfloat16), the
// families without a table (Gemma).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tessera/convert/hf_config.h"
#include "tessera/core/safetensors.h"

namespace tessera::convert {

// The default --max-shard-size: transformers 4's "5GB".
inline constexpr uint64_t kDefaultMaxShardBytes = 5'000'000'000;

// A Hugging Face model folder: config.json and the tensors of model.safetensors or of the shards
// that model.safetensors.index.json lists (all opened and cross-checked on construction).
class HfCheckpoint {
 public:
  // Throws kIo naming the file: folder or config.json missing, a listed shard missing, an index
  // that names a tensor its shard lacks (or a shard holding a tensor the index does not list).
  explicit HfCheckpoint(const std::filesystem::path& dir);

  const std::filesystem::path& dir() const { return dir_; }
  const nlohmann::json& config() const { return config_; }
  std::vector<std::string> names() const;  // sorted
  bool contains(const std::string& name) const { return where_.count(name) > 0; }
  // The tensor (a view into its mapped file); throws kConfig naming the folder when it is absent.
  Tensor get(const std::string& name) const;
  // The path of the file that holds `name`, else of the weights file (for messages).
  std::string file_of(const std::string& name) const;
  // model.safetensors, or model.safetensors.index.json when sharded.
  const std::string& weights_path() const { return weights_path_; }

 private:
  std::filesystem::path dir_;
  std::string weights_path_;
  nlohmann::json config_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const SafetensorsFile*> where_;
};

struct HfToTesseraOptions {
  std::filesystem::path hf_dir;
  std::filesystem::path out_dir;
  // The compute dtype written to model.yml ("float32" | "bfloat16"); empty: config.json's
  // torch_dtype / dtype when it is one of those, else bfloat16.
  std::string dtype;
};

struct TesseraToHfOptions {
  std::filesystem::path checkpoint;  // a checkpoint folder (manifest.json) or a params safetensors file
  std::filesystem::path out_dir;
  // The config of the checkpoint's model: this file with `overrides` applied; empty: the resolved
  // config in the checkpoint's manifest (with `overrides` applied).
  std::filesystem::path config_file;
  std::vector<std::string> overrides;
  std::string dtype;  // of the written tensors, "float32" | "bfloat16"; empty: the config's dtype
  uint64_t max_shard_bytes = kDefaultMaxShardBytes;
};

// What a conversion wrote, for the command to print.
struct ConvertReport {
  std::filesystem::path out_dir;
  std::vector<std::string> files;  // written, relative to out_dir
  HfModel model;
  std::string dtype;                 // the written tensors' dtype (HF) or model.yml's compute dtype
  int64_t tensors = 0;               // parameter tensors converted
  int64_t params = 0;                // parameters converted
  std::vector<std::string> skipped;  // HF tensors skipped as redundant, with the reason
  std::vector<std::string> notes;    // choices the user should know about
};

ConvertReport convert_hf_to_tessera(const HfToTesseraOptions& options);
ConvertReport convert_tessera_to_hf(const TesseraToHfOptions& options);

// "5GB" -> 5e9 bytes, as transformers reads max_shard_size: B, KB/MB/GB (powers of 1000),
// KiB/MiB/GiB (powers of 1024), or a plain number of bytes. Throws kConfig for anything else or 0.
uint64_t parse_byte_size(const std::string& text);

}  // namespace tessera::convert
