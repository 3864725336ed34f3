// convert_bench: the cost of `tessera convert` against the file I/O it cannot avoid, measured in
// the same run.
//
//   convert_bench [--quick] [--dir DIR] [--threads N]
//
// 1. Layout kernels on one [F, E] = [5632, 2048] Linear weight (a ~1B Llama's MLP): the transpose
//    of hf_piece_to_tessera from float32 and from bfloat16, and of tessera_to_hf_piece to
//    bfloat16, against memcpy of the same float32 matrix. GB/s count each byte read and written
//    once (memcpy: 2 x 4 bytes per element). Best of 5 after a warm-up.
// 2. End to end on a llama-125m-shaped model (E 768, 12 layers, F 2048, V 32000: 134M parameters)
//    saved in bfloat16, as the Hub ships Llama checkpoints: Hugging Face -> Tessera (reads 268 MB,
//    writes 536 MB of float32) and back (reads 536 MB, writes 268 MB), each against
//    write_safetensors of the same number of output bytes from memory, fsync included, which is
//    the floor of either direction. The inputs were just written, so they are read from the page
//    cache. --quick uses 2 layers and a 4096 vocabulary.
// Files go under DIR (default: the system temporary folder) and are removed afterwards.
#include <omp.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "tessera/convert/hf_config.h"
#include "tessera/convert/hf_convert.h"
#include "tessera/convert/hf_tensors.h"
#include "tessera/core/dtype.h"
#include "tessera/core/file.h"
#include "tessera/core/safetensors.h"

