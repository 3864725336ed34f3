#include "tessera/train/checkpoint.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <set>

#include "tessera/core/error.h"
#include "tessera/core/safetensors.h"
#include "tessera/models/init.h"
#include "tessera/core/crc32c.h"

namespace tessera::train {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}
double mib(size_t bytes) {
  return static_cast<double>(bytes) / (1024.0 * 1024.0);
}

void check_ec(const std::error_code& ec, const std::string& what) {
  if (ec) fail(ErrorKind::kIo, "{}: {}", what, ec.message());
}

// fsync of a file or a folder (a folder's fsync makes the names in it durable: the renames).
void fsync_path(const fs::path& p) {
  int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(ErrorKind::kIo, "{}: cannot open to fsync: {}", p.string(), std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) fail(ErrorKind::kIo, "{}: fsync failed: {}", p.string(), std::strerror(err));
}

void write_file_synced(const fs::path& p, const std::string& text) {
  int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(ErrorKind::kIo, "{}: cannot create: {}", p.string(), std::strerror(errno));
  size_t done = 0;
  while (done < text.size()) {
    ssize_t w = ::write(fd, text.data() + done, text.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int err = errno;
      ::close(fd);
      fail(ErrorKind::kIo, "{}: write failed: {}", p.string(), std::strerror(err));
    }
    done += static_cast<size_t>(w);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0)
    fail(ErrorKind::kIo, "{}: fsync/close failed: {}", p.string(), std::strerror(errno));
}

// A checkpoint folder's name: decimal digits without a leading zero (what std::to_string writes).
bool parse_step(const std::string& name, int64_t* step) {
  if (name.empty() || name.size() > 18 || (name.size() > 1 && name[0] == '0')) return false;
  if (!std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; })) return false;
  *step = std::stoll(name);
  return true;
}

std::string crc_hex(uint32_t crc) {
  return fmt::format("{:08x}", crc);
}

// Writes checkpoint `step` under `root` (see checkpoint.h for the protocol) and deletes the
// oldest complete checkpoints beyond `keep` (-1: keep all); returns the deleted steps.
std::vector<int64_t> write_checkpoint(const fs::path& root, int64_t step,
                                      const std::vector<NamedTensor>& params,
                                      const std::vector<NamedTensor>& opt_state, nlohmann::json manifest,
                                      int64_t keep) {
  std::error_code ec;
  if (!fs::is_directory(root)) {
    fs::create_directories(root, ec);
    check_ec(ec, "cannot create the checkpoint folder " + root.string());
    fsync_path(root.parent_path().empty() ? fs::path(".") : root.parent_path());
  }
  const fs::path final_dir = root / std::to_string(step), tmp = root / (std::to_string(step) + ".tmp");
  fs::remove_all(tmp, ec);
  fs::create_directory(tmp, ec);
  check_ec(ec, "cannot create " + tmp.string());

  const std::map<std::string, std::string> meta = {{"format", "tessera"}, {"step", std::to_string(step)}};
  write_safetensors((tmp / kParamsFile).string(), params, meta);
  if (!opt_state.empty()) write_safetensors((tmp / kOptStateFile).string(), opt_state, meta);
  nlohmann::json files = nlohmann::json::object();
  std::vector<const char*> written = {kParamsFile};
  if (!opt_state.empty()) written.push_back(kOptStateFile);
  for (const char* name : written) {
    uint64_t bytes = 0;
    const uint32_t crc = crc32c_file((tmp / name).string(), &bytes);
    files[name] = {{"bytes", bytes}, {"crc32c", crc_hex(crc)}};
  }
  manifest["files"] = files;
  write_file_synced(tmp / kManifestFile, manifest.dump(2) + "\n");
  fsync_path(tmp);

  // rename(2) does not replace a non-empty folder: an existing <step>/ (one a resume skipped as
  // corrupt) is first moved aside under a *.tmp name, which the next start-up would clean.
  if (fs::exists(final_dir)) {
    const fs::path aside = root / (std::to_string(step) + ".replaced.tmp");
    fs::remove_all(aside, ec);
    fs::rename(final_dir, aside, ec);
    check_ec(ec, "cannot move the old " + final_dir.string() + " aside");
    fs::rename(tmp, final_dir, ec);
    check_ec(ec, "cannot rename " + tmp.string() + " to " + final_dir.string());
    fsync_path(root);
    fs::remove_all(aside, ec);
  } else {
    fs::rename(tmp, final_dir, ec);
    check_ec(ec, "cannot rename " + tmp.string() + " to " + final_dir.string());
    fsync_path(root);
  }

  std::vector<int64_t> removed;
  if (keep > 0) {
    std::vector<int64_t> all = list_checkpoints(root);
    for (size_t i = 0; i + static_cast<size_t>(keep) < all.size(); ++i) {
      fs::remove_all(root / std::to_string(all[i]), ec);
      check_ec(ec,
               fmt::format("cannot delete the old checkpoint {}", (root / std::to_string(all[i])).string()));
      removed.push_back(all[i]);
    }
  }
  return removed;
}

