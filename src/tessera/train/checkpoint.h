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
// Async saves: the step loop copies parameters and optimizer state into a host buffer allocated
// once (the stall), and a background thread writes the files while training continues; one save
// is in flight at a time. That writer is a std::thread, not OpenMP work: it does file I/O, not
// compute, and must run across steps while the OpenMP pool runs the kernels. With N ranks the
// thread only writes this rank's files; the manifest and the rename follow in poll(), wait() or
// the next save, which every rank calls after the same step (they are collective then). Left
// out: Orbax/OCDBT, saving bf16 compute copies (they are recomputed from the masters on load).
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "tessera/config/config.h"
#include "tessera/core/arena.h"
#include "tessera/core/safetensors.h"
#include "tessera/dist/mesh.h"
#include "tessera/graph/plan.h"

namespace tessera::train {

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

class Checkpointer {
 public:
  // Saves under checkpoint_root(cfg). With cfg.async_checkpointing the snapshot buffer (this
  // rank's pieces of the parameters and optimizer state) is allocated and pre-faulted here, once.
  // `mesh` (not owned; nullptr: one rank) decides which pieces this rank writes; with more than
  // one rank, restore_latest, save, poll and wait are collective over its world.
  Checkpointer(const Config& cfg, graph::Plan& plan, std::ostream& log, dist::Mesh* mesh = nullptr);
  // Waits for a save in flight; its error, if any, is logged (a destructor does not throw).
  ~Checkpointer();
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  const std::filesystem::path& root() const { return root_; }

  // Removes the *.tmp folders of saves that never finished, then restores the newest checkpoint
  // that verifies, reporting and skipping corrupt ones. nullopt when there is none; kIo when
  // checkpoints exist but none verifies; kConfig when the newest intact one is of another model.
  std::optional<CheckpointInfo> restore_latest();

  // Saves the plan's parameters and optimizer state as checkpoint `step` (completed steps). With
  // `async`, waits for the previous save, copies the state into the snapshot buffer and returns
  // while a background thread writes; else writes before returning. Throws the error of a failed
  // earlier background save.
  void save(int64_t step, const nlohmann::json& data_iterator, bool async);
  // Logs a background save that has finished and rethrows its error; never waits for the write
  // (with N ranks: an all-reduce of one flag, then the manifest once every rank's files are done).
  void poll();
  // Waits for the save in flight (if any), logs it and rethrows its error.
  void wait();

  // One tensor this rank saves: its stored piece and where the async snapshot keeps a copy.
  struct StateTensor {
    std::string name;
    Tensor live;        // the plan's stored piece
    Tensor snapshot;    // its place in the snapshot buffer (async only)
    dist::Piece piece;  // which part of the whole tensor it is
  };

 private:
  struct FileInfo {
    std::string name;
    uint64_t bytes = 0;
    uint32_t crc = 0;
  };
  struct Pending {
    int64_t step = 0;
    double waited = 0, copy = 0;  // the step loop's stall: waiting for the previous save, copying
    double write = 0;             // the background write
    size_t bytes = 0;
    std::vector<int64_t> removed;  // older checkpoints deleted by max_num_checkpoints_to_keep
    std::vector<FileInfo> files;   // this rank's shard files (N ranks), written into <step>.tmp
    nlohmann::json manifest;       // for rank 0's finish (N ranks)
    std::exception_ptr error;
  };
  struct CopyChunk {  // a piece of the snapshot copy, for the threads to share
    char* dst;
    const char* src;
    size_t bytes;
  };
  nlohmann::json manifest_base(int64_t step, const nlohmann::json& data_iterator) const;
  void join_and_report();
  void remove_incomplete();
  int world_size() const;
  // N ranks: joins this rank's writer, then (collectively) rank 0 writes the manifest, renames
  // <step>.tmp and deletes old checkpoints; every rank throws if any rank failed.
  void finish_sharded(Pending& p);
  void report(const Pending& p) const;
  void prepare_sharded(int64_t step, const nlohmann::json& data_iterator, nlohmann::json& manifest);
  void save_now(int64_t step, nlohmann::json manifest);
  std::vector<FileInfo> write_shards(int64_t step, const std::vector<PieceTensor>& params,
                                     const std::vector<PieceTensor>& opt) const;

  Config cfg_;
  graph::Plan& plan_;
  std::ostream& log_;
  dist::Mesh* mesh_ = nullptr;
  std::filesystem::path root_;
  std::string config_yaml_;
  std::vector<StateTensor> params_, opt_state_;
  size_t state_bytes_ = 0;
  Arena snapshot_;
  std::vector<CopyChunk> chunks_;
  std::thread writer_;
  std::atomic<bool> writer_done_{false};
  Pending pending_;
};

}  // namespace tessera::train
