// The trainer's checkpoint glue (checkpointer.h): snapshots, the background writer, the
// collective finish of sharded saves. The format itself is checkpoint/checkpoint.h.
#include "tessera/train/checkpointer.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "tessera/core/crc32c.h"
#include "tessera/core/error.h"
#include "tessera/core/file.h"
#include "tessera/models/init.h"
#include "tessera/train/diagnostics.h"

namespace tessera::train {

using namespace tessera::checkpoint;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double mib(size_t bytes) {
  return static_cast<double>(bytes) / (1024.0 * 1024.0);
}

// Which pieces this rank writes: a piece held by several ranks is written by the one with
// coordinate 0 on every axis along which the holders differ.
bool writes_piece(const dist::Mesh* mesh, const graph::ParamLayout& L, bool opt) {
  if (!mesh) return true;
  const bool data_split = opt && L.opt_parts > 1;
  return (data_split || mesh->coord(MeshAxis::kData) == 0) &&
         (L.sharded() || mesh->coord(MeshAxis::kFsdp) == 0) &&
         (L.tensor_parts > 1 || mesh->coord(MeshAxis::kTensor) == 0) &&
         (L.expert_parts > 1 || mesh->coord(MeshAxis::kExpert) == 0);
}

std::string shard_name(const char* prefix, int rank, int n) {
  return fmt::format("{}.{:05d}-of-{:05d}.safetensors", prefix, rank, n);
}

}  // namespace

Checkpointer::Checkpointer(const Config& cfg, graph::Plan& plan, std::ostream& log, dist::Mesh* mesh)
    : cfg_(cfg),
      plan_(plan),
      log_(log),
      mesh_(mesh),
      root_(checkpoint_root(cfg)),
      config_yaml_(config_to_yaml(cfg)) {
  const auto& values = plan.graph().values();
  size_t capacity = 0;
  for (size_t id = 0; id < values.size(); ++id) {
    const graph::Value& v = values[id];
    if (v.kind != graph::ValueKind::kParam && v.kind != graph::ValueKind::kOptState) continue;
    const bool opt = v.kind == graph::ValueKind::kOptState;
    const graph::ParamLayout& L = plan.layout(static_cast<graph::ValueId>(id));
    if (!writes_piece(mesh_, L, opt)) continue;
    auto& list = opt ? opt_state_ : params_;
    const Tensor& live = plan.state(static_cast<graph::ValueId>(id));
    list.push_back({v.name, live, Tensor(), opt ? L.opt : L.stored});
    state_bytes_ += live.nbytes();
    capacity += aligned_bytes(live.shape(), live.dtype());
  }
  if (!cfg.async_checkpointing) return;
  const auto t0 = Clock::now();
  snapshot_ = Arena(capacity, "checkpoint snapshot");
  // 4 MiB pieces: enough of them for every thread to get work on a 100M-parameter model, each
  // large enough that the loop overhead vanishes against the copy.
  constexpr size_t kChunk = size_t{4} << 20;
  for (auto* list : {&params_, &opt_state_})
    for (StateTensor& st : *list) {
      st.snapshot = snapshot_.tensor(st.live.shape(), st.live.dtype());
      for (size_t off = 0; off < st.live.nbytes(); off += kChunk)
        chunks_.push_back({st.snapshot.ptr<char>() + off, st.live.ptr<char>() + off,
                           std::min(kChunk, st.live.nbytes() - off)});
    }
  log_ << fmt::format(
      "checkpoints: snapshot buffer for async saves {:.1f} MiB{}, allocated and faulted in {:.3f} s\n",
      mib(state_bytes_), world_size() > 1 ? " (this rank's pieces)" : "", since(t0));
}

int Checkpointer::world_size() const {
  return mesh_ ? static_cast<int>(mesh_->num_devices()) : 1;
}

Checkpointer::~Checkpointer() {
  if (!writer_.joinable()) return;
  if (world_size() > 1) {  // the collective finish needs every rank: a destructor cannot ask for that
    writer_.join();
    return;
  }
  try {
    join_and_report();
  } catch (const std::exception& e) {
    log_ << "tessera: error: " << e.what() << "\n" << std::flush;
  }
}