// Copies every `kind` tensor of the plan from `file` after checking that the file holds exactly
// this model's tensors (names, f32, shapes); nothing is copied when a check fails.
void load_tensors(graph::Plan& plan, const SafetensorsFile& file, graph::ValueKind kind) {
  const char* what = kind == graph::ValueKind::kParam ? "a parameter" : "an optimizer state tensor";
  const auto& values = plan.graph().values();
  std::vector<std::pair<graph::ValueId, Tensor>> copies;
  std::set<std::string> names;
  for (size_t id = 0; id < values.size(); ++id) {
    const graph::Value& v = values[id];
    if (v.kind != kind) continue;
    names.insert(v.name);
    if (!file.contains(v.name))
      fail(ErrorKind::kConfig,
           "{}: has no tensor '{}', {} of this model (shape {}); the file holds {} tensors: is it a "
           "checkpoint "
           "of another model or optimizer?",
           file.path(), v.name, what, v.shape.str(), file.names().size());
    Tensor t = file.get(v.name);
    if (t.dtype() != DType::kF32)
      fail(ErrorKind::kConfig, "{}: tensor '{}' is {} in the file; Tessera keeps it in float32", file.path(),
           v.name, dtype_name(t.dtype()));
    if (!(t.shape() == v.shape))
      fail(ErrorKind::kConfig,
           "{}: tensor '{}' has shape {} in the file but {} in this model (another model size?)", file.path(),
           v.name, t.shape().str(), v.shape.str());
    copies.emplace_back(static_cast<graph::ValueId>(id), t);
  }
  for (const std::string& n : file.names())
    if (!names.count(n))
      fail(ErrorKind::kConfig,
           "{}: tensor '{}' is not {} of this model (a checkpoint of another model or optimizer?)",
           file.path(), n, what);
  for (const auto& [id, t] : copies) std::memcpy(plan.view(id).data(), t.data(), t.nbytes());
}

bool plan_has(const graph::Plan& plan, graph::ValueKind kind) {
  const auto& values = plan.graph().values();
  return std::any_of(values.begin(), values.end(), [&](const graph::Value& v) { return v.kind == kind; });
}

}  // namespace

fs::path checkpoint_root(const Config& cfg) {
  return fs::path(cfg.base_output_directory) / cfg.run_name / "checkpoints";
}

