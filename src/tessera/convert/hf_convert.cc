#include "tessera/convert/hf_convert.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstring>
#include <set>

#include "tessera/checkpoint/checkpoint.h"
#include "tessera/convert/hf_tensors.h"
#include "tessera/core/crc32c.h"
#include "tessera/core/error.h"
#include "tessera/core/file.h"
#include "tessera/graph/graph.h"
#include "tessera/models/decoder.h"
#include "tessera/models/model_spec.h"

namespace tessera::convert {

namespace fs = std::filesystem;
using models::ModelSpec;
using nlohmann::json;

namespace {

constexpr const char* kHfConfig = "config.json";
constexpr const char* kHfSingle = "model.safetensors";
constexpr const char* kHfIndex = "model.safetensors.index.json";
constexpr const char* kModelYaml = "model.yml";

// Converted tensors' bytes: left uninitialised (every byte is written by the conversion), so the
// pages are touched once, by the conversion, not first by a zero fill.
using Buffer = std::unique_ptr<uint8_t[]>;

// `dir` without a trailing separator ("out/" -> "out"), so that "<dir>.tmp" is its sibling.
fs::path folder_path(const fs::path& dir) {
  fs::path p = dir.lexically_normal();
  return p.has_filename() ? p : p.parent_path();
}

// The output folder, written as OUT_DIR.tmp/ and renamed into place by commit(); removed when
// destroyed uncommitted (an error on the way), so OUT_DIR is complete or absent.
class StagedFolder {
 public:
  explicit StagedFolder(const fs::path& out_dir) {
    final_ = folder_path(out_dir);
    if (final_.empty()) fail(ErrorKind::kConfig, "the output folder is empty");
    tmp_ = final_.string() + ".tmp";
    std::error_code ec;
    if (fs::exists(final_, ec) && !(fs::is_directory(final_, ec) && fs::is_empty(final_, ec)))
      fail(ErrorKind::kConfig,
           "{}: exists and is not an empty folder; convert into a new folder (nothing is overwritten)",
           final_.string());
    fs::remove_all(tmp_, ec);
    fs::create_directories(tmp_, ec);
    if (ec) fail(ErrorKind::kIo, "{}: cannot create: {}", tmp_.string(), ec.message());
  }
  ~StagedFolder() {
    std::error_code ec;
    if (!committed_) fs::remove_all(tmp_, ec);
  }
  StagedFolder(const StagedFolder&) = delete;
  StagedFolder& operator=(const StagedFolder&) = delete;

  const fs::path& path() const { return tmp_; }

  void commit() {
    fsync_path(tmp_);
    std::error_code ec;
    if (fs::exists(final_, ec)) fs::remove(final_, ec);  // an empty folder (checked above)
    fs::rename(tmp_, final_, ec);
    if (ec) fail(ErrorKind::kIo, "cannot rename {} to {}: {}", tmp_.string(), final_.string(), ec.message());
    fsync_path(final_.has_parent_path() ? final_.parent_path() : fs::path("."));
    committed_ = true;
  }