void Checkpointer::remove_incomplete() {
  std::error_code ec;
  if (!fs::is_directory(root_, ec)) return;
  std::vector<fs::path> stale;
  for (const fs::directory_entry& e : fs::directory_iterator(root_, ec))
    if (e.is_directory(ec) && e.path().filename().string().ends_with(".tmp")) stale.push_back(e.path());
  for (const fs::path& p : stale) {
    fs::remove_all(p, ec);
    if (ec) fail(ErrorKind::kIo, "cannot remove the incomplete checkpoint {}: {}", p.string(), ec.message());
    log_ << fmt::format("checkpoints: removed {} (a save that did not finish)\n", p.string());
  }
}

std::optional<CheckpointInfo> Checkpointer::restore_latest() {
  if (!mesh_ || mesh_->world().rank() == 0) remove_incomplete();
  if (mesh_) mesh_->world().barrier();
  const std::vector<int64_t> steps = list_checkpoints(root_);
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    const fs::path dir = root_ / std::to_string(*it);
    try {
      CheckpointInfo info = restore_checkpoint(plan_, dir, RestoreKind::kFullState);
      if (info.step != *it)
        fail(ErrorKind::kIo, "{}: the manifest says step {}, the folder name {}",
             (dir / kManifestFile).string(), info.step, *it);
      return info;
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kIo) throw;  // another model: never fall back silently
      log_ << fmt::format("checkpoints: skipping checkpoint {}: {}\n", *it, e.what());
    }
  }
  if (!steps.empty())
    fail(ErrorKind::kIo,
         "none of the {} checkpoints under {} verifies (see the messages above); move the folder away to "
         "start the "
         "run afresh",
         steps.size(), root_.string());
  return std::nullopt;
}

nlohmann::json Checkpointer::manifest_base(int64_t step, const nlohmann::json& data_iterator) const {
  nlohmann::json ici = nlohmann::json::object(), dcn = nlohmann::json::object();
  for (int i = 0; i < kNumMeshAxes; ++i) {
    ici[std::string(kMeshAxes[i].axis)] = cfg_.ici_parallelism[i];
    dcn[std::string(kMeshAxes[i].axis)] = cfg_.dcn_parallelism[i];
  }
  nlohmann::json m;
  m["format"] = "tessera-checkpoint";
  m["format_version"] = kCheckpointFormatVersion;
  m["step"] = step;
  m["saved_unix_time"] =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  m["model"] = {{"decoder_block", cfg_.decoder_block},
                {"num_params", plan_.num_params()},
                {"num_param_tensors", params_.size()},
                {"weight_dtype", cfg_.weight_dtype},
                {"dtype", cfg_.dtype}};
  m["optimizer"] = cfg_.opt_type;
  m["data_iterator"] = data_iterator;
  m["rng"] = nullptr;  // the step loop draws no random numbers (no dropout); see docs/checkpoints.md
  m["mesh"] = {
      {"num_devices", cfg_.num_devices}, {"num_slices", cfg_.num_slices}, {"ici", ici}, {"dcn", dcn}};
  m["config_yaml"] = config_yaml_;
  return m;
}

namespace {
std::vector<PieceTensor> named(const std::vector<Checkpointer::StateTensor>& list, bool snapshot) {
  std::vector<PieceTensor> out;
  for (const auto& st : list) out.push_back({{st.name, snapshot ? st.snapshot : st.live}, st.piece});
  return out;
}
}  // namespace

// N ranks: every reader's data iterator state (by reader index: its rank in the data x fsdp
// group) joins the manifest, and rank 0 makes <step>.tmp for all.
void Checkpointer::prepare_sharded(int64_t step, const nlohmann::json& data_iterator,
                                   nlohmann::json& manifest) {
  const std::vector<std::string> states =
      dist::all_gather_strings(dist::batch_group(*mesh_), data_iterator.dump());
  nlohmann::json all = nlohmann::json::array();
  for (const std::string& st : states) all.push_back(nlohmann::json::parse(st));
  manifest["data_iterators"] = all;
  manifest["shards"] = world_size();
  if (mesh_->world().rank() == 0) make_tmp_dir(root_, step);
  mesh_->world().barrier();  // the folder exists for every rank
}

