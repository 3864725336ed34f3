// Checkpointer: the trainer's side of checkpoints (the format, verification and restore are
// checkpoint/checkpoint.h, whose header comment is the contract).
//
// Async saves: the step loop copies parameters and optimizer state into a host buffer allocated
// once (the stall), and a background thread writes the files while training continues; one save
// is in flight at a time. That writer is a std::thread, not OpenMP work: it does file I/O, not
// compute, and must run across steps while the OpenMP pool runs the kernels. With N ranks the
// thread only writes this rank's files; the manifest and the rename follow in poll(), wait() or
// the next save, which every rank calls after the same step (they are collective then). Left
// out: Orbax/OCDBT.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "tessera/checkpoint/checkpoint.h"
#include "tessera/config/config.h"
#include "tessera/core/arena.h"
#include "tessera/dist/mesh.h"
#include "tessera/graph/plan.h"

namespace tessera::train {

using checkpoint::CheckpointInfo;
using checkpoint::PieceTensor;

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