 private:
  fs::path final_, tmp_;
  bool committed_ = false;
};

// The spec of `cfg`'s model, with the smallest batch: conversion needs only parameter shapes.
ModelSpec spec_of(const Config& cfg) {
  Config c = cfg;
  c.per_device_batch_size = 1;
  c.max_target_length = 1;
  return models::model_spec_from_config(c);
}

void check_dtype_name(const std::string& dtype, const char* what) {
  if (dtype != "float32" && dtype != "bfloat16")
    fail(ErrorKind::kConfig, "{} '{}': Tessera converts to float32 or bfloat16", what, dtype);
}

// model.yml's compute dtype: the option, else config.json's dtype when Tessera computes in it.
std::string compute_dtype(const std::string& option, const json& config, std::vector<std::string>& notes) {
  if (!option.empty()) {
    check_dtype_name(option, "--dtype");
    return option;
  }
  const char* key = config.contains("dtype") && config["dtype"].is_string() ? "dtype" : "torch_dtype";
  std::string hf = config.contains(key) && config[key].is_string() ? config[key].get<std::string>() : "";
  if (hf == "float32" || hf == "bfloat16") return hf;
  notes.push_back(
      fmt::format("config.json's {} is {}; model.yml computes in bfloat16 (set --dtype to choose)", key,
                  hf.empty() ? "absent" : hf));
  return "bfloat16";
}

std::string crc_hex(uint32_t crc) {
  return fmt::format("{:08x}", crc);
}

json checkpoint_manifest(const Config& cfg, const HfCheckpoint& hf, const fs::path& staged, int64_t params,
                         int64_t tensors) {
  json m;
  m["format"] = "tessera-checkpoint";
  m["format_version"] = checkpoint::kCheckpointFormatVersion;
  m["step"] = 0;
  m["saved_unix_time"] =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  m["model"] = {{"decoder_block", cfg.decoder_block},
                {"num_params", params},
                {"num_param_tensors", tensors},
                {"weight_dtype", cfg.weight_dtype},
                {"dtype", cfg.dtype}};
  m["optimizer"] = "none";
  m["data_iterator"] = nullptr;
  m["rng"] = nullptr;
  m["config_yaml"] = config_to_yaml(cfg);
  m["source"] = {
      {"format", "huggingface"}, {"path", fs::absolute(hf.dir()).string()}, {"config", hf.config()}};
  uint64_t bytes = 0;
  const uint32_t crc = crc32c_file((staged / checkpoint::kParamsFile).string(), &bytes);
  m["files"] = {{checkpoint::kParamsFile, {{"bytes", bytes}, {"crc32c", crc_hex(crc)}}}};
  return m;
}

// The Hugging Face name of Tessera parameter `tessera` in the family's table ("" when none).
std::string hf_name_of(const HfFamily& fam, std::string_view tessera) {
  for (const HfTensorRule& r : fam.tensors)
    if (r.tessera == tessera) return std::string(r.hf);
  return "";
}

// HF tensors that are not parameters of the model: skipped with the reason when known redundant
// (the family's buffers; the head of a tied model when it equals the embedding), an error
// otherwise. `prefix` is what the checkpoint's names lack of the table's (HfFamily::optional_prefix).
void check_extras(const HfCheckpoint& hf, const HfModel& model, const std::set<std::string>& used,
                  const std::string& prefix, bool tied, std::vector<std::string>& skipped) {
  const HfFamily& fam = *model.family;
  auto strip = [&](const std::string& n) { return n.starts_with(prefix) ? n.substr(prefix.size()) : n; };
  const std::string head = strip(hf_name_of(fam, "decoder.logits_dense.kernel"));
  const std::string emb = strip(hf_name_of(fam, "token_embedder.embedding"));
  for (const std::string& name : hf.names()) {
    if (used.count(name)) continue;
    bool buffer = false;
    for (std::string_view suffix : hf_words(fam.buffers)) buffer = buffer || name.ends_with(suffix);
    if (buffer) {
      skipped.push_back(name + " (a buffer, not a parameter: Tessera computes it)");
      continue;
    }
    if (name == head && tied && hf.contains(emb)) {
      const Tensor h = hf.get(name), e = hf.get(emb);
      if (h.dtype() != e.dtype() || !(h.shape() == e.shape()) ||
          std::memcmp(h.data(), e.data(), h.nbytes()) != 0)
        fail(ErrorKind::kConfig,
             "{}: tensor '{}' differs from '{}', but config.json says tie_word_embeddings: true (one output "
             "projection, the embedding)",
             hf.file_of(name), name, emb);
      skipped.push_back(fmt::format("{} (equal to {}: tie_word_embeddings)", name, emb));
      continue;
    }
    fail(ErrorKind::kConfig,
         "{}: tensor '{}' is not a parameter of the model config.json describes ({}); Tessera stops rather "
         "than drop weights it does not know",
         hf.file_of(name), name, model.describe());
  }
}

// The tokenizer of the HF folder, copied beside the checkpoint, as config lines for model.yml:
// tokenizer.model (SentencePiece: Llama 2, Mistral) first, else tokenizer.json or vocab.json +
// merges.txt (byte-level BPE: Llama 3) with tokenizer_config.json (BOS/EOS ids). The path is
// absolute: config paths are read relative to the working directory, not to the config file.
std::string copy_tokenizer(const fs::path& hf_dir, const fs::path& staged, const fs::path& final_dir,
                           ConvertReport& r) {
  std::vector<std::string> files;
  std::string type, path;
  if (fs::is_regular_file(hf_dir / "tokenizer.model")) {
    files = {"tokenizer.model"};
    type = "sentencepiece";
    path = (final_dir / "tokenizer.model").string();
  } else if (fs::is_regular_file(hf_dir / "tokenizer.json") ||
             (fs::is_regular_file(hf_dir / "vocab.json") && fs::is_regular_file(hf_dir / "merges.txt"))) {
    for (const char* f : {"tokenizer.json", "vocab.json", "merges.txt", "tokenizer_config.json"})
      if (fs::is_regular_file(hf_dir / f)) files.push_back(f);
    type = "huggingface";
    path = final_dir.string();
  } else {
    r.notes.push_back(
        "no tokenizer files in the Hugging Face folder: set tokenizer_type and tokenizer_path to "
        "decode or train on text");
    return "";
  }
  for (const std::string& f : files) {
    write_file_atomically(staged / f, read_file(hf_dir / f));
    r.files.push_back(f);
  }
  // A JSON string is a valid YAML double-quoted scalar, whatever the path holds.
  return fmt::format("tokenizer_type: {}\ntokenizer_path: {}\n", type, json(path).dump());
}

}  // namespace

uint64_t parse_byte_size(const std::string& text) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  std::string unit = text.substr(digits);
  while (!unit.empty() && unit.front() == ' ') unit.erase(0, 1);
  static const std::map<std::string, uint64_t> kUnits = {{"", 1},
                                                         {"B", 1},
                                                         {"KB", 1000},
                                                         {"MB", 1000'000},
                                                         {"GB", 1000'000'000},
                                                         {"KIB", 1ull << 10},
                                                         {"MIB", 1ull << 20},
                                                         {"GIB", 1ull << 30}};
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  auto it = kUnits.find(unit);
  if (digits == 0 || digits > 15 || it == kUnits.end() || std::stoull(text.substr(0, digits)) == 0)
    fail(ErrorKind::kConfig,
         "--max-shard-size '{}': expected a positive size such as 5GB, 500MB, 2GiB or a number of bytes",
         text);
  return std::stoull(text.substr(0, digits)) * it->second;
}

HfCheckpoint::HfCheckpoint(const fs::path& dir) : dir_(dir) {
  if (!fs::is_directory(dir))
    fail(ErrorKind::kIo, "{}: no such folder (a Hugging Face model folder)", dir.string());
  config_ = read_json_file((dir / kHfConfig).string());
  auto open = [&](const std::string& name) -> const SafetensorsFile* {
    files_.push_back(std::make_unique<SafetensorsFile>((dir / name).string()));
    return files_.back().get();
  };
  const fs::path index_path = dir / kHfIndex;
  if (fs::exists(index_path)) {
    weights_path_ = index_path.string();
    const json index = read_json_file(index_path.string());
    if (!index.contains("weight_map") || !index["weight_map"].is_object())
      fail(ErrorKind::kIo, "{}: has no \"weight_map\" object", index_path.string());
    std::map<std::string, std::vector<std::string>> by_file;
    for (const auto& [name, file] : index["weight_map"].items()) {
      if (!file.is_string())
        fail(ErrorKind::kIo, "{}: the file of '{}' is not a string", index_path.string(), name);
      by_file[file.get<std::string>()].push_back(name);
    }
    for (const auto& [file, names] : by_file) {
      if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..")
        fail(ErrorKind::kIo, "{}: lists '{}', which is not a file name in the folder", index_path.string(),
             file);
      if (!fs::is_regular_file(dir / file))
        fail(ErrorKind::kIo, "{}: missing; {} lists it for {} tensors, e.g. '{}'", (dir / file).string(),
             kHfIndex, names.size(), names.front());
      const SafetensorsFile* f = open(file);
      for (const std::string& name : names) {
        if (!f->contains(name))
          fail(ErrorKind::kIo, "{}: has no tensor '{}', which {} places in it", f->path(), name, kHfIndex);
        where_[name] = f;
      }
      for (const std::string& name : f->names())
        if (!where_.count(name) || where_[name] != f)
          fail(ErrorKind::kIo, "{}: holds tensor '{}', which {} does not place in it", f->path(), name,
               kHfIndex);
    }
    return;
  }
  if (fs::exists(dir / kHfSingle)) {
    weights_path_ = (dir / kHfSingle).string();
    const SafetensorsFile* f = open(kHfSingle);
    for (const std::string& name : f->names()) where_[name] = f;
    return;
  }
  const bool bin = fs::exists(dir / "pytorch_model.bin") || fs::exists(dir / "pytorch_model.bin.index.json");
  fail(ErrorKind::kIo, "{}: has neither {} nor {}{}", dir.string(), kHfSingle, kHfIndex,
       bin ? " (only PyTorch .bin weights, which Tessera does not read: save them with transformers' "
             "save_pretrained, which writes safetensors)"
           : "");
}

std::vector<std::string> HfCheckpoint::names() const {
  std::vector<std::string> out;
  for (const auto& [name, file] : where_) out.push_back(name);
  return out;
}

Tensor HfCheckpoint::get(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) fail(ErrorKind::kConfig, "{}: has no tensor '{}'", weights_path_, name);
  return it->second->get(name);
}