void Checkpointer::save_now(int64_t step, nlohmann::json manifest) {
  const auto t1 = Clock::now();
  Pending p;
  p.step = step;
  p.bytes = state_bytes_;
  if (world_size() == 1) {
    p.removed = write_checkpoint(root_, step, named(params_, false), named(opt_state_, false),
                                 std::move(manifest), cfg_.max_num_checkpoints_to_keep);
  } else {
    p.manifest = std::move(manifest);
    try {
      p.files = write_shards(step, named(params_, false), named(opt_state_, false));
    } catch (const std::exception&) {
      p.error = std::current_exception();
    }
    finish_sharded(p);
  }
  log_ << fmt::format(
      "checkpoint {}: saved to {} in {:.3f} s ({:.1f} MiB{}, synchronous: the step loop waited)\n", step,
      (root_ / std::to_string(step)).string(), since(t1), mib(state_bytes_),
      world_size() > 1 ? " on this rank" : "");
  if (!p.removed.empty())
    log_ << fmt::format("checkpoints: deleted {} (max_num_checkpoints_to_keep={})\n",
                        fmt::join(p.removed, ", "), cfg_.max_num_checkpoints_to_keep);
  log_ << std::flush;
}

void Checkpointer::save(int64_t step, const nlohmann::json& data_iterator, bool async) {
  const auto t0 = Clock::now();
  join_and_report();  // one save in flight at a time
  const double waited = since(t0);
  nlohmann::json manifest = manifest_base(step, data_iterator);
  const int n = world_size();
  if (n > 1) prepare_sharded(step, data_iterator, manifest);
  if (!async) return save_now(step, std::move(manifest));
  TESSERA_ASSERT(snapshot_.base() != nullptr || chunks_.empty());
  const auto t1 = Clock::now();
  const int64_t nchunks = static_cast<int64_t>(chunks_.size());
#pragma omp parallel for schedule(dynamic, 1) if (nchunks > 1)
  for (int64_t i = 0; i < nchunks; ++i) std::memcpy(chunks_[i].dst, chunks_[i].src, chunks_[i].bytes);
  pending_ = Pending{};
  pending_.step = step;
  pending_.waited = waited;
  pending_.copy = since(t1);
  pending_.bytes = state_bytes_;
  if (n > 1) pending_.manifest = manifest;
  writer_done_.store(false, std::memory_order_relaxed);
  writer_ = std::thread([this, n, params = named(params_, true), opt = named(opt_state_, true),
                         manifest = std::move(manifest)]() mutable {
    Diagnostics::Scope trace_span(Diagnostics::current(), Region::kCheckpointWrite);
    const auto t = Clock::now();
    try {
      if (n == 1)
        pending_.removed = write_checkpoint(root_, pending_.step, params, opt, std::move(manifest),
                                            cfg_.max_num_checkpoints_to_keep);
      else
        pending_.files = write_shards(pending_.step, params, opt);
    } catch (const Error& e) {
      pending_.error = std::make_exception_ptr(
          Error(e.kind(), fmt::format("checkpoint {} (background save): {}", pending_.step, e.what())));
    } catch (const std::exception& e) {
      pending_.error = std::make_exception_ptr(
          Error(ErrorKind::kIo, fmt::format("checkpoint {} (background save): {}", pending_.step, e.what())));
    }
    pending_.write = since(t);
    writer_done_.store(true, std::memory_order_release);
  });
}

// This rank's shard files in <step>.tmp (N ranks): no file when it writes no piece of a kind.
std::vector<Checkpointer::FileInfo> Checkpointer::write_shards(int64_t step,
                                                               const std::vector<PieceTensor>& params,
                                                               const std::vector<PieceTensor>& opt) const {
  const fs::path tmp = root_ / (std::to_string(step) + ".tmp");
  const int rank = mesh_->world().rank(), n = world_size();
  std::vector<FileInfo> files;
  for (const auto& [prefix, list] : {std::pair{"params", &params}, std::pair{"opt_state", &opt}}) {
    if (list->empty()) continue;
    FileInfo f{.name = shard_name(prefix, rank, n)};
    write_pieces(tmp / f.name, *list, step);
    f.crc = crc32c_file((tmp / f.name).string(), &f.bytes);
    files.push_back(f);
  }
  return files;
}

