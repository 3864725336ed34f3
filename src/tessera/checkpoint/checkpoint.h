// Checkpoints: the training state on disk, written atomically, verified on load, resumable to the
// bit. docs/checkpoints.md is the user's guide; this is the contract.
//
// Layout, one folder per checkpoint, named by the number of completed optimizer steps (the step
// training continues with):
//   {base_output_directory}/{run_name}/checkpoints/<step>/
//     params.safetensors     f32 master parameters under Tessera's parameter names
//     opt_state.safetensors  AdamW moments <param>.adam_m / <param>.adam_v (absent for SGD)
//     manifest.json          format version, step, the resolved config as YAML, the data
//                            iterator's state, the mesh, and each file's size and CRC32C
//
// A job of N > 1 ranks writes sharded files instead: params.<r>-of-<N>.safetensors and
// opt_state.<r>-of-<N>.safetensors from each world rank r that holds a piece no lower rank holds
// (a piece held by several ranks, e.g. under data parallelism, is written once). Every tensor in
// them is a piece of the whole: its metadata entry "piece:<name>" says "offset=a,b whole=c,d".
// All ranks write at once into <step>.tmp/; then rank 0, holding every file's size and CRC32C,
// writes the manifest and renames the folder. Restoring reads, for each of this rank's pieces,
// whatever stored pieces overlap it, so a checkpoint restores on any mesh (any number of ranks,
// any fsdp / data split, ZeRO-1 or not) and a one-rank checkpoint is the plain layout above.
//
// Atomicity: a save writes into <step>.tmp/, fsyncs every file and the folder, renames it to
// <step>/ and fsyncs the parent, so a folder with a step number for a name is complete; a crash
// leaves at most a *.tmp folder, which the next run removes. Integrity: loading checks every
// file's size and CRC32C against the manifest before reading a tensor; a truncated or corrupt
// checkpoint is an Error(kIo) naming the file. A checkpoint of another model (a tensor missing,
// extra or of another shape) is an Error(kConfig) naming the file and the tensor.
//
// Left out: Orbax/OCDBT, saving bf16 compute copies (they are recomputed from the masters on load).
// Async saves and the collective finish of sharded saves are the trainer's (train/checkpointer.h).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tessera/config/config.h"
#include "tessera/core/arena.h"
#include "tessera/core/safetensors.h"
#include "tessera/dist/mesh.h"
#include "tessera/graph/plan.h"

namespace tessera::checkpoint {

inline constexpr int kCheckpointFormatVersion = 1;
inline constexpr const char* kParamsFile = "params.safetensors";
inline constexpr const char* kOptStateFile = "opt_state.safetensors";
inline constexpr const char* kManifestFile = "manifest.json";

enum class RestoreKind {
  kParams,     // parameters only (load_parameters_path): optimizer state stays fresh, step 0
  kFullState,  // parameters, optimizer state and step (resume, load_full_state_path)
};

struct CheckpointInfo {
  std::filesystem::path path;    // the folder (or, for a bare parameter file, the file)
  int64_t step = 0;              // completed optimizer steps; 0 for kParams
  nlohmann::json data_iterator;  // the data pipeline's state at `step` (null for kParams)
  // With more than one data x fsdp reader: every reader's state, by reader index (else null).
  nlohmann::json data_iterators;
};

// {base_output_directory}/{run_name}/checkpoints
std::filesystem::path checkpoint_root(const Config& cfg);

// The complete checkpoints under `root` (folders named by a step number), oldest first; empty
// when `root` does not exist.
std::vector<int64_t> list_checkpoints(const std::filesystem::path& root);

// Reads `dir`/manifest.json and checks the size and CRC32C of every file it lists; returns the
// manifest. Throws kIo naming the file and what is wrong.
nlohmann::json verify_checkpoint(const std::filesystem::path& dir);

// Verifies and loads a checkpoint into `plan`, then refreshes the compute copies. `path` is a
// checkpoint folder; for kParams it may also be a bare safetensors file of parameters (e.g. a
// converted one), which has no manifest to check against. Throws kIo (missing, truncated, corrupt)
// or kConfig (a checkpoint of another model or optimizer).
CheckpointInfo restore_checkpoint(graph::Plan& plan, const std::filesystem::path& path, RestoreKind kind);

// A tensor of a checkpoint file and the part of the whole tensor it holds.
struct PieceTensor {
  NamedTensor tensor;
  dist::Piece piece;
};

// A checkpoint's parameters as whole tensors, for the tools that need the whole model (decode,
// serve, convert). `path` is a checkpoint folder (verified first) or a bare safetensors file of
// parameters. A one-file checkpoint is read in place from its mapping; the per-rank piece files of
// a job of several ranks are assembled into whole f32 tensors in memory, after checking that the
// pieces of each tensor agree on its shape and cover it. The interface follows SafetensorsFile's.
class WholeParameters {
 public:
  explicit WholeParameters(const std::filesystem::path& path);
  WholeParameters(const WholeParameters&) = delete;
  WholeParameters& operator=(const WholeParameters&) = delete;

  bool contains(const std::string& name) const { return tensors_.count(name) > 0; }
  Tensor get(const std::string& name) const;  // throws kIo naming the checkpoint when absent
  std::vector<std::string> names() const;
  const std::string& path() const { return path_; }  // for messages: the file, or the folder
  // The folder's verified manifest.json; null for a bare parameter file.
  const nlohmann::json& manifest() const { return manifest_; }

 private:
  std::string path_;
  nlohmann::json manifest_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, Tensor> tensors_;
  std::vector<std::vector<float>> assembled_;  // storage of the tensors put together from pieces
};

// ---- Writing (used by train/checkpointer.h) ----

// Writes `tensors` as one safetensors file with each piece in its metadata (when it is not whole).
void write_pieces(const std::filesystem::path& path, const std::vector<PieceTensor>& tensors, int64_t step);
// Creates `root`/<step>.tmp/ afresh (and `root` when missing); returns it.
std::filesystem::path make_tmp_dir(const std::filesystem::path& root, int64_t step);
// Writes the manifest (with every file's size and CRC32C) into `root`/<step>.tmp, renames it to
// <step>/ and deletes the oldest complete checkpoints beyond `keep` (-1: keep all); returns the
// deleted steps.
std::vector<int64_t> publish(const std::filesystem::path& root, int64_t step, nlohmann::json manifest,
                             const nlohmann::json& files, int64_t keep);
// The manifest as written: its JSON with `manifest_crc32c`, the CRC32C of the manifest's compact
// dump without that key, so that an edit of the step or the data-iterator position is caught on
// restore as the data files' edits are.
std::string manifest_text(nlohmann::json manifest);
// A manifest's entry for one file: its size and CRC32C.
nlohmann::json file_entry(uint64_t bytes, uint32_t crc);
// The one-rank checkpoint: params.safetensors and opt_state.safetensors, then publish().
std::vector<int64_t> write_checkpoint(const std::filesystem::path& root, int64_t step,
                                      const std::vector<PieceTensor>& params,
                                      const std::vector<PieceTensor>& opt_state, nlohmann::json manifest,
                                      int64_t keep);

}  // namespace tessera::checkpoint