std::string HfCheckpoint::file_of(const std::string& name) const {
  auto it = where_.find(name);
  return it == where_.end() ? weights_path_ : it->second->path();
}

namespace {

// The name under which `hf` holds the table's tensor `name`: itself, or without the family's
// optional prefix when the checkpoint's names lack it ("" when neither is there).
std::string stored_name(const HfCheckpoint& hf, const std::string& name, const std::string& prefix) {
  if (prefix.empty() || hf.contains(name)) return name;
  const std::string bare = name.starts_with(prefix) ? name.substr(prefix.size()) : name;
  return hf.contains(bare) ? bare : name;
}

// The model's parameters from `hf` under Tessera's names, in float32 and Tessera's layout. A
// tensor that needs no change is a view into its mapped file; the others are converted into
// `storage` (MXFP4 tensors dequantised first). Counts go to `r`; extra HF tensors are checked by
// check_extras.
std::vector<NamedTensor> import_tensors(const HfCheckpoint& hf, const ModelSpec& spec,
                                        std::vector<Buffer>& storage, ConvertReport& r) {
  const HfFamily& fam = *r.model.family;
  const std::map<std::string, Shape> params = model_params(spec);
  // The checkpoint's names lack the optional prefix when its embedding does.
  const std::string emb = hf_name_of(fam, "token_embedder.embedding");
  const std::string prefix(fam.optional_prefix);
  const std::string strip = !prefix.empty() && !hf.contains(emb) ? prefix : "";
  std::map<std::string, Tensor> dst;  // Tessera name -> its converted tensor
  std::set<std::string> used;
  auto buffer = [&](const Shape& shape) {
    storage.push_back(std::make_unique_for_overwrite<uint8_t[]>(static_cast<size_t>(shape.numel()) * 4));
    return Tensor(storage.back().get(), shape, DType::kF32);
  };
  std::vector<NamedTensor> tensors;
  for (const HfTensorPlan& t : hf_tensor_plan(fam, params, spec.num_decoder_layers)) {
    const std::string name = strip.empty() ? t.hf : stored_name(hf, t.hf, strip);
    Tensor src;
    if (hf.contains(name)) {
      src = hf.get(name);
      used.insert(name);
    } else if (r.model.mxfp4 && hf.contains(name + "_blocks") && hf.contains(name + "_scales")) {
      src = buffer(t.shape);
      dequantize_mxfp4(hf.get(name + "_blocks"), hf.get(name + "_scales"), src, hf.file_of(name + "_blocks"),
                       name);
      used.insert({name + "_blocks", name + "_scales"});
      r.notes.push_back(fmt::format("{}: MXFP4 dequantised to float32", name));
    } else {
      const HfPiece& p = t.pieces[0];
      fail(ErrorKind::kConfig,
           "{}: has no tensor '{}' (shape {}), which the model in config.json needs (Tessera's {}); is it a "
           "checkpoint of another model?",
           hf.weights_path(), name, t.shape.str(), p.tessera);
    }
    for (const HfPiece& p : t.pieces) {
      const Shape& shape = params.at(p.tessera);
      const bool plain = p.expert < 0 && !p.transpose && p.count == 1;
      if (plain && src.dtype() == DType::kF32 && src.shape() == shape) {
        dst.emplace(p.tessera, src);  // written from the mapped input
        continue;
      }
      auto it = dst.find(p.tessera);
      if (it == dst.end()) it = dst.emplace(p.tessera, buffer(shape)).first;
      hf_piece_to_tessera(src, p, p.expert < 0 ? it->second : expert_slice(it->second, p.expert),
                          hf.file_of(name), name);
    }
  }
  for (const auto& [name, shape] : params) {
    tensors.push_back({name, dst.at(name)});
    r.params += shape.numel();
  }
  r.tensors = static_cast<int64_t>(tensors.size());
  check_extras(hf, r.model, used, strip, !params.count("decoder.logits_dense.kernel"), r.skipped);
  return tensors;
}

}  // namespace