void Checkpointer::finish_sharded(Pending& p) {
  if (writer_.joinable()) writer_.join();
  dist::Communicator& world = mesh_->world();
  double failed = p.error ? 1 : 0;
  world.all_reduce_f64(&failed, 1, dist::ReduceOp::kMax);
  if (failed > 0) {
    if (p.error) std::rethrow_exception(p.error);
    fail(ErrorKind::kIo, "checkpoint {}: another rank failed to write its shard files (see its error)",
         p.step);
  }
  // Every rank's files as (kind, bytes, crc) records: kind 0 params, 1 opt_state, -1 none.
  std::vector<int64_t> mine(6, -1), all(6 * static_cast<size_t>(world.size()));
  for (const FileInfo& f : p.files) {
    const size_t at = f.name.starts_with("params") ? 0 : 3;
    mine[at] = at == 0 ? 0 : 1;
    mine[at + 1] = static_cast<int64_t>(f.bytes);
    mine[at + 2] = f.crc;
  }
  world.all_gather(mine.data(), all.data(), mine.size(), DType::kI64);
  int32_t ok = 1;
  std::string error;
  if (world.rank() == 0) {
    try {
      nlohmann::json files = nlohmann::json::object();
      for (int r = 0; r < world.size(); ++r)
        for (size_t at : {size_t{0}, size_t{3}}) {
          const int64_t* rec = all.data() + 6 * static_cast<size_t>(r) + at;
          if (rec[0] < 0) continue;
          files[shard_name(rec[0] == 0 ? "params" : "opt_state", r, world.size())] =
              file_entry(static_cast<uint64_t>(rec[1]), static_cast<uint32_t>(rec[2]));
        }
      p.removed = publish(root_, p.step, std::move(p.manifest), files, cfg_.max_num_checkpoints_to_keep);
    } catch (const std::exception& e) {
      ok = 0;
      error = e.what();
    }
  }
  world.broadcast(&ok, 1, DType::kI32, 0);
  if (!ok)
    fail(ErrorKind::kIo, "checkpoint {}: {}", p.step,
         world.rank() == 0 ? error : std::string("rank 0 could not write the manifest (see its error)"));
}

void Checkpointer::report(const Pending& p) const {
  log_ << fmt::format(
      "checkpoint {}: saved to {}; the step loop stalled {:.3f} s (snapshot copy of {:.1f} MiB {:.3f} s, "
      "waiting for the previous save {:.3f} s), background write {:.3f} s\n",
      p.step, (root_ / std::to_string(p.step)).string(), p.waited + p.copy, mib(p.bytes), p.copy, p.waited,
      p.write);
  if (!p.removed.empty())
    log_ << fmt::format("checkpoints: deleted {} (max_num_checkpoints_to_keep={})\n",
                        fmt::join(p.removed, ", "), cfg_.max_num_checkpoints_to_keep);
  log_ << std::flush;
}

void Checkpointer::join_and_report() {
  if (!writer_.joinable()) return;
  if (world_size() > 1) {
    finish_sharded(pending_);
  } else {
    writer_.join();
    if (pending_.error) {
      std::exception_ptr e = pending_.error;
      pending_ = Pending{};
      std::rethrow_exception(e);
    }
  }
  Pending p = std::move(pending_);
  pending_ = Pending{};
  report(p);
}

// With N ranks, whether every rank's writer is done is agreed on (collectively) before finishing.
void Checkpointer::poll() {
  if (!writer_.joinable()) return;
  double busy = writer_done_.load(std::memory_order_acquire) ? 0 : 1;
  if (world_size() > 1) mesh_->world().all_reduce_f64(&busy, 1, dist::ReduceOp::kMax);
  if (busy == 0) join_and_report();
}

void Checkpointer::wait() {
  join_and_report();
}

}  // namespace tessera::train