namespace {

using namespace tessera;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_of(const std::function<void()>& f) {
  const auto t0 = Clock::now();
  f();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double best_of(int reps, const std::function<void()>& f) {
  f();  // warm-up: first touch of the output pages
  double best = 1e30;
  for (int i = 0; i < reps; ++i) best = std::min(best, seconds_of(f));
  return best;
}

// Deterministic values in [-0.5, 0.5) without the cost of a real generator.
void fill(float* p, int64_t n, uint32_t seed) {
  uint32_t s = seed * 2654435761u + 1;
  for (int64_t i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    p[i] = static_cast<float>(s >> 8) / 16777216.0f - 0.5f;
  }
}

void bench_kernels() {
  constexpr int64_t kF = 5632, kE = 2048, kN = kF * kE;
  std::vector<float> hf(kN), tessera(kN), copy(kN);
  std::vector<uint16_t> hf_bf16(kN);
  fill(hf.data(), kN, 1);
  for (int64_t i = 0; i < kN; ++i) hf_bf16[i] = f32_to_bf16(hf[i]);
  const Tensor src(hf.data(), Shape{kF, kE}, DType::kF32),
      src_bf16(hf_bf16.data(), Shape{kF, kE}, DType::kBF16);
  const Tensor dst(tessera.data(), Shape{kE, kF}, DType::kF32),
      out_bf16(hf_bf16.data(), Shape{kF, kE}, DType::kBF16);
  const double t_copy = best_of(5, [&] { std::memcpy(copy.data(), hf.data(), kN * 4); });
  const convert::HfPiece linear{.tessera = "w", .transpose = true};  // a Linear weight
  const double t_f32 = best_of(5, [&] { convert::hf_piece_to_tessera(src, linear, dst, "bench", "w"); });
  const double t_bf16 =
      best_of(5, [&] { convert::hf_piece_to_tessera(src_bf16, linear, dst, "bench", "w"); });
  const double t_out = best_of(5, [&] { convert::tessera_to_hf_piece(dst, linear, out_bf16); });
  const double n = static_cast<double>(kN);
  std::printf("layout kernels, [%lld, %lld], %d threads (GB/s = bytes read + written / time)\n",
              static_cast<long long>(kF), static_cast<long long>(kE), omp_get_max_threads());
  std::printf("  %-44s %8.2f ms %7.2f GB/s\n", "memcpy f32 (reference)", t_copy * 1e3, 8 * n / t_copy / 1e9);
  auto row = [&](const char* what, double t, double bytes) {
    std::printf("  %-44s %8.2f ms %7.2f GB/s  %.2fx memcpy's time\n", what, t * 1e3, bytes * n / t / 1e9,
                t / t_copy);
  };
  row("import transpose f32 -> f32", t_f32, 8);
  row("import transpose bf16 -> f32", t_bf16, 6);
  row("export transpose f32 -> bf16", t_out, 6);
}

// A Hugging Face folder of a Llama in bfloat16 with deterministic weights.
void write_hf_model(const fs::path& dir, bool quick) {
  struct {
    int64_t hidden_size = 768, intermediate_size = 2048, num_hidden_layers, num_attention_heads = 12,
            num_key_value_heads = 12, head_dim = 64, vocab_size;
  } c{.num_hidden_layers = quick ? 2 : 12, .vocab_size = quick ? 4096 : 32000};
  models::ModelSpec spec;
  spec.batch = spec.seq = 1;
  spec.emb_dim = c.hidden_size;
  spec.mlp_dim = c.intermediate_size;
  spec.num_decoder_layers = c.num_hidden_layers;
  spec.num_query_heads = c.num_attention_heads;
  spec.num_kv_heads = c.num_key_value_heads;
  spec.head_dim = c.head_dim;
  spec.vocab_size = c.vocab_size;
  const int64_t E = c.hidden_size, F = c.intermediate_size, HD = c.num_attention_heads * c.head_dim;
  std::vector<std::vector<uint16_t>> storage;
  std::vector<NamedTensor> tensors;
  uint32_t seed = 0;
  for (const convert::HfName& m : convert::hf_names(spec)) {
    Shape s{E};
    if (m.hf.ends_with("embed_tokens.weight"))
      s = Shape{c.vocab_size, E};
    else if (m.hf == "lm_head.weight")
      s = Shape{c.vocab_size, E};
    else if (m.hf.ends_with("q_proj.weight") || m.hf.ends_with("k_proj.weight") ||
             m.hf.ends_with("v_proj.weight"))
      s = Shape{HD, E};
    else if (m.hf.ends_with("o_proj.weight"))
      s = Shape{E, HD};
    else if (m.hf.ends_with("gate_proj.weight") || m.hf.ends_with("up_proj.weight"))
      s = Shape{F, E};
    else if (m.hf.ends_with("down_proj.weight"))
      s = Shape{E, F};
    std::vector<float> f(static_cast<size_t>(s.numel()));
    fill(f.data(), s.numel(), ++seed);
    storage.emplace_back(f.size());
    for (size_t i = 0; i < f.size(); ++i) storage.back()[i] = f32_to_bf16(f[i]);
    tensors.push_back({m.hf, Tensor(storage.back().data(), s, DType::kBF16)});
  }
  fs::create_directories(dir);
  write_safetensors((dir / "model.safetensors").string(), tensors, {{"format", "pt"}});
  const nlohmann::json config = {{"architectures", {"LlamaForCausalLM"}},
                                 {"model_type", "llama"},
                                 {"hidden_size", c.hidden_size},
                                 {"intermediate_size", c.intermediate_size},
                                 {"num_hidden_layers", c.num_hidden_layers},
                                 {"num_attention_heads", c.num_attention_heads},
                                 {"num_key_value_heads", c.num_key_value_heads},
                                 {"head_dim", c.head_dim},
                                 {"vocab_size", c.vocab_size},
                                 {"rms_norm_eps", 1e-5},
                                 {"rope_theta", 10000.0},
                                 {"max_position_embeddings", 2048},
                                 {"torch_dtype", "bfloat16"}};
  write_file_atomically(dir / "config.json", config.dump(2));
}

// write_safetensors of `bytes` bytes from memory (one tensor), fsync included: the I/O floor.
double write_floor(const fs::path& path, int64_t bytes) {
  std::vector<float> buf(static_cast<size_t>(bytes / 4));
  fill(buf.data(), static_cast<int64_t>(buf.size()), 7);
  const Tensor t(buf.data(), Shape{static_cast<int64_t>(buf.size())}, DType::kF32);
  const double s = seconds_of([&] { write_safetensors(path.string(), {{"w", t}}); });
  fs::remove(path);
  return s;
}

void bench_end_to_end(const fs::path& root, bool quick) {
  const fs::path hf = root / "hf", t = root / "tessera", back = root / "hf_back";
  write_hf_model(hf, quick);
  convert::ConvertReport r;
  const double t_in = seconds_of([&] {
    convert::HfToTesseraOptions o;
    o.hf_dir = hf;
    o.out_dir = t;
    r = convert::convert_hf_to_tessera(o);
  });
  const double t_out = seconds_of([&] {
    convert::TesseraToHfOptions o;
    o.checkpoint = t;
    o.out_dir = back;
    o.dtype = "bfloat16";
    convert::convert_tessera_to_hf(o);
  });
  const int64_t p = r.params;
  const double floor_in = write_floor(root / "floor.safetensors", 4 * p);
  const double floor_out = write_floor(root / "floor.safetensors", 2 * p);
  std::printf("\nend to end, %lld parameters (%d layers, vocab %lld), bfloat16 on the Hugging Face side\n",
              static_cast<long long>(p), quick ? 2 : 12, static_cast<long long>(quick ? 4096 : 32000));
  std::printf("  %-44s %7.2f s   write floor %.2f s (%.0f MB)  %.2fx the floor\n", "hf -> tessera", t_in,
              floor_in, 4e-6 * static_cast<double>(p), t_in / floor_in);
  std::printf("  %-44s %7.2f s   write floor %.2f s (%.0f MB)  %.2fx the floor\n", "tessera -> hf (bfloat16)",
              t_out, floor_out, 2e-6 * static_cast<double>(p), t_out / floor_out);
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  fs::path dir = fs::temp_directory_path();
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      quick = true;
    } else if ((a == "--dir" || a == "--threads") && i + 1 < argc) {
      if (a == "--dir")
        dir = argv[++i];
      else
        omp_set_num_threads(std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: convert_bench [--quick] [--dir DIR] [--threads N]\n");
      return 2;
    }
  }
  const fs::path root = dir / ("tessera_convert_bench_" + std::to_string(::getpid()));
  try {
    bench_kernels();
    bench_end_to_end(root, quick);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "convert_bench: %s\n", e.what());
    fs::remove_all(root);
    return 1;
  }
  fs::remove_all(root);
  return 0;
}