ConvertReport convert_hf_to_tessera(const HfToTesseraOptions& o) {
  StagedFolder out(o.out_dir);
  const HfCheckpoint hf(o.hf_dir);
  ConvertReport r;
  r.out_dir = o.out_dir;
  r.model = parse_hf_config(hf.config(), (o.hf_dir / kHfConfig).string());
  r.dtype = compute_dtype(o.dtype, hf.config(), r.notes);

  // model.yml first: the config it loads to is the one the checkpoint is checked against.
  const fs::path yml = out.path() / kModelYaml, abs_out = fs::absolute(folder_path(o.out_dir));
  r.files = {checkpoint::kParamsFile, checkpoint::kManifestFile, kModelYaml};
  const std::string tokenizer = copy_tokenizer(o.hf_dir, out.path(), abs_out, r);
  write_file_atomically(
      yml, fmt::format("# Model keys of the Hugging Face checkpoint {}\n# ({}),\n"
                       "# written by `tessera convert`. Use:\n"
                       "#   tessera train {} load_parameters_path={} run_name=NAME [key=value ...]\n",
                       fs::absolute(o.hf_dir).string(), r.model.describe(), (abs_out / kModelYaml).string(),
                       abs_out.string()) +
               tessera_model_yaml(r.model, r.dtype) + tokenizer);
  const Config cfg = load_config(yml, {});
  std::vector<Buffer> storage;
  const std::vector<NamedTensor> tensors = import_tensors(hf, spec_of(cfg), storage, r);

  const std::map<std::string, std::string> meta = {{"format", "tessera"}, {"step", "0"}};
  write_safetensors((out.path() / checkpoint::kParamsFile).string(), tensors, meta);
  const json manifest = checkpoint_manifest(cfg, hf, out.path(), r.params, r.tensors);
  write_file_atomically(out.path() / checkpoint::kManifestFile, checkpoint::manifest_text(manifest));
  checkpoint::verify_checkpoint(out.path());  // what load_parameters_path checks before reading
  out.commit();
  return r;
}

