// make_engine(cfg, options) (engine.h): the model from the config, its parameters from
// load_parameters_path, checked against the model before anything is copied.
//
// The checks are those of a parameters-only restore (checkpoint/checkpoint.h): a folder is verified
// (manifest, sizes, CRC32C) before its parameter files are read; a bare safetensors file has no
// manifest; either way every parameter of the model must be present, float32 and of its shape,
// and nothing else may be there. A one-file checkpoint stays mapped while the engine converts each
// tensor into its own layout and dtype (no copy in memory); the piece files of a job of several
// ranks are put together first (checkpoint::WholeParameters).
#include <filesystem>
#include <memory>
#include <set>

#include "tessera/checkpoint/checkpoint.h"
#include "tessera/core/error.h"
#include "tessera/core/safetensors.h"
#include "tessera/infer/engine.h"
#include "tessera/models/model_spec.h"

namespace tessera::infer {

namespace {

namespace fs = std::filesystem;

// The parameters of `path`: a verified checkpoint folder (one file or per-rank pieces), or the file.
std::unique_ptr<checkpoint::WholeParameters> open_parameters(const std::string& path) {
  if (!fs::is_regular_file(path) && !fs::is_directory(path))
    fail(ErrorKind::kIo, "load_parameters_path={}: no such checkpoint folder or parameter file", path);
  return std::make_unique<checkpoint::WholeParameters>(path);
}

// Every parameter of the model is in `file`, float32, of its shape; nothing else is.
void check_parameters(const checkpoint::WholeParameters& file,
                      const std::vector<std::pair<std::string, Shape>>& want) {
  std::set<std::string> names;
  for (const auto& [name, shape] : want) {
    names.insert(name);
    if (!file.contains(name))
      fail(ErrorKind::kConfig,
           "{}: has no tensor '{}', a parameter of this model (shape {}); the file holds {} tensors: is it a "
           "checkpoint of another model?",
           file.path(), name, shape.str(), file.names().size());
    const Tensor t = file.get(name);
    if (t.dtype() != DType::kF32)
      fail(ErrorKind::kConfig, "{}: tensor '{}' is {}; Tessera's parameter files hold float32", file.path(),
           name, dtype_name(t.dtype()));
    if (!(t.shape() == shape))
      fail(ErrorKind::kConfig,
           "{}: tensor '{}' has shape {} in the file but {} in this model (another model size?)", file.path(),
           name, t.shape().str(), shape.str());
  }
  for (const std::string& n : file.names())
    if (!names.count(n))
      fail(ErrorKind::kConfig,
           "{}: tensor '{}' is not a parameter of this model (a checkpoint of another model?)", file.path(),
           n);
}

}  // namespace

std::unique_ptr<Engine> make_engine(const Config& cfg, const EngineOptions& options) {
  if (cfg.load_parameters_path.empty())
    fail(ErrorKind::kConfig,
         "load_parameters_path is empty: decoding needs the model's parameters (a Tessera checkpoint folder, "
         "e.g. <base_output_directory>/<run_name>/checkpoints/<step>, or a safetensors file of parameters)");
  if (cfg.hardware != "cpu")
    fail(ErrorKind::kConfig, "hardware={}: the engine runs on the cpu", cfg.hardware);
  if (cfg.scan_layers)
    fail(ErrorKind::kConfig, "scan_layers=true (stacked layer parameters) is not in this build yet");
  const models::ModelSpec spec = models::model_spec_from_config(cfg);
  EngineOptions o = options;
  if (o.max_target_length == 0) o.max_target_length = cfg.max_target_length;
  if (o.max_prefill_length == 0) o.max_prefill_length = cfg.max_prefill_predict_length;
  if (o.max_prefill_length > o.max_target_length)  // before the file is read: a config error comes first
    fail(ErrorKind::kConfig, "max_prefill_predict_length={} must be at most max_target_length={}",
         o.max_prefill_length, o.max_target_length);
  const std::unique_ptr<checkpoint::WholeParameters> file = open_parameters(cfg.load_parameters_path);
  check_parameters(*file, parameter_shapes(spec));
  return make_engine(spec, o, [&](const std::string& name) { return file->get(name); });
}

}  // namespace tessera::infer
