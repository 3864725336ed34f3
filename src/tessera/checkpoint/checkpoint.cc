#include "tessera/checkpoint/checkpoint.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include "tessera/core/crc32c.h"
#include "tessera/core/error.h"
#include "tessera/core/file.h"
#include "tessera/core/safetensors.h"
#include "tessera/models/init.h"

namespace tessera::checkpoint {

namespace fs = std::filesystem;

namespace {

void check_ec(const std::error_code& ec, const std::string& what) {
  if (ec) fail(ErrorKind::kIo, "{}: {}", what, ec.message());
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

constexpr const char* kManifestCrcKey = "manifest_crc32c";

// The CRC32C of the manifest without its own checksum, over nlohmann's compact dump: keys sorted,
// no spaces, so it does not depend on the file's layout.
std::string manifest_crc(nlohmann::json m) {
  m.erase(kManifestCrcKey);
  const std::string text = m.dump();
  return crc_hex(crc32c(text.data(), text.size()));
}

std::string piece_key(const std::string& name) {
  return "piece:" + name;
}

std::string encode_piece(const dist::Piece& p) {
  std::vector<int64_t> off(p.offset.begin(), p.offset.begin() + p.whole.rank()), whole;
  for (int i = 0; i < p.whole.rank(); ++i) whole.push_back(p.whole[i]);
  return fmt::format("offset={} whole={}", fmt::join(off, ","), fmt::join(whole, ","));
}

std::vector<int64_t> parse_ints(const std::string& s) {
  std::vector<int64_t> out;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t end = s.find(',', pos);
    if (end == std::string::npos) end = s.size();
    out.push_back(std::stoll(s.substr(pos, end - pos)));
    pos = end + 1;
  }
  return out;
}

// The piece a file's tensor holds: its metadata entry, else (a one-rank checkpoint, a converted
// file) the whole tensor.
dist::Piece file_piece(const SafetensorsFile& file, const std::string& name, const Shape& stored) {
  auto it = file.metadata().find(piece_key(name));
  if (it == file.metadata().end()) return dist::whole_piece(stored);
  const std::string& text = it->second;
  const size_t o = text.find("offset="), w = text.find(" whole=");
  if (o != 0 || w == std::string::npos)
    fail(ErrorKind::kIo, "{}: metadata {} = '{}' is not 'offset=... whole=...'", file.path(), piece_key(name),
         text);
  std::vector<int64_t> off, whole;
  try {
    off = parse_ints(text.substr(7, w - 7));
    whole = parse_ints(text.substr(w + 7));
  } catch (const std::exception&) {
    fail(ErrorKind::kIo, "{}: metadata {} = '{}' does not parse", file.path(), piece_key(name), text);
  }
  if (static_cast<int>(off.size()) != stored.rank() || whole.size() != off.size())
    fail(ErrorKind::kIo, "{}: metadata {} = '{}' does not fit the tensor's shape {}", file.path(),
         piece_key(name), text, stored.str());
  dist::Piece p;
  p.whole = Shape::of_rank(stored.rank());
  p.shape = stored;
  for (int i = 0; i < stored.rank(); ++i) {
    p.whole[i] = whole[static_cast<size_t>(i)];
    p.offset[i] = off[static_cast<size_t>(i)];
    if (p.offset[i] < 0 || p.offset[i] + stored[i] > p.whole[i])
      fail(ErrorKind::kIo, "{}: metadata {} = '{}' lies outside the whole tensor", file.path(),
           piece_key(name), text);
  }
  return p;
}

}  // namespace

// Writes `tensors` as one safetensors file with each piece in its metadata (when it is not whole).
void write_pieces(const fs::path& path, const std::vector<PieceTensor>& tensors, int64_t step) {
  std::map<std::string, std::string> meta = {{"format", "tessera"}, {"step", std::to_string(step)}};
  std::vector<NamedTensor> named;
  for (const PieceTensor& t : tensors) {
    named.push_back(t.tensor);
    if (!t.piece.covers_all()) meta[piece_key(t.tensor.name)] = encode_piece(t.piece);
  }
  write_safetensors(path.string(), named, meta);
}

// Creates `root`/<step>.tmp/ afresh (and `root` when missing); returns it.
fs::path make_tmp_dir(const fs::path& root, int64_t step) {
  std::error_code ec;
  if (!fs::is_directory(root)) {
    fs::create_directories(root, ec);
    check_ec(ec, "cannot create the checkpoint folder " + root.string());
    fsync_path(root.parent_path().empty() ? fs::path(".") : root.parent_path());
  }
  fs::path tmp = root / (std::to_string(step) + ".tmp");
  fs::remove_all(tmp, ec);
  fs::create_directory(tmp, ec);
  check_ec(ec, "cannot create " + tmp.string());
  return tmp;
}

// Writes the manifest (with every file's size and CRC32C) into `root`/<step>.tmp, renames it to
// <step>/ and deletes the oldest complete checkpoints beyond `keep` (-1: keep all); returns the
// deleted steps.
std::vector<int64_t> publish(const fs::path& root, int64_t step, nlohmann::json manifest,
                             const nlohmann::json& files, int64_t keep) {
  std::error_code ec;
  const fs::path final_dir = root / std::to_string(step), tmp = root / (std::to_string(step) + ".tmp");
  manifest["files"] = files;
  write_file_atomically(tmp / kManifestFile, manifest_text(std::move(manifest)));
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

nlohmann::json file_entry(uint64_t bytes, uint32_t crc) {
  return {{"bytes", bytes}, {"crc32c", crc_hex(crc)}};
}

// The one-rank checkpoint: params.safetensors and opt_state.safetensors, then publish().
std::vector<int64_t> write_checkpoint(const fs::path& root, int64_t step,
                                      const std::vector<PieceTensor>& params,
                                      const std::vector<PieceTensor>& opt_state, nlohmann::json manifest,
                                      int64_t keep) {
  const fs::path tmp = make_tmp_dir(root, step);
  write_pieces(tmp / kParamsFile, params, step);
  if (!opt_state.empty()) write_pieces(tmp / kOptStateFile, opt_state, step);
  nlohmann::json files = nlohmann::json::object();
  std::vector<const char*> written = {kParamsFile};
  if (!opt_state.empty()) written.push_back(kOptStateFile);
  for (const char* name : written) {
    uint64_t bytes = 0;
    const uint32_t crc = crc32c_file((tmp / name).string(), &bytes);
    files[name] = file_entry(bytes, crc);
  }
  return publish(root, step, std::move(manifest), files, keep);
}

namespace {

// The state files of a checkpoint folder: params.safetensors or params.<r>-of-<N>.safetensors
// (`prefix` "params"), likewise for "opt_state".
bool is_state_file(const std::string& name, const std::string& prefix) {
  return name.starts_with(prefix + ".") && name.ends_with(".safetensors");
}

// One file's part of a tensor: the mapped data and the piece of the whole tensor it holds.
struct PieceSource {
  const SafetensorsFile* file;
  Tensor data;
  dist::Piece piece;
};

// Every tensor of `files` by name, with the pieces the files hold of it.
std::map<std::string, std::vector<PieceSource>> pieces_by_name(
    const std::vector<std::unique_ptr<SafetensorsFile>>& files) {
  std::map<std::string, std::vector<PieceSource>> sources;
  for (const auto& f : files)
    for (const std::string& n : f->names()) {
      Tensor t = f->get(n);
      sources[n].push_back({f.get(), t, file_piece(*f, n, t.shape())});
    }
  return sources;
}

// Copies into each `kind` value's stored piece (Plan::state; the optimizer's piece for moments)
// whatever parts of it the files hold, after checking that the files hold exactly this model's
// tensors (names, f32, whole shapes) and cover every piece; nothing is copied when a check fails.
void load_tensors(graph::Plan& plan, const std::vector<std::unique_ptr<SafetensorsFile>>& files,
                  graph::ValueKind kind) {
  const char* what = kind == graph::ValueKind::kParam ? "a parameter" : "an optimizer state tensor";
  const auto& values = plan.graph().values();
  const std::map<std::string, std::vector<PieceSource>> sources = pieces_by_name(files);
  const std::string where = files.size() == 1
                                ? files[0]->path()
                                : fmt::format("{} (and {} more files)", files[0]->path(), files.size() - 1);
  std::vector<std::pair<graph::ValueId, const std::vector<PieceSource>*>> copies;
  std::set<std::string> names;
  for (size_t id = 0; id < values.size(); ++id) {
    const graph::Value& v = values[id];
    if (v.kind != kind) continue;
    names.insert(v.name);
    const graph::ParamLayout& L = plan.layout(static_cast<graph::ValueId>(id));
    const dist::Piece& want = kind == graph::ValueKind::kParam ? L.stored : L.opt;
    auto it = sources.find(v.name);
    if (it == sources.end())
      fail(ErrorKind::kConfig,
           "{}: has no tensor '{}', {} of this model (shape {}); the files hold {} tensors: is it a "
           "checkpoint "
           "of another model or optimizer?",
           where, v.name, what, want.whole.str(), sources.size());
    int64_t covered = 0;
    for (const PieceSource& src : it->second) {
      if (src.data.dtype() != DType::kF32)
        fail(ErrorKind::kConfig, "{}: tensor '{}' is {} in the file; Tessera keeps it in float32",
             src.file->path(), v.name, dtype_name(src.data.dtype()));
      if (!(src.piece.whole == want.whole))
        fail(ErrorKind::kConfig,
             "{}: tensor '{}' has shape {} in the file but {} in this model (another model size?)",
             src.file->path(), v.name, src.piece.whole.str(), want.whole.str());
      int64_t overlap = 1;
      for (int d = 0; d < want.whole.rank(); ++d)
        overlap *= std::max<int64_t>(
            0, std::min(src.piece.offset[d] + src.piece.shape[d], want.offset[d] + want.shape[d]) -
                   std::max(src.piece.offset[d], want.offset[d]));
      covered += overlap;
    }
    // Pieces never overlap each other in a file set Tessera wrote, so the sum is the coverage.
    if (covered != want.shape.numel())
      fail(ErrorKind::kIo,
           "{}: the pieces of '{}' cover {} of the {} elements this rank needs ({}); is a shard file "
           "missing?",
           where, v.name, covered, want.shape.numel(), want.str());
    copies.emplace_back(static_cast<graph::ValueId>(id), &it->second);
  }
  for (const auto& [n, list] : sources)
    if (!names.count(n))
      fail(ErrorKind::kConfig,
           "{}: tensor '{}' is not {} of this model (a checkpoint of another model or optimizer?)",
           list[0].file->path(), n, what);
  for (const auto& [id, list] : copies) {
    const graph::ParamLayout& L = plan.layout(id);
    const dist::Piece& want = kind == graph::ValueKind::kParam ? L.stored : L.opt;
    for (const PieceSource& src : *list)
      dist::copy_overlap(src.piece, src.data.data(), want, plan.state(id).data(), 4);
  }
}

// Opens the files of `dir` named by the manifest that start with `prefix`.
std::vector<std::unique_ptr<SafetensorsFile>> open_state_files(const fs::path& dir,
                                                               const nlohmann::json& manifest,
                                                               const std::string& prefix) {
  std::vector<std::unique_ptr<SafetensorsFile>> out;
  for (const auto& [name, e] : manifest.at("files").items())
    if (is_state_file(name, prefix)) out.push_back(std::make_unique<SafetensorsFile>((dir / name).string()));
  return out;
}

bool plan_has(const graph::Plan& plan, graph::ValueKind kind) {
  const auto& values = plan.graph().values();
  return std::any_of(values.begin(), values.end(), [&](const graph::Value& v) { return v.kind == kind; });
}

}  // namespace

WholeParameters::WholeParameters(const fs::path& path) : path_(path.string()) {
  if (fs::is_regular_file(path)) {
    files_.push_back(std::make_unique<SafetensorsFile>(path.string()));
  } else if (fs::is_directory(path)) {
    manifest_ = verify_checkpoint(path);
    files_ = open_state_files(path, manifest_, "params");
    if (files_.empty()) fail(ErrorKind::kIo, "{}: the checkpoint lists no parameter file", path_);
  } else {
    fail(ErrorKind::kIo, "{}: no such checkpoint folder or parameter file", path_);
  }
  for (const auto& [name, list] : pieces_by_name(files_)) {
    if (list.size() == 1 && list[0].piece.covers_all()) {  // a one-file checkpoint: read in place
      tensors_[name] = list[0].data;
      continue;
    }
    const dist::Piece whole = dist::whole_piece(list[0].piece.whole);
    int64_t covered = 0;
    for (const PieceSource& src : list) {
      if (src.data.dtype() != DType::kF32)
        fail(ErrorKind::kIo, "{}: tensor '{}' is {}; Tessera's piece files hold float32", src.file->path(),
             name, dtype_name(src.data.dtype()));
      if (!(src.piece.whole == whole.whole))
        fail(ErrorKind::kIo, "{}: tensor '{}' is a piece of {} here but of {} in {}", src.file->path(), name,
             src.piece.whole.str(), whole.whole.str(), list[0].file->path());
      covered += src.piece.shape.numel();  // pieces Tessera writes never overlap
    }
    if (covered != whole.whole.numel())
      fail(ErrorKind::kIo, "{}: the pieces of '{}' cover {} of its {} elements; is a piece file missing?",
           path_, name, covered, whole.whole.numel());
    std::vector<float>& buf = assembled_.emplace_back(static_cast<size_t>(whole.whole.numel()));
    for (const PieceSource& src : list) dist::copy_overlap(src.piece, src.data.data(), whole, buf.data(), 4);
    tensors_[name] = Tensor(buf.data(), whole.whole, DType::kF32);
  }
}

Tensor WholeParameters::get(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) fail(ErrorKind::kIo, "{}: has no parameter '{}'", path_, name);
  return it->second;
}

std::vector<std::string> WholeParameters::names() const {
  std::vector<std::string> out;
  for (const auto& [name, t] : tensors_) out.push_back(name);
  return out;
}

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

std::string manifest_text(nlohmann::json manifest) {
  manifest[kManifestCrcKey] = manifest_crc(manifest);
  return manifest.dump(2) + "\n";
}

nlohmann::json verify_checkpoint(const fs::path& dir) {
  const fs::path mpath = dir / kManifestFile;
  if (!fs::is_regular_file(mpath))
    fail(ErrorKind::kIo, "{}: missing (not a Tessera checkpoint folder, or an incomplete one)",
         mpath.string());
  nlohmann::json m;
  try {
    const std::string text = read_file(mpath, kReadFileLimit, "checkpoint manifest");
    m = nlohmann::json::parse(text);
    if (m.value("format", "") != "tessera-checkpoint")
      fail(ErrorKind::kIo, "{}: not a Tessera checkpoint manifest (no \"format\": \"tessera-checkpoint\")",
           mpath.string());
    if (!m.contains(kManifestCrcKey) || !m[kManifestCrcKey].is_string())
      fail(ErrorKind::kIo, "{}: has no \"{}\" (its own checksum); the manifest was edited or truncated",
           mpath.string(), kManifestCrcKey);
    if (const std::string crc = manifest_crc(m); crc != m[kManifestCrcKey].get<std::string>())
      fail(ErrorKind::kIo,
           "{}: CRC32C {} of the manifest does not match its \"{}\" {} (the manifest was edited or is "
           "corrupt; "
           "it holds the step and the data position, so it is not trusted)",
           mpath.string(), crc, kManifestCrcKey, m[kManifestCrcKey].get<std::string>());
    const int version = m.at("format_version").get<int>();
    if (version > kCheckpointFormatVersion)
      fail(ErrorKind::kIo, "{}: format_version {} is newer than this build reads ({})", mpath.string(),
           version, kCheckpointFormatVersion);
    const nlohmann::json& files = m.at("files");
    bool any_params = false;
    for (const auto& [name, e] : files.items()) any_params = any_params || is_state_file(name, "params");
    if (!any_params)
      fail(ErrorKind::kIo, "{}: lists no {} (nor params.<r>-of-<N>.safetensors)", mpath.string(),
           kParamsFile);
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
    std::vector<std::unique_ptr<SafetensorsFile>> files;
    files.push_back(std::make_unique<SafetensorsFile>(path.string()));
    load_tensors(plan, files, graph::ValueKind::kParam);
    models::sync_compute_copies(plan);
    return info;
  }
  if (!fs::is_directory(path))
    fail(ErrorKind::kIo, "{}: no such checkpoint folder{}", path.string(),
         kind == RestoreKind::kParams ? " or parameter file" : "");
  const nlohmann::json m = verify_checkpoint(path);
  load_tensors(plan, open_state_files(path, m, "params"), graph::ValueKind::kParam);
  if (kind == RestoreKind::kFullState) {
    auto opt = open_state_files(path, m, "opt_state");
    if (!opt.empty()) {
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
      info.data_iterators = m.value("data_iterators", nlohmann::json());
    } catch (const nlohmann::json::exception& e) {
      fail(ErrorKind::kIo, "{}: {}", (path / kManifestFile).string(), e.what());
    }
  }
  models::sync_compute_copies(plan);
  return info;
}

}  // namespace tessera::checkpoint