namespace {

// The config of the checkpoint's model: the given file, else the manifest's resolved config.
Config checkpoint_config(const TesseraToHfOptions& o, const json& manifest, const fs::path& scratch) {
  if (!o.config_file.empty()) return load_config(o.config_file, o.overrides);
  if (!manifest.is_object() || !manifest.contains("config_yaml") || !manifest["config_yaml"].is_string())
    fail(ErrorKind::kConfig,
         "{}: {} carries no config to read the model from; pass --config CONFIG [key=value ...]",
         o.checkpoint.string(), manifest.is_object() ? "its manifest" : "a bare parameter file");
  // load_config reads files: the manifest's YAML goes through a scratch file, removed afterwards.
  const fs::path tmp = scratch / "checkpoint_config.yml";
  write_file_atomically(tmp, manifest["config_yaml"].get<std::string>());
  Config cfg = load_config(tmp, o.overrides);
  fs::remove(tmp);
  return cfg;
}

// A tensor of the Hugging Face output: its plan and size in the written dtype.
struct HfTensor {
  const HfTensorPlan* plan;
  uint64_t bytes;
};

// transformers' split: tensors in order, a new shard when the next tensor would pass the limit
// (a tensor larger than the limit gets a shard of its own).
std::vector<std::vector<HfTensor>> plan_shards(const std::vector<HfTensor>& tensors, uint64_t max_bytes) {
  std::vector<std::vector<HfTensor>> shards(1);
  uint64_t size = 0;
  for (const HfTensor& t : tensors) {
    if (!shards.back().empty() && size + t.bytes > max_bytes) {
      shards.emplace_back();
      size = 0;
    }
    shards.back().push_back(t);
    size += t.bytes;
  }
  return shards;
}

// True when `source` (a config.json or null) describes `model`.
bool same_model(const json& source, const HfModel& model) {
  if (!source.is_object()) return false;
  try {
    return parse_hf_config(source, "source config") == model;
  } catch (const Error&) {
    return false;
  }
}

}  // namespace