std::vector<int64_t> list_checkpoints(const fs::path& root) {
  std::vector<int64_t> steps;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return steps;
  for (const fs::directory_entry& e : fs::directory_iterator(root, ec)) {
    int64_t s;
    if (e.is_directory(ec) && parse_step(e.path().filename().string(), &s)) steps.push_back(s);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

nlohmann::json verify_checkpoint(const fs::path& dir) {
  const fs::path mpath = dir / kManifestFile;
  if (!fs::is_regular_file(mpath))
    fail(ErrorKind::kIo, "{}: missing (not a Tessera checkpoint folder, or an incomplete one)",
         mpath.string());
  nlohmann::json m;
  try {
    std::string text;
    {
      std::FILE* f = std::fopen(mpath.c_str(), "rb");
      if (!f) fail(ErrorKind::kIo, "{}: cannot open: {}", mpath.string(), std::strerror(errno));
      char buf[65536];
      for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, n);
      std::fclose(f);
    }
    m = nlohmann::json::parse(text);
    if (m.value("format", "") != "tessera-checkpoint")
      fail(ErrorKind::kIo, "{}: not a Tessera checkpoint manifest (no \"format\": \"tessera-checkpoint\")",
           mpath.string());
    const int version = m.at("format_version").get<int>();
    if (version > kCheckpointFormatVersion)
      fail(ErrorKind::kIo, "{}: format_version {} is newer than this build reads ({})", mpath.string(),
           version, kCheckpointFormatVersion);
    const nlohmann::json& files = m.at("files");
    if (!files.contains(kParamsFile)) fail(ErrorKind::kIo, "{}: lists no {}", mpath.string(), kParamsFile);
    for (const auto& [name, e] : files.items()) {
      if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
        fail(ErrorKind::kIo, "{}: lists '{}', which is not a file name in the checkpoint folder",
             mpath.string(), name);
      const fs::path p = dir / name;
      if (!fs::is_regular_file(p))
        fail(ErrorKind::kIo, "{}: missing (listed in {})", p.string(), kManifestFile);
      uint64_t bytes = 0;
      const std::string crc = crc_hex(crc32c_file(p.string(), &bytes));
      const uint64_t want = e.at("bytes").get<uint64_t>();
      if (bytes != want)
        fail(ErrorKind::kIo, "{}: {} bytes, but the manifest says {} (truncated or overwritten)", p.string(),
             bytes, want);
      if (crc != e.at("crc32c").get<std::string>())
        fail(ErrorKind::kIo, "{}: CRC32C {} does not match the manifest's {} (the file is corrupt)",
             p.string(), crc, e.at("crc32c").get<std::string>());
    }
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorKind::kIo, "{}: {}", mpath.string(), e.what());
  }
  return m;
}

CheckpointInfo restore_checkpoint(graph::Plan& plan, const fs::path& path, RestoreKind kind) {
  CheckpointInfo info;
  info.path = path;
  if (kind == RestoreKind::kParams && fs::is_regular_file(path)) {
    SafetensorsFile file(path.string());
    load_tensors(plan, file, graph::ValueKind::kParam);
    models::sync_compute_copies(plan);
    return info;
  }
  if (!fs::is_directory(path))
    fail(ErrorKind::kIo, "{}: no such checkpoint folder{}", path.string(),
         kind == RestoreKind::kParams ? " or parameter file" : "");
  const nlohmann::json m = verify_checkpoint(path);
  {
    SafetensorsFile params((path / kParamsFile).string());
    load_tensors(plan, params, graph::ValueKind::kParam);
  }
  if (kind == RestoreKind::kFullState) {
    if (m.at("files").contains(kOptStateFile)) {
      SafetensorsFile opt((path / kOptStateFile).string());
      load_tensors(plan, opt, graph::ValueKind::kOptState);
    } else if (plan_has(plan, graph::ValueKind::kOptState)) {
      fail(ErrorKind::kConfig,
           "{}: has no optimizer state ({} is absent; saved with optimizer '{}'), which this run's optimizer "
           "needs; "
           "to start from its parameters only, use load_parameters_path",
           path.string(), kOptStateFile, m.value("optimizer", "?"));
    }
    try {
      info.step = m.at("step").get<int64_t>();
      info.data_iterator = m.value("data_iterator", nlohmann::json());
    } catch (const nlohmann::json::exception& e) {
      fail(ErrorKind::kIo, "{}: {}", (path / kManifestFile).string(), e.what());
    }
  }
  models::sync_compute_copies(plan);
  return info;
}

Checkpointer::Checkpointer(const Config& cfg, graph::Plan& plan, std::ostream& log)
    : cfg_(cfg), plan_(plan), log_(log), root_(checkpoint_root(cfg)), config_yaml_(config_to_yaml(cfg)) {
  const auto& values = plan.graph().values();
  size_t capacity = 0;
  for (size_t id = 0; id < values.size(); ++id) {
    const graph::Value& v = values[id];
    if (v.kind != graph::ValueKind::kParam && v.kind != graph::ValueKind::kOptState) continue;
    auto& list = v.kind == graph::ValueKind::kParam ? params_ : opt_state_;
    list.push_back({v.name, plan.view(static_cast<graph::ValueId>(id)), Tensor()});
    state_bytes_ += list.back().live.nbytes();
    capacity += aligned_bytes(v.shape, v.dtype);
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
      "checkpoints: snapshot buffer for async saves {:.1f} MiB, allocated and faulted in {:.3f} s\n",
      mib(state_bytes_), since(t0));
}

