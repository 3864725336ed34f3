// Fuzzes the checkpoint manifest: the input is `manifest.json` of a checkpoint folder that also
// holds fixed, valid parameter files (one whole file and the two piece files of a two-rank job),
// which the manifest may list. Opening the folder (verify_checkpoint, then WholeParameters, which
// assembles the pieces it lists) must either succeed or throw tessera::Error.
//
// TESSERA_FUZZ_WRITE_SEED=<file> makes the harness write a valid manifest of those files to <file>
// at start (how fuzz/corpus/manifest/ got its seeds, whose sizes and CRCs must match the files).
#include <cstdlib>
#include <fstream>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "tessera/checkpoint/checkpoint.h"
#include "tessera/core/crc32c.h"
#include "tessera/core/error.h"

namespace fs = std::filesystem;
namespace ckpt = tessera::checkpoint;

namespace {

const fs::path& checkpoint_dir() {
  static const fs::path dir = [] {
    fs::path d = tessera::fuzz::scratch_dir() / "7";
    fs::create_directories(d);
    // w: [4, 2] float32, 0..7; rank r of 2 holds rows 2r, 2r + 1.
    static std::vector<float> w = {0, 1, 2, 3, 4, 5, 6, 7};
    const tessera::Shape whole{4, 2};
    const tessera::dist::Piece all = tessera::dist::whole_piece(whole);
    ckpt::write_pieces(d / "params.safetensors",
                       {{{"w", tessera::Tensor(w.data(), whole, tessera::DType::kF32)}, all}}, 7);
    for (int r = 0; r < 2; ++r) {
      const tessera::dist::Piece p = tessera::dist::split_piece(all, 0, 2, r);
      ckpt::write_pieces(d / ("params." + std::to_string(r) + "-of-2.safetensors"),
                         {{{"w", tessera::Tensor(w.data() + 4 * r, p.shape, tessera::DType::kF32)}, p}}, 7);
    }
    return d;
  }();
  return dir;
}

nlohmann::json entry_of(const fs::path& p) {
  uint64_t bytes = 0;
  const uint32_t crc = tessera::crc32c_file(p.string(), &bytes);
  return ckpt::file_entry(bytes, crc);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const fs::path& dir = checkpoint_dir();
  if (const char* seed = std::getenv("TESSERA_FUZZ_WRITE_SEED")) {
    nlohmann::json m = {{"format", "tessera-checkpoint"},
                        {"format_version", ckpt::kCheckpointFormatVersion},
                        {"step", 7},
                        {"data_iterator", {{"position", 3}}}};
    m["files"]["params.0-of-2.safetensors"] = entry_of(dir / "params.0-of-2.safetensors");
    m["files"]["params.1-of-2.safetensors"] = entry_of(dir / "params.1-of-2.safetensors");
    std::ofstream(std::string(seed) + ".pieces") << m.dump(1);
    m["files"] = nlohmann::json::object();
    m["files"]["params.safetensors"] = entry_of(dir / "params.safetensors");
    std::ofstream(std::string(seed) + ".whole") << m.dump(1);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tessera::fuzz::write_scratch("7/manifest.json", {reinterpret_cast<const char*>(data), size});
  try {
    ckpt::WholeParameters params(checkpoint_dir());
    for (const std::string& name : params.names()) (void)params.get(name);
  } catch (const tessera::Error&) {
  }
  return 0;
}