namespace {

// The file must hold exactly the model's parameters, in float32 (what a checkpoint load checks).
void check_params_file(const checkpoint::WholeParameters& file, const std::map<std::string, Shape>& params) {
  for (const auto& [name, shape] : params) {
    if (!file.contains(name))
      fail(ErrorKind::kConfig,
           "{}: has no tensor '{}', a parameter of the configured model (shape {}); is the config that of "
           "another "
           "model?",
           file.path(), name, shape.str());
    const Tensor t = file.get(name);
    if (t.dtype() != DType::kF32)
      fail(ErrorKind::kConfig, "{}: tensor '{}' is {}; Tessera's parameters are float32", file.path(), name,
           dtype_name(t.dtype()));
    if (!(t.shape() == shape))
      fail(ErrorKind::kConfig,
           "{}: tensor '{}' has shape {}, but the configured model needs {} (another model size?)",
           file.path(), name, t.shape().str(), shape.str());
  }
  for (const std::string& name : file.names())
    if (!params.count(name))
      fail(ErrorKind::kConfig, "{}: tensor '{}' is not a parameter of the configured model", file.path(),
           name);
}

// Writes the parameters of `file` into `dir` in Hugging Face's names, layout and `dtype`: one
// model.safetensors, or shards of at most `max_bytes` and their index. One shard is in memory at
// a time. Adds the files and counts to `r`.
void write_hf_weights(const checkpoint::WholeParameters& file, const HfFamily& fam, const ModelSpec& spec,
                      DType dtype, uint64_t max_bytes, const fs::path& dir, ConvertReport& r) {
  const std::map<std::string, Shape> params = model_params(spec);
  check_params_file(file, params);
  const std::vector<HfTensorPlan> plans = hf_tensor_plan(fam, params, spec.num_decoder_layers);
  std::vector<HfTensor> all;
  for (const HfTensorPlan& t : plans)
    all.push_back({&t, static_cast<uint64_t>(t.shape.numel()) * dtype_size(dtype)});
  for (const auto& [name, shape] : params) r.params += shape.numel();
  r.tensors = static_cast<int64_t>(params.size());
  const std::vector<std::vector<HfTensor>> shards = plan_shards(all, max_bytes);
  json weight_map = json::object();
  uint64_t total = 0;
  for (size_t k = 0; k < shards.size(); ++k) {
    const std::string shard_name =
        shards.size() == 1 ? kHfSingle
                           : fmt::format("model-{:05d}-of-{:05d}.safetensors", k + 1, shards.size());
    std::vector<Buffer> storage;
    std::vector<NamedTensor> tensors;
    for (const HfTensor& t : shards[k]) {
      storage.push_back(std::make_unique_for_overwrite<uint8_t[]>(t.bytes));
      const Tensor out(storage.back().get(), t.plan->shape, dtype);
      for (const HfPiece& p : t.plan->pieces) {
        const Tensor whole = file.get(p.tessera);
        tessera_to_hf_piece(p.expert < 0 ? whole : expert_slice(whole, p.expert), p, out);
      }
      tensors.push_back({t.plan->hf, out});
      weight_map[t.plan->hf] = shard_name;
      total += t.bytes;
    }
    // transformers refuses safetensors files without format metadata.
    write_safetensors((dir / shard_name).string(), tensors, {{"format", "pt"}});
    r.files.push_back(shard_name);
  }
  if (shards.size() == 1) return;
  const json index = {{"metadata", {{"total_size", total}, {"total_parameters", r.params}}},
                      {"weight_map", weight_map}};
  write_file_atomically(dir / kHfIndex, index.dump(2) + "\n");
  r.files.push_back(kHfIndex);
}

}  // namespace

ConvertReport convert_tessera_to_hf(const TesseraToHfOptions& o) {
  StagedFolder out(o.out_dir);
  const checkpoint::WholeParameters params(o.checkpoint);  // verifies a folder against its manifest
  const json& manifest = params.manifest();
  const Config cfg = checkpoint_config(o, manifest, out.path());
  ConvertReport r;
  r.out_dir = o.out_dir;
  r.model = hf_model_from_tessera(cfg);
  r.dtype = o.dtype.empty() ? cfg.dtype : o.dtype;
  check_dtype_name(r.dtype, o.dtype.empty() ? "the config's dtype" : "--dtype");
  write_hf_weights(params, *r.model.family, spec_of(cfg), dtype_from_name(r.dtype), o.max_shard_bytes,
                   out.path(), r);
  // A checkpoint converted from Hugging Face keeps its config.json in the manifest, whose token ids
  // and context length carry over while the model is the same.
  json source = manifest.is_object() && manifest.contains("source") && manifest["source"].is_object()
                    ? manifest["source"].value("config", json())
                    : json();
  if (!same_model(source, r.model)) source = json();
  write_file_atomically(out.path() / kHfConfig,
                        hf_config_json(r.model, r.dtype, source, cfg.max_target_length).dump(2) + "\n");
  r.files.push_back(kHfConfig);
  out.commit();
  return r;
}

}  // namespace tessera::convert