Checkpointer::~Checkpointer() {
  if (!writer_.joinable()) return;
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
    check_ec(ec, "cannot remove the incomplete checkpoint " + p.string());
    log_ << fmt::format("checkpoints: removed {} (a save that did not finish)\n", p.string());
  }
}

std::optional<CheckpointInfo> Checkpointer::restore_latest() {
  remove_incomplete();
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

void Checkpointer::save(int64_t step, const nlohmann::json& data_iterator, bool async) {
  const auto t0 = Clock::now();
  join_and_report();  // one save in flight at a time
  const double waited = since(t0);
  nlohmann::json manifest = manifest_base(step, data_iterator);
  auto named = [](const std::vector<StateTensor>& list, bool snapshot) {
    std::vector<NamedTensor> out;
    for (const StateTensor& st : list) out.push_back({st.name, snapshot ? st.snapshot : st.live});
    return out;
  };
  const fs::path dir = root_ / std::to_string(step);
  if (!async) {
    const auto t1 = Clock::now();
    std::vector<int64_t> removed =
        write_checkpoint(root_, step, named(params_, false), named(opt_state_, false), std::move(manifest),
                         cfg_.max_num_checkpoints_to_keep);
    log_ << fmt::format(
        "checkpoint {}: saved to {} in {:.3f} s ({:.1f} MiB, synchronous: the step loop waited)\n", step,
        dir.string(), since(t1), mib(state_bytes_));
    if (!removed.empty())
      log_ << fmt::format("checkpoints: deleted {} (max_num_checkpoints_to_keep={})\n",
                          fmt::join(removed, ", "), cfg_.max_num_checkpoints_to_keep);
    log_ << std::flush;
    return;
  }
  TESSERA_ASSERT(snapshot_.base() != nullptr);
  const auto t1 = Clock::now();
  const int64_t n = static_cast<int64_t>(chunks_.size());
#pragma omp parallel for schedule(dynamic, 1) if (n > 1)
  for (int64_t i = 0; i < n; ++i) std::memcpy(chunks_[i].dst, chunks_[i].src, chunks_[i].bytes);
  pending_ = Pending{};
  pending_.step = step;
  pending_.waited = waited;
  pending_.copy = since(t1);
  pending_.bytes = state_bytes_;
  writer_done_.store(false, std::memory_order_relaxed);
  writer_ = std::thread([this, params = named(params_, true), opt = named(opt_state_, true),
                         manifest = std::move(manifest)]() mutable {
    const auto t = Clock::now();
    try {
      pending_.removed = write_checkpoint(root_, pending_.step, params, opt, std::move(manifest),
                                          cfg_.max_num_checkpoints_to_keep);
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

void Checkpointer::join_and_report() {
  if (!writer_.joinable()) return;
  writer_.join();
  Pending p = std::move(pending_);
  pending_ = Pending{};
  if (p.error) std::rethrow_exception(p.error);
  log_ << fmt::format(
      "checkpoint {}: saved to {}; the step loop stalled {:.3f} s (snapshot copy of {:.1f} MiB {:.3f} s, "
      "waiting for "
      "the previous save {:.3f} s), background write {:.3f} s\n",
      p.step, (root_ / std::to_string(p.step)).string(), p.waited + p.copy, mib(p.bytes), p.copy, p.waited,
      p.write);
  if (!p.removed.empty())
    log_ << fmt::format("checkpoints: deleted {} (max_num_checkpoints_to_keep={})\n",
                        fmt::join(p.removed, ", "), cfg_.max_num_checkpoints_to_keep);
  log_ << std::flush;
}

void Checkpointer::poll() {
  if (writer_.joinable() && writer_done_.load(std::memory_order_acquire)) join_and_report();
}

void Checkpointer::wait() {
  join_and_report();
}

}  // namespace tessera::train
