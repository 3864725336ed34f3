// `tessera convert` against Hugging Face transformers. The goldens in golden/convert/ are made by
// tools/make_convert_golden.py: tiny random models saved by save_pretrained, one or more per family
// (a Llama with GQA and Llama 3.1 RoPE scaling, single file, transformers 4's config layout; a
// tied-embedding Llama, sharded; a Mistral with a sliding window of 5 over 12 tokens, saved in
// bfloat16; a tied Qwen 2.5 with q/k/v biases; a Qwen 3 with QK-norm in bfloat16; a GPT-2; a
// Mixtral with per-expert tensors, sharded, bfloat16; a GPT-OSS; a GPT-OSS with MXFP4 experts; a
// Gemma; a Gemma 2 with soft caps, bfloat16; a Gemma 3 with RoPE per layer type, sharded),
// each with the logits transformers computes for fixed tokens, and a crafted MXFP4 tensor with
// transformers' dequantisation.
//
// Covered, for every family: import -> Tessera's forward gives transformers' logits; HF -> Tessera
// -> HF is bitwise (float32 and bfloat16) with an equivalent config.json; transformers loading
// Tessera's export with Tessera's logits (with $TESSERA_PYTHON, skipped when torch/transformers are
// missing). Also: the expert layouts, MXFP4, bfloat16 and sharded export; the errors (missing
// tensor, wrong shape, missing shard, unsupported model_type / rope scaling / field, extra
// tensors); the command line, including `tessera train` on a converted model.
//
// Tolerance of the logit comparisons (float32): reductions are at most 160 long (the trained
// llama-test models; 56 for the goldens) over values of order 1; the MoE goldens' routing margins
// are at least 4.7e-3, so both sides pick the same experts; oneDNN and PyTorch sum in
// different orders, and Tessera's RoPE table is computed in double where transformers uses
// float32 (positions < 12, so angle errors ~1e-6 rad). Observed: up to 6e-6 absolute on logits of
// magnitude ~1 (goldens) and 1.7e-5 on ~7 (trained models), i.e. <= 6e-6 relative. The bound is
// 1e-5 relative plus 1e-5 absolute (for logits near 0). Dropping Llama 3.1 scaling or the sliding
// window moves logits by 1e-2 or more, far outside it.
#include "tessera/convert/hf_convert.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>

#include "tessera/checkpoint/checkpoint.h"
#include "tessera/config/config.h"
#include "tessera/convert/hf_config.h"
#include "tessera/convert/hf_tensors.h"
#include "tessera/core/error.h"
#include "tessera/core/file.h"
#include "tessera/core/safetensors.h"
#include "tessera/core/source_dir.h"
#include "tessera/data/tokenizer.h"
#include "tessera/graph/executor.h"
#include "tessera/models/decoder.h"
#include "tessera/train/trainer.h"
#include "testing/data_dir.h"
#include "testing/op_test_util.h"
#include "testing/process_util.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kGolden = tessera::testing::data_dir() / "golden" / "convert";
constexpr double kRtol = 1e-5, kAtol = 1e-5;

struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::path(::testing::TempDir()) / "tessera_convert_XXXXXX").string();
    path = mkdtemp(tmpl.data());
  }
  ~TempDir() { fs::remove_all(path); }
  fs::path operator/(const std::string& s) const { return path / s; }
};

// Hugging Face folder -> Tessera checkpoint folder.
convert::ConvertReport to_tessera(const fs::path& hf, const fs::path& out, const std::string& dtype = "") {
  convert::HfToTesseraOptions o;
  o.hf_dir = hf;
  o.out_dir = out;
  o.dtype = dtype;
  return convert::convert_hf_to_tessera(o);
}

// Tessera checkpoint -> Hugging Face folder, with `edit` setting further options.
convert::ConvertReport to_hf(const fs::path& checkpoint, const fs::path& out,
                             const std::function<void(convert::TesseraToHfOptions&)>& edit = {}) {
  convert::TesseraToHfOptions o;
  o.checkpoint = checkpoint;
  o.out_dir = out;
  if (edit) edit(o);
  return convert::convert_tessera_to_hf(o);
}

// The message of the Error `f` throws, checked to be of `kind`.
template <typename F>
std::string error_of(F&& f, ErrorKind kind) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(static_cast<int>(e.kind()), static_cast<int>(kind)) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error thrown";
  return "";
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Tessera's float32 logits [B*T*V] for `tokens` [B, T] of the model `cfg` loaded from `checkpoint`.
std::vector<double> tessera_logits(Config cfg, const fs::path& checkpoint, const std::vector<int32_t>& tokens,
                                   int64_t B, int64_t T) {
  cfg.per_device_batch_size = static_cast<double>(B);
  cfg.max_target_length = T;
  cfg.dtype = "float32";
  const models::ModelSpec spec = models::model_spec_from_config(cfg);
  graph::Graph g;
  const models::DecoderInputs in = models::build_decoder(g, spec);
  graph::Plan plan(std::move(g), graph::PlanOptions{.remat_policy = "none"});
  graph::Executor exec(plan, std::make_unique<ops::RopeTable>(models::rope_config(spec, T)));
  checkpoint::restore_checkpoint(plan, checkpoint, checkpoint::RestoreKind::kParams);
  auto* tok = plan.view(in.tokens).ptr<int32_t>();
  auto* tgt = plan.view(in.targets).ptr<int32_t>();
  auto* pos = plan.view(in.positions).ptr<int32_t>();
  auto* seg = plan.view(in.segment_ids).ptr<int32_t>();
  for (int64_t i = 0; i < B * T; ++i) {
    tok[i] = tokens[static_cast<size_t>(i)];
    tgt[i] = 0;
    pos[i] = static_cast<int32_t>(i % T);
    seg[i] = 1;
  }
  exec.forward_only();
  const auto& values = plan.graph().values();
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i].name == "decoder.logits")
      return testing::to_vector(plan.view(static_cast<graph::ValueId>(i)));
  ADD_FAILURE() << "no decoder.logits";
  return {};
}

struct GoldenLogits {
  SafetensorsFile file;
  std::vector<int32_t> tokens;
  int64_t B, T;
  explicit GoldenLogits(const std::string& name) : file((kGolden / (name + ".logits.safetensors")).string()) {
    const Tensor t = file.get("tokens");
    B = t.dim(0);
    T = t.dim(1);
    tokens.assign(t.ptr<int32_t>(), t.ptr<int32_t>() + t.numel());
  }
  std::vector<double> logits() const { return testing::to_vector(file.get("logits")); }
};

// Config of a converted model: its model.yml, as a user runs it.
Config converted_config(const fs::path& out) {
  return load_config(out / "model.yml", {});
}

// Every tensor of two Hugging Face folders has the same name, dtype, shape and bytes.
void expect_same_tensors(const fs::path& a, const fs::path& b) {
  const convert::HfCheckpoint x(a), y(b);
  ASSERT_EQ(x.names(), y.names());
  for (const std::string& n : x.names()) {
    const Tensor s = x.get(n), t = y.get(n);
    ASSERT_EQ(s.dtype(), t.dtype()) << n;
    ASSERT_TRUE(s.shape() == t.shape()) << n << " " << s.shape().str() << " vs " << t.shape().str();
    EXPECT_EQ(std::memcmp(s.data(), t.data(), s.nbytes()), 0) << n << " differs";
  }
}

class Import : public ::testing::TestWithParam<const char*> {};

TEST_P(Import, TesseraGivesTransformersLogits) {
  const std::string name = GetParam();
  TempDir tmp;
  const convert::ConvertReport r = to_tessera(kGolden / name, tmp / "t");
  EXPECT_EQ(r.files, (std::vector<std::string>{"params.safetensors", "manifest.json", "model.yml"}));
  EXPECT_TRUE(r.skipped.empty());
  EXPECT_FALSE(fs::exists(tmp / "t.tmp"));
  checkpoint::verify_checkpoint(tmp / "t");
  const GoldenLogits g(name);
  const std::vector<double> got = tessera_logits(converted_config(tmp / "t"), tmp / "t", g.tokens, g.B, g.T);
  EXPECT_TRUE(testing::all_close(got, g.logits(), kRtol, kAtol));
}

// Every family's goldens (make_convert_golden.py). gpt_oss_mxfp4's experts are MXFP4: its logits
// are transformers' with the weights transformers dequantises (the dequantised values are exact
// in float32, so the same tolerance holds).
const char* const kGoldens[] = {"llama_gqa",     "llama_tied", "mistral_swa", "qwen2_tied",
                                "qwen3_qknorm",  "gpt2",       "mixtral",     "gpt_oss",
                                "gpt_oss_mxfp4", "gemma",      "gemma2",      "gemma3"};

INSTANTIATE_TEST_SUITE_P(Goldens, Import, ::testing::ValuesIn(kGoldens));

TEST(Import, ModelYamlHoldsEachFamilysKeys) {
  TempDir tmp;
  struct Case {
    const char* name;
    std::vector<std::string> lines;
  } cases[] = {
      {"llama_gqa",
       {"decoder_block: llama2", "base_emb_dim: 40", "base_num_query_heads: 4", "base_num_kv_heads: 2",
        "head_dim: 10", "base_mlp_dim: 56", "base_num_decoder_layers: 2", "vocab_size: 61",
        "normalization_layer_epsilon: 1e-05", "logits_via_embedding: false", "rope_max_timescale: 500000",
        "rope_type: llama3.1", "attention_type: global", "dtype: float32"}},
      {"llama_tied",
       {"base_num_kv_heads: 4", "logits_via_embedding: true", "rope_type: default", "dtype: float32"}},
      {"mistral_swa",
       {"decoder_block: mistral", "base_num_kv_heads: 1", "rope_max_timescale: 1000000",
        "attention_type: local_sliding", "sliding_window_size: 5", "dtype: bfloat16"}},
      {"qwen2_tied", {"decoder_block: qwen2", "head_dim: 10", "logits_via_embedding: true"}},
      {"qwen3_qknorm", {"decoder_block: qwen3", "head_dim: 10", "dtype: bfloat16"}},
      {"gpt2",
       {"decoder_block: gpt3", "mlp_activations: [\"gelu\"]", "base_emb_dim: 40", "base_mlp_dim: 160",
        "base_num_query_heads: 4", "base_num_kv_heads: 4", "head_dim: 10", "trainable_position_size: 16",
        "logits_via_embedding: true"}},
      {"mixtral",
       {"decoder_block: mixtral", "base_moe_mlp_dim: 24", "num_experts: 4", "num_experts_per_tok: 2",
        "attention_type: local_sliding", "sliding_window_size: 5"}},
      {"gpt_oss",
       {"decoder_block: gpt_oss", "mlp_activations: [\"sigmoid\", \"linear\"]", "num_experts: 4",
        "mlp_activations_limit: 7", "rope_type: yarn", "rope_factor: 4", "beta_fast: 32", "beta_slow: 1",
        "original_max_position_embeddings: 256", "rope_truncate: false", "rope_attention_scaling: true",
        "sliding_window_size: 4"}},
      {"gemma",
       {"decoder_block: gemma", "mlp_activations: [\"gelu\", \"linear\"]", "logits_via_embedding: true",
        "base_num_kv_heads: 1", "head_dim: 12", "use_post_attn_norm: false", "query_pre_attn_scalar: 0",
        "rope_max_timescale: 10000", "attention_type: global"}},
      {"gemma2",
       {"decoder_block: gemma2", "query_pre_attn_scalar: 24", "attn_logits_soft_cap: 5",
        "final_logits_soft_cap: 4", "sliding_window_size: 5", "dtype: bfloat16"}},
      {"gemma3",
       {"decoder_block: gemma3", "query_pre_attn_scalar: 20", "attn_logits_soft_cap: 0",
        "final_logits_soft_cap: 0", "rope_max_timescale: 1000000", "local_rope_max_timescale: 10000",
        "rope_linear_scaling_factor: 8", "sliding_window_size: 4"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    to_tessera(kGolden / c.name, tmp / c.name);
    const std::string yml = read_file(tmp / c.name / "model.yml");
    for (const std::string& line : c.lines)
      EXPECT_NE(yml.find("\n" + line + "\n"), std::string::npos) << line << "\n" << yml;
  }
  // --dtype chooses the compute dtype.
  to_tessera(kGolden / "mistral_swa", tmp / "f32", "float32");
  EXPECT_EQ(converted_config(tmp / "f32").dtype, "float32");
}

// HF -> Tessera -> HF gives the original tensors, bit for bit, and an equivalent config.json.
TEST(RoundTrip, IsBitwiseWithAnEquivalentConfig) {
  TempDir tmp;
  for (const char* name : kGoldens) {
    if (std::string(name) == "gpt_oss_mxfp4") continue;  // exported dequantised: see MxFp4 below
    SCOPED_TRACE(name);
    const fs::path t = tmp / (std::string(name) + "_t"), h = tmp / (std::string(name) + "_h");
    to_tessera(kGolden / name, t);
    // No config given: the manifest's; no dtype: model.yml's, which came from config.json.
    const convert::ConvertReport r =
        to_hf(t, h, [](convert::TesseraToHfOptions& o) { o.max_shard_bytes = 1u << 30; });
    EXPECT_EQ(r.files, (std::vector<std::string>{"model.safetensors", "config.json"}));
    expect_same_tensors(kGolden / name, h);
    const json a = convert::read_json_file((kGolden / name / "config.json").string());
    const json b = convert::read_json_file((h / "config.json").string());
    EXPECT_EQ(convert::parse_hf_config(a, "a"), convert::parse_hf_config(b, "b"));
    for (const char* key : {"max_position_embeddings", "bos_token_id", "eos_token_id", "initializer_range"})
      EXPECT_EQ(a.value(key, json()), b.value(key, json())) << key;
    const std::string dtype = a.contains("torch_dtype") ? a["torch_dtype"] : a["dtype"];
    EXPECT_EQ(b["torch_dtype"], dtype);
  }
}

// Tessera's MXFP4 dequantisation equals transformers' own (integrations/mxfp4.py's
// convert_moe_packed_tensors, float32 and bfloat16) bit for bit, on a crafted tensor holding every
// byte value over exponents -20..+20 (make_convert_golden.py).
TEST(MxFp4, DequantisesAsTransformersBitwise) {
  const SafetensorsFile f((kGolden / "mxfp4_dequant.safetensors").string());
  const Tensor blocks = f.get("blocks"), scales = f.get("scales"), want = f.get("dequantized");
  ASSERT_EQ(blocks.dtype(), DType::kU8);
  std::vector<float> got(static_cast<size_t>(want.numel()));
  convert::dequantize_mxfp4(blocks, scales, Tensor(got.data(), want.shape(), DType::kF32), "golden", "w");
  EXPECT_EQ(std::memcmp(got.data(), want.data(), want.nbytes()), 0);
  const Tensor bf16 = f.get("dequantized_bf16");  // exact in bfloat16 too
  for (int64_t i = 0; i < bf16.numel(); ++i)
    ASSERT_EQ(f32_to_bf16(got[static_cast<size_t>(i)]), bf16.ptr<uint16_t>()[i]) << i;
}

// An MXFP4 GPT-OSS (openai/gpt-oss-*'s layout) imports dequantised and exports in float32 without
// quantization_config; the export's tensors are the dequantised values.
TEST(MxFp4, ImportsDequantisedAndExportsUnquantised) {
  TempDir tmp;
  const convert::ConvertReport r = to_tessera(kGolden / "gpt_oss_mxfp4", tmp / "t");
  EXPECT_EQ(
      std::count_if(r.notes.begin(), r.notes.end(), [](const std::string& n) { return has(n, "MXFP4"); }), 4);
  to_hf(tmp / "t", tmp / "h");
  const convert::HfCheckpoint h(tmp / "h");
  EXPECT_FALSE(h.config().contains("quantization_config"));
  const Tensor w = h.get("model.layers.1.mlp.experts.down_proj");
  EXPECT_EQ(w.shape(), (Shape{4, 32, 32}));
  const convert::HfCheckpoint q(kGolden / "gpt_oss_mxfp4");
  std::vector<float> want(static_cast<size_t>(w.numel()));
  convert::dequantize_mxfp4(q.get("model.layers.1.mlp.experts.down_proj_blocks"),
                            q.get("model.layers.1.mlp.experts.down_proj_scales"),
                            Tensor(want.data(), w.shape(), DType::kF32), "golden", "w");
  EXPECT_EQ(std::memcmp(w.data(), want.data(), w.nbytes()), 0);
  // Quantization other than MXFP4, or on a family without MXFP4 experts, is refused.
  json c = convert::read_json_file((kGolden / "gpt_oss_mxfp4" / "config.json").string());
  c["quantization_config"]["quant_method"] = "gptq";
  EXPECT_TRUE(
      has(error_of([&] { convert::parse_hf_config(c, "c"); }, ErrorKind::kConfig), "quantized weights"));
}

// Mixtral's experts are one Linear per expert and projection (w1 gate, w3 up, w2 down, [out, in]);
// GPT-OSS's gate_up_proj [X, E, 2F] interleaves gate (even columns) and up (odd).
TEST(Import, ExpertLayoutsLandInTesserasStackedParameters) {
  TempDir tmp;
  to_tessera(kGolden / "mixtral", tmp / "m");
  to_tessera(kGolden / "gpt_oss", tmp / "g");
  const SafetensorsFile m((tmp / "m" / "params.safetensors").string()),
      g((tmp / "g" / "params.safetensors").string());
  const convert::HfCheckpoint mh(kGolden / "mixtral"), gh(kGolden / "gpt_oss");
  auto value = [](const Tensor& t, int64_t i) {
    return t.dtype() == DType::kBF16 ? bf16_to_f32(t.ptr<uint16_t>()[i]) : t.ptr<float>()[i];
  };
  // wi_1 [X, E, F] expert 3, (e, f) = w3 [F, E] at (f, e).
  const Tensor wi1 = m.get("decoder.layers_1.MoeBlock_0.wi_1");
  const Tensor w3 = mh.get("model.layers.1.block_sparse_moe.experts.3.w3.weight");
  const int64_t E = 32, F = 24;
  for (int64_t e = 0; e < E; ++e)
    for (int64_t f = 0; f < F; ++f) ASSERT_EQ(wi1.ptr<float>()[(3 * E + e) * F + f], value(w3, f * E + e));
  const Tensor gate = g.get("decoder.layers_0.GptOssMlp.wi_0"), up = g.get("decoder.layers_0.GptOssMlp.wi_1");
  const Tensor gu = gh.get("model.layers.0.mlp.experts.gate_up_proj");  // [4, 40, 48]
  for (int64_t i = 0; i < 4 * 40; ++i)
    for (int64_t f = 0; f < 24; ++f) {
      ASSERT_EQ(gate.ptr<float>()[i * 24 + f], value(gu, i * 48 + 2 * f));
      ASSERT_EQ(up.ptr<float>()[i * 24 + f], value(gu, i * 48 + 2 * f + 1));
    }
}

// GPT-2's Hub checkpoint names its tensors without transformers' "transformer." prefix (h.0...,
// wte.weight) and holds the causal-mask buffers attn.bias: both import.
TEST(Import, Gpt2WithoutThePrefixAndWithMaskBuffers) {
  TempDir tmp;
  const fs::path dir = tmp / "gpt2_hub";
  fs::create_directories(dir);
  fs::copy_file(kGolden / "gpt2" / "config.json", dir / "config.json");
  std::vector<NamedTensor> ts;
  std::vector<std::vector<uint8_t>> copies;
  const SafetensorsFile f((kGolden / "gpt2" / "model.safetensors").string());
  for (const std::string& n : f.names()) {
    const Tensor t = f.get(n);
    copies.emplace_back(static_cast<const uint8_t*>(t.data()),
                        static_cast<const uint8_t*>(t.data()) + t.nbytes());
    ts.push_back(
        {n.substr(std::string("transformer.").size()), Tensor(copies.back().data(), t.shape(), t.dtype())});
  }
  std::vector<float> mask(16 * 16, 1.0f);
  ts.push_back({"h.0.attn.bias", Tensor(mask.data(), Shape{1, 1, 16, 16}, DType::kF32)});
  write_safetensors((dir / "model.safetensors").string(), ts, {{"format", "pt"}});
  const convert::ConvertReport r = to_tessera(dir, tmp / "t");
  ASSERT_EQ(r.skipped.size(), 1u);
  EXPECT_TRUE(has(r.skipped[0], "h.0.attn.bias")) << r.skipped[0];
  const GoldenLogits g("gpt2");
  EXPECT_TRUE(testing::all_close(tessera_logits(converted_config(tmp / "t"), tmp / "t", g.tokens, g.B, g.T),
                                 g.logits(), kRtol, kAtol));
}

TEST(Export, Bfloat16RoundsEachTensorToNearestEven) {
  TempDir tmp;
  to_tessera(kGolden / "llama_gqa", tmp / "t");
  to_hf(tmp / "t", tmp / "h", [&](convert::TesseraToHfOptions& o) { o.dtype = "bfloat16"; });
  const convert::HfCheckpoint orig(kGolden / "llama_gqa"), bf(tmp / "h");
  ASSERT_EQ(orig.names(), bf.names());
  for (const std::string& n : orig.names()) {
    const Tensor a = orig.get(n), b = bf.get(n);
    ASSERT_EQ(b.dtype(), DType::kBF16) << n;
    ASSERT_TRUE(a.shape() == b.shape()) << n;
    for (int64_t i = 0; i < a.numel(); ++i)
      ASSERT_EQ(b.ptr<uint16_t>()[i], f32_to_bf16(a.ptr<float>()[i])) << n << "[" << i << "]";
  }
  EXPECT_EQ(convert::read_json_file((tmp / "h" / "config.json").string())["torch_dtype"], "bfloat16");
}

TEST(Export, ShardsBeyondMaxShardSizeWithAnIndex) {
  TempDir tmp;
  to_tessera(kGolden / "llama_gqa", tmp / "t");
  constexpr uint64_t kMax = 20000;  // bytes; the largest tensor (the 61 x 40 embedding) has 9760
  const convert::ConvertReport r =
      to_hf(tmp / "t", tmp / "h", [&](convert::TesseraToHfOptions& o) { o.max_shard_bytes = kMax; });
  const json index = convert::read_json_file((tmp / "h" / "model.safetensors.index.json").string());
  std::set<std::string> shards;
  for (const auto& [name, file] : index["weight_map"].items()) shards.insert(file.get<std::string>());
  ASSERT_GT(shards.size(), 3u);
  EXPECT_EQ(r.files.size(), shards.size() + 2);
  uint64_t total = 0;
  for (size_t k = 1; k <= shards.size(); ++k)
    EXPECT_TRUE(shards.count(fmt::format("model-{:05d}-of-{:05d}.safetensors", k, shards.size()))) << k;
  for (const std::string& s : shards) {
    const SafetensorsFile f((tmp / "h" / s).string());
    uint64_t bytes = 0;
    for (const std::string& n : f.names()) bytes += f.get(n).nbytes();
    EXPECT_LE(bytes, kMax) << s;
    total += bytes;
  }
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), total);
  expect_same_tensors(kGolden / "llama_gqa", tmp / "h");
  // And the sharded folder imports to the same Tessera parameters.
  to_tessera(tmp / "h", tmp / "t2");
  EXPECT_EQ(read_file(tmp / "t" / "params.safetensors"), read_file(tmp / "t2" / "params.safetensors"));
}

// hf_piece_to_tessera / tessera_to_hf_piece of a whole tensor, transposed or not.
void hf_to_tessera_tensor(const Tensor& src, bool transpose, const Tensor& dst, const std::string& file,
                          const std::string& name) {
  convert::hf_piece_to_tessera(src, {.tessera = name, .transpose = transpose}, dst, file, name);
}
void tessera_to_hf_tensor(const Tensor& src, bool transpose, const Tensor& dst) {
  convert::tessera_to_hf_piece(src, {.tessera = "w", .transpose = transpose}, dst);
}

// The layout conversions against a direct loop, on sizes that leave partial 64 x 64 tiles.
TEST(LayoutKernels, TransposeWidenAndRoundOnAwkwardSizes) {
  for (const auto& [rows, cols] :
       std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {1, 7}, {67, 130}, {130, 67}, {129, 65}}) {
    SCOPED_TRACE(fmt::format("{} x {}", rows, cols));
    testing::OwnedTensor hf(Shape{rows, cols}, DType::kF32), hf_bf16(Shape{rows, cols}, DType::kBF16);
    const std::vector<double> v = testing::fill_uniform(hf, 3), vb = testing::fill_uniform(hf_bf16, 4);
    testing::OwnedTensor t(Shape{cols, rows}, DType::kF32), plain(Shape{rows, cols}, DType::kF32);
    // Import: [out, in] -> [in, out], from float32 and from bfloat16 (exact).
    hf_to_tessera_tensor(hf, true, t, "f", "w");
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) ASSERT_EQ(t.t.ptr<float>()[c * rows + r], v[r * cols + c]);
    hf_to_tessera_tensor(hf_bf16, true, t, "f", "w");
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) ASSERT_EQ(t.t.ptr<float>()[c * rows + r], vb[r * cols + c]);
    hf_to_tessera_tensor(hf_bf16, false, plain, "f", "w");
    EXPECT_EQ(testing::to_vector(plain), vb);
    // Export: back to [out, in] in float32 (exact) and bfloat16 (nearest even).
    testing::OwnedTensor back(Shape{rows, cols}, DType::kF32), back_bf16(Shape{rows, cols}, DType::kBF16);
    hf_to_tessera_tensor(hf, true, t, "f", "w");
    tessera_to_hf_tensor(t, true, back);
    EXPECT_EQ(testing::to_vector(back), v);
    tessera_to_hf_tensor(t, true, back_bf16);
    for (int64_t i = 0; i < rows * cols; ++i)
      ASSERT_EQ(back_bf16.t.ptr<uint16_t>()[i], f32_to_bf16(static_cast<float>(v[i])));
  }
  // Shape and dtype errors name the file and the tensor.
  testing::OwnedTensor a(Shape{3, 4}, DType::kF32), b(Shape{3, 4}, DType::kF32),
      i32(Shape{4, 3}, DType::kI32);
  EXPECT_TRUE(
      has(error_of([&] { hf_to_tessera_tensor(a, true, b, "x.safetensors", "w"); }, ErrorKind::kConfig),
          "x.safetensors: tensor 'w' has shape [3, 4], but the model needs [4, 3]"));
  EXPECT_TRUE(
      has(error_of([&] { hf_to_tessera_tensor(i32, true, b, "x.safetensors", "w"); }, ErrorKind::kConfig),
          "tensor 'w' is int32; Tessera reads float32 or bfloat16"));
}

// A part of a fused tensor: block `index` of `count` or every count-th entry of Hugging Face's last
// axis, with and without a transpose of the last two axes, over a leading (expert) axis; export
// writes exactly the part back.
TEST(LayoutKernels, BlocksAndInterleavedPartsOfFusedTensors) {
  constexpr int64_t X = 3, R = 70, C = 5, n = 3;  // HF [X, R, n*C] (or [X, n*C, R]... see below)
  for (const convert::HfSplit split : {convert::HfSplit::kBlock, convert::HfSplit::kInterleaved})
    for (const bool transpose : {false, true})
      for (int index = 0; index < n; ++index) {
        SCOPED_TRACE(
            fmt::format("split {} transpose {} index {}", static_cast<int>(split), transpose, index));
        // HF shape [X, A, n*B]; the part is [X, A, B], Tessera's [X, A, B] or transposed [X, B, A].
        const int64_t A = transpose ? C : R, Bp = transpose ? R : C;
        testing::OwnedTensor hf(Shape{X, A, n * Bp}, DType::kF32);
        const std::vector<double> v = testing::fill_uniform(hf, 5);
        const Shape ts = transpose ? Shape{X, Bp, A} : Shape{X, A, Bp};
        testing::OwnedTensor t(ts, DType::kF32);
        const convert::HfPiece p{
            .tessera = "w", .transpose = transpose, .split = split, .index = index, .count = n};
        convert::hf_piece_to_tessera(hf, p, t, "f", "w");
        auto hf_at = [&](int64_t x, int64_t a, int64_t b) {  // the part's (x, a, b) in HF's tensor
          const int64_t col = split == convert::HfSplit::kBlock ? index * Bp + b : b * n + index;
          return (x * A + a) * (n * Bp) + col;
        };
        for (int64_t x = 0; x < X; ++x)
          for (int64_t a = 0; a < A; ++a)
            for (int64_t b = 0; b < Bp; ++b) {
              const int64_t ti = transpose ? (x * Bp + b) * A + a : (x * A + a) * Bp + b;
              ASSERT_EQ(t.t.ptr<float>()[ti], v[static_cast<size_t>(hf_at(x, a, b))]);
            }
        testing::OwnedTensor back(Shape{X, A, n * Bp}, DType::kF32);
        std::fill(back.t.ptr<float>(), back.t.ptr<float>() + back.t.numel(), -7.0f);
        convert::tessera_to_hf_piece(t, p, back);
        for (int64_t i = 0; i < back.t.numel(); ++i) {
          const float got = back.t.ptr<float>()[i];
          ASSERT_TRUE(got == -7.0f || got == static_cast<float>(v[static_cast<size_t>(i)])) << i;
        }
      }
}

TEST(ByteSize, ReadsTransformersUnits) {
  EXPECT_EQ(convert::parse_byte_size("5GB"), 5'000'000'000u);
  EXPECT_EQ(convert::parse_byte_size("500MB"), 500'000'000u);
  EXPECT_EQ(convert::parse_byte_size("2GiB"), 2ull << 30);
  EXPECT_EQ(convert::parse_byte_size("12kb"), 12'000u);
  EXPECT_EQ(convert::parse_byte_size("4096"), 4096u);
  for (const char* bad : {"", "GB", "0", "5 TB", "1.5GB", "-3"})
    EXPECT_NE(error_of([&] { convert::parse_byte_size(bad); }, ErrorKind::kConfig).find("--max-shard-size"),
              std::string::npos)
        << bad;
}

// A copy of a golden folder to break: its config.json as JSON, its tensors by name.
struct BrokenCopy {
  fs::path dir;
  json config;
  BrokenCopy(const TempDir& tmp, const std::string& name) : dir(tmp / ("broken_" + name)) {
    fs::create_directories(dir);
    for (const auto& e : fs::directory_iterator(kGolden / name))
      fs::copy_file(e.path(), dir / e.path().filename());
    config = convert::read_json_file((dir / "config.json").string());
  }
  void write_config() const { write_file_atomically(dir / "config.json", config.dump(2)); }
  // Rewrites model.safetensors through `edit` (which may add, drop or replace tensors).
  void edit_tensors(const std::function<void(std::vector<NamedTensor>&)>& edit) const {
    std::vector<NamedTensor> ts;
    std::vector<std::vector<uint8_t>> copies;
    {
      const SafetensorsFile f((dir / "model.safetensors").string());
      for (const std::string& n : f.names()) {
        const Tensor t = f.get(n);
        copies.emplace_back(static_cast<const uint8_t*>(t.data()),
                            static_cast<const uint8_t*>(t.data()) + t.nbytes());
        ts.push_back({n, Tensor(copies.back().data(), t.shape(), t.dtype())});
      }
    }
    edit(ts);
    write_safetensors((dir / "model.safetensors").string(), ts, {{"format", "pt"}});
  }
  std::string import_error(const TempDir& tmp, ErrorKind kind) const {
    return error_of([&] { to_tessera(dir, tmp / "out"); }, kind);
  }
};

TEST(Import, CopiesTheTokenizerAndPointsModelYamlAtIt) {
  TempDir tmp;
  // Byte-level BPE files (Llama 3's kind): the folder becomes a huggingface tokenizer path.
  BrokenCopy bpe(tmp, "llama_tied");
  const fs::path fixture = tessera::source_dir() / "tests" / "data" / "fixtures" / "tiny_bpe";
  for (const char* f : {"vocab.json", "merges.txt"}) fs::copy_file(fixture / f, bpe.dir / f);
  const convert::ConvertReport r = to_tessera(bpe.dir, tmp / "bpe");
  EXPECT_EQ(r.files, (std::vector<std::string>{"params.safetensors", "manifest.json", "model.yml",
                                               "vocab.json", "merges.txt"}));
  const Config cfg = converted_config(tmp / "bpe");
  EXPECT_EQ(cfg.tokenizer_type, "huggingface");
  EXPECT_EQ(fs::path(cfg.tokenizer_path), fs::absolute(tmp / "bpe"));
  EXPECT_FALSE(data::load_tokenizer(cfg.tokenizer_type, cfg.tokenizer_path)->encode("hello world").empty());
  // tokenizer.model (SentencePiece: Llama 2, Mistral) is preferred and copied as it is.
  write_file_atomically(bpe.dir / "tokenizer.model", "sentencepiece bytes");
  to_tessera(bpe.dir, tmp / "sp");
  const Config sp = converted_config(tmp / "sp");
  EXPECT_EQ(sp.tokenizer_type, "sentencepiece");
  EXPECT_EQ(fs::path(sp.tokenizer_path), fs::absolute(tmp / "sp" / "tokenizer.model"));
  EXPECT_EQ(read_file(sp.tokenizer_path), "sentencepiece bytes");
  EXPECT_FALSE(fs::exists(tmp / "sp" / "vocab.json"));
}

TEST(ImportErrors, MissingTensorNamesItAndTheFile) {
  TempDir tmp;
  BrokenCopy c(tmp, "llama_gqa");
  c.edit_tensors([](std::vector<NamedTensor>& ts) {
    std::erase_if(ts, [](const NamedTensor& t) { return t.name == "model.layers.1.mlp.up_proj.weight"; });
  });
  const std::string e = c.import_error(tmp, ErrorKind::kConfig);
  EXPECT_TRUE(has(e, (c.dir / "model.safetensors").string())) << e;
  EXPECT_TRUE(has(e, "no tensor 'model.layers.1.mlp.up_proj.weight'")) << e;
  EXPECT_TRUE(has(e, "[56, 40]")) << e;
  EXPECT_FALSE(fs::exists(tmp / "out"));
  EXPECT_FALSE(fs::exists(tmp / "out.tmp"));
}

TEST(ImportErrors, ShapeMismatchSaysExpectedAndFound) {
  TempDir tmp;
  BrokenCopy c(tmp, "llama_gqa");
  c.config["intermediate_size"] = 55;
  c.write_config();
  const std::string e = c.import_error(tmp, ErrorKind::kConfig);
  EXPECT_TRUE(
      has(e, "tensor 'model.layers.0.mlp.gate_proj.weight' has shape [56, 40], but the model needs [55, 40]"))
      << e;
}

TEST(ImportErrors, MissingShardNamesTheFile) {
  TempDir tmp;
  BrokenCopy c(tmp, "llama_tied");
  fs::remove(c.dir / "model-00003-of-00005.safetensors");
  const std::string e = c.import_error(tmp, ErrorKind::kIo);
  EXPECT_TRUE(has(e, "model-00003-of-00005.safetensors: missing; model.safetensors.index.json lists it"))
      << e;
}

TEST(ImportErrors, UnsupportedConfigIsRefusedNamingTheField) {
  TempDir tmp;
  const std::pair<std::function<void(json&)>, std::string> cases[] = {
      {[](json& j) { j["model_type"] = "falcon"; }, "\"model_type\": \"falcon\" is not converted by Tessera"},
      {[](json& j) {
         j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
       },
       "rope type 'yarn'"},
      {[](json& j) { j["rope_scaling"]["low_freq_factor"] = 4.0; }, "0 < low_freq_factor < high_freq_factor"},
      {[](json& j) { j["rope_scaling"]["beta_fast"] = 32; }, "its field 'beta_fast'"},
      {[](json& j) { j["attention_bias"] = true; }, "\"attention_bias\": true is not supported"},
      {[](json& j) { j["hidden_act"] = "gelu"; }, "\"hidden_act\": \"gelu\""},
      {[](json& j) { j["rope_theta"] = 10000.5; }, "whole number"},
      {[](json& j) { j["frobnicate"] = 1; }, "\"frobnicate\": 1 is a field Tessera does not know"},
      {[](json& j) { j["architectures"] = {"LlamaForSequenceClassification"}; }, "\"architectures\""},
      {[](json& j) { j.erase("hidden_size"); }, "\"hidden_size\": absent is required"},
  };
  for (const auto& [edit, want] : cases) {
    SCOPED_TRACE(want);
    BrokenCopy c(tmp, "llama_gqa");
    edit(c.config);
    c.write_config();
    const std::string e = c.import_error(tmp, ErrorKind::kConfig);
    EXPECT_TRUE(has(e, want)) << e;
    EXPECT_TRUE(has(e, (c.dir / "config.json").string())) << e;
    fs::remove_all(c.dir);
  }
}

// Gemma's configs as the Hub and transformers 4 wrote them read as transformers 5's: Gemma 1's
// legacy hidden_act "gelu" (run as the tanh GELU), Gemma 3's rope_theta, rope_local_base_freq and
// rope_scaling at the top with sliding_window_pattern instead of layer_types; Gemma 2's soft caps
// default to 50 / 30 when absent, and null is none.
// Llama 3.2's rope_scaling (factor 32) goes into the llama3_* keys and comes back out on export.
TEST(Import, Llama32RopeFactorsRoundTripThroughTheLlama3Keys) {
  json j = convert::read_json_file((kGolden / "llama_gqa" / "config.json").string());
  j["rope_scaling"]["factor"] = 32.0;
  const convert::HfModel m = convert::parse_hf_config(j, "a");
  const std::string yaml = convert::tessera_model_yaml(m, "float32");
  EXPECT_TRUE(has(yaml, "\nrope_type: llama3.1\n")) << yaml;
  EXPECT_TRUE(has(yaml, "\nllama3_rope_factor: 32\n")) << yaml;
  EXPECT_TRUE(has(yaml, "\nllama3_original_max_position_embeddings: 8192\n")) << yaml;
  const std::vector<std::string> o = {"run_name=x", "model_name=llama3.2-1b"};
  const Config cfg = load_config(tessera::source_dir().string() + "/configs/base.yml", o);
  const convert::HfModel back = convert::hf_model_from_tessera(cfg);
  EXPECT_EQ(back.fields["rope_scaling"]["factor"], 32.0);
  EXPECT_EQ(back.fields["rope_scaling"]["original_max_position_embeddings"], 8192);
}

TEST(Import, GemmaConfigLayoutsAndDefaults) {
  auto config_of = [](const std::string& name) {
    return convert::read_json_file((kGolden / name / "config.json").string());
  };
  json g1 = config_of("gemma");
  const convert::HfModel m1 = convert::parse_hf_config(g1, "a");
  g1["hidden_act"] = "gelu";
  g1["hidden_activation"] = nullptr;
  EXPECT_EQ(convert::parse_hf_config(g1, "b"), m1);
  json g3 = config_of("gemma3");
  const convert::HfModel m3 = convert::parse_hf_config(g3, "a");
  EXPECT_EQ(m3.fields["rope_scaling"], json({{"rope_type", "linear"}, {"factor", 8.0}}));
  EXPECT_EQ(m3.fields["rope_local_base_freq"], 10000.0);
  g3.erase("rope_parameters");
  g3.erase("layer_types");
  g3.erase("_sliding_window_pattern");
  g3["rope_theta"] = 1000000.0;
  g3["rope_local_base_freq"] = 10000.0;
  g3["rope_scaling"] = {{"factor", 8.0}, {"rope_type", "linear"}};
  g3["sliding_window_pattern"] = 6;
  EXPECT_EQ(convert::parse_hf_config(g3, "b"), m3);
  g3.erase("rope_theta");  // transformers' defaults: 1e6 full, 1e4 sliding
  g3.erase("rope_local_base_freq");
  EXPECT_EQ(convert::parse_hf_config(g3, "c"), m3);
  json g2 = config_of("gemma2");
  g2.erase("attn_logit_softcapping");
  g2["final_logit_softcapping"] = nullptr;
  const convert::HfModel m2 = convert::parse_hf_config(g2, "a");
  EXPECT_EQ(m2.fields["attn_logit_softcapping"], 50.0);
  EXPECT_TRUE(m2.fields["final_logit_softcapping"].is_null());
  EXPECT_TRUE(has(convert::tessera_model_yaml(m2, "float32"), "\nfinal_logits_soft_cap: 0\n"));
}

TEST(ImportErrors, GemmaConfigsTesseraCannotRunAreRefused) {
  const struct Case {
    const char* golden;
    std::function<void(json&)> edit;
    std::string want;
  } cases[] = {
      {"gemma", [](json& j) { j["hidden_act"] = "gelu_new"; },
       "\"hidden_act\": \"gelu_new\" is not supported"},
      {"gemma2", [](json& j) { j["hidden_activation"] = "gelu"; }, "tanh GELU (gelu_pytorch_tanh)"},
      {"gemma", [](json& j) { j["tie_word_embeddings"] = false; }, "ties the output to the embedding"},
      {"gemma3", [](json& j) { j["use_bidirectional_attention"] = true; }, "attention is causal"},
      {"gemma2",
       [](json& j) {
         j["layer_types"] = {"full_attention", "full_attention", "full_attention"};
       },
       "alternates sliding_attention (even layers)"},
      {"gemma3", [](json& j) { j["layer_types"][1] = "full_attention"; }, "full when l % 6 == 5"},
      {"gemma3", [](json& j) { j["_sliding_window_pattern"] = 2; }, "a pattern of 6"},
      {"gemma2", [](json& j) { j["sliding_window"] = nullptr; }, "a window on its sliding layers"},
      {"gemma2", [](json& j) { j["final_logit_softcapping"] = -1.0; }, "not a positive number or null"},
      {"gemma3", [](json& j) { j["rope_parameters"]["full_attention"]["rope_type"] = "yarn"; },
       "rope type 'yarn' on the full_attention layers"},
      {"gemma3",
       [](json& j) {
         j["rope_parameters"]["sliding_attention"] = {{"rope_type", "linear"}, {"factor", 2.0}};
       },
       "rope type 'linear' on the sliding_attention layers"},
      {"gemma3",
       [](json& j) {
         j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1e4}};
       },
       "one object per layer type"},
      {"gemma3", [](json& j) { j["rope_theta"] = 1e6; }, "given beside rope_parameters"},
      {"gemma3", [](json& j) { j["model_type"] = "gemma3"; }, "\"model_type\": \"gemma3\" is not converted"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.want);
    json j = convert::read_json_file((kGolden / c.golden / "config.json").string());
    c.edit(j);
    const std::string e = error_of([&] { convert::parse_hf_config(j, "cfg.json"); }, ErrorKind::kConfig);
    EXPECT_TRUE(has(e, c.want)) << e;
  }
}

// Export refuses the Gemma models Hugging Face's classes cannot hold.
TEST(ExportErrors, GemmaKeysTransformersCannotExpress) {
  TempDir tmp;
  to_tessera(kGolden / "gemma", tmp / "g1");
  to_tessera(kGolden / "gemma3", tmp / "g3");
  const std::pair<const char*, std::vector<std::string>> cases[] = {
      {"g1", {"use_qk_norm=true"}},
      {"g1", {"attn_logits_soft_cap=20"}},
      {"g3", {"query_pre_attn_scalar=0"}},
      {"g3", {"query_pre_attn_scalar=20.5"}},
      {"g3", {"local_rope_max_timescale=-1"}},
  };
  for (const auto& c : cases) {
    // References, not structured bindings: lambdas capture those only from C++20's P1091 on,
    // which clang 14 (the sanitizer builds' compiler) lacks.
    const auto& from = c.first;
    const auto& overrides = c.second;
    SCOPED_TRACE(overrides[0]);
    const std::string e = error_of(
        [&] {
          to_hf(tmp / from, tmp / "h", [&](convert::TesseraToHfOptions& o) { o.overrides = overrides; });
        },
        ErrorKind::kConfig);
    EXPECT_TRUE(has(e, overrides[0].substr(0, overrides[0].find('=')))) << e;
    EXPECT_TRUE(has(e, "cannot express")) << e;
  }
}

TEST(ImportErrors, UnknownExtraTensorIsAnErrorButInvFreqIsSkipped) {
  TempDir tmp;
  BrokenCopy c(tmp, "llama_gqa");
  std::vector<float> extra(10, 1.0f);
  c.edit_tensors([&](std::vector<NamedTensor>& ts) {
    ts.push_back(
        {"model.layers.0.self_attn.rotary_emb.inv_freq", Tensor(extra.data(), Shape{5}, DType::kF32)});
  });
  const convert::ConvertReport r = to_tessera(c.dir, tmp / "ok");
  ASSERT_EQ(r.skipped.size(), 1u);
  EXPECT_TRUE(has(r.skipped[0], "model.layers.0.self_attn.rotary_emb.inv_freq")) << r.skipped[0];
  c.edit_tensors([&](std::vector<NamedTensor>& ts) {
    ts.push_back({"model.layers.0.self_attn.q_norm.weight", Tensor(extra.data(), Shape{10}, DType::kF32)});
  });
  const std::string e = c.import_error(tmp, ErrorKind::kConfig);
  EXPECT_TRUE(has(e, "tensor 'model.layers.0.self_attn.q_norm.weight' is not a parameter of the model")) << e;
}

TEST(ImportErrors, TiedHeadMustEqualTheEmbedding) {
  TempDir tmp;
  BrokenCopy c(tmp, "llama_gqa");
  c.config["tie_word_embeddings"] = true;
  c.write_config();
  // The untied golden's lm_head differs from its embedding.
  const std::string e = c.import_error(tmp, ErrorKind::kConfig);
  EXPECT_TRUE(has(e, "'lm_head.weight' differs from 'model.embed_tokens.weight'")) << e;
}

TEST(ImportErrors, NonEmptyOutputFolderIsRefused) {
  TempDir tmp;
  fs::create_directories(tmp / "out");
  write_file_atomically(tmp / "out" / "keep.txt", "mine");
  const std::string e = error_of([&] { to_tessera(kGolden / "llama_gqa", tmp / "out"); }, ErrorKind::kConfig);
  EXPECT_TRUE(has(e, "exists and is not an empty folder")) << e;
  EXPECT_EQ(read_file(tmp / "out" / "keep.txt"), "mine");
}

TEST(ExportErrors, ConfigOfAnotherModelOrUnexpressibleIsRefused) {
  TempDir tmp;
  to_tessera(kGolden / "llama_gqa", tmp / "t");
  std::string e = error_of(
      [&] {
        to_hf(tmp / "t", tmp / "h",
              [](convert::TesseraToHfOptions& o) { o.overrides = {"base_mlp_dim=55"}; });
      },
      ErrorKind::kConfig);
  EXPECT_TRUE(
      has(e,
          "tensor 'decoder.layers_0.mlp.wi_0.kernel' has shape [40, 56], but the configured model needs "
          "[40, 55]"))
      << e;
  e = error_of(
      [&] {
        to_hf(tmp / "t", tmp / "h", [&](convert::TesseraToHfOptions& o) {
          o.overrides = {"attention_type=local_sliding", "sliding_window_size=4"};
        });
      },
      ErrorKind::kConfig);
  EXPECT_TRUE(has(e, "transformers' LlamaForCausalLM has no sliding window")) << e;
  e = error_of([&] { to_hf(tmp / "t" / "params.safetensors", tmp / "h"); }, ErrorKind::kConfig);
  EXPECT_TRUE(has(e, "a bare parameter file carries no config")) << e;
  // With --config it converts.
  to_hf(tmp / "t" / "params.safetensors", tmp / "h",
        [&](convert::TesseraToHfOptions& o) { o.config_file = tmp / "t" / "model.yml"; });
  expect_same_tensors(kGolden / "llama_gqa", tmp / "h");
}

// --- through the program --------------------------------------------------------------------

struct ProgramRun {
  int code = -1;
  std::string out;
};

ProgramRun run_tessera(const TempDir& tmp, const std::vector<std::string>& args) {
  std::string cmd = testing::shell_quote(testing::tessera_binary().string());
  for (const std::string& a : args) cmd.append(" ").append(testing::shell_quote(a));
  cmd.append(" >").append(testing::shell_quote((tmp / "run.txt").string())).append(" 2>&1");
  const int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_file(tmp / "run.txt")};
}

TEST(Cli, ConvertThenTrainTheConvertedModel) {
  TempDir tmp;
  const std::string t = (tmp / "t").string(), h = (tmp / "h").string();
  ProgramRun r =
      run_tessera(tmp, {"convert", "--from", "hf", "--to", "tessera", (kGolden / "llama_tied").string(), t});
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(has(r.out, "tessera train " + t + "/model.yml load_parameters_path=" + t)) << r.out;
  // The converted model trains with no edits to model.yml.
  r = run_tessera(
      tmp, {"train", t + "/model.yml", "load_parameters_path=" + t, "run_name=ft",
            "base_output_directory=" + (tmp / "runs").string(), "steps=2", "per_device_batch_size=1",
            "max_target_length=8", "device_peak_tflops=1", "num_threads=1", "enable_tensorboard=false"});
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(has(r.out, "completed step: 1")) << r.out;
  // Its checkpoint converts back with the config in its manifest.
  r = run_tessera(tmp, {"convert", "--from", "tessera", "--to", "hf",
                        (tmp / "runs/ft/checkpoints/2").string(), h, "--max-shard-size", "10KB"});
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(fs::is_regular_file(tmp / "h" / "model.safetensors.index.json")) << r.out;
  EXPECT_TRUE(fs::is_regular_file(tmp / "h" / "config.json"));
}

TEST(Cli, UsageAndInputErrorsExitWithTheirCodes) {
  TempDir tmp;
  const std::string src = (kGolden / "llama_gqa").string(), out = (tmp / "o").string();
  ProgramRun r = run_tessera(tmp, {"convert", "--from", "hf", "--to", "hf", src, out});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.out, "nothing to convert")) << r.out;
  r = run_tessera(tmp, {"convert", "--from", "hf", "--to", "tessera", src, out, "--max-shard-size", "1GB"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.out, "--max-shard-size applies to --to hf only")) << r.out;
  r = run_tessera(tmp, {"convert", "--from", "hf", "--to", "tessera", src, out, "--dtype", "float16"});
  EXPECT_EQ(r.code, 2) << r.out;
  r = run_tessera(tmp, {"convert", "--from", "hf", "--to", "tessera", (tmp / "nowhere").string(), out});
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(has(r.out, "no such folder")) << r.out;
  r = run_tessera(tmp, {"convert", "--help"});
  EXPECT_EQ(r.code, 0);
  EXPECT_TRUE(has(r.out, "--max-shard-size") && has(r.out, "docs/convert.md")) << r.out;
}

// --- transformers loads what Tessera writes ----------------------------------------------------

TEST(Transformers, LoadsTesserasExportAndGivesTesserasLogits) {
  const std::string py = testing::test_python();
  if (!testing::python_imports("torch, transformers"))
    GTEST_SKIP() << "'" << py
                 << " -c \"import torch, transformers\"' fails: this check needs a Python with torch "
                 << "and transformers; point TESSERA_PYTHON at one (CI's .venv-test has only tensorboard)";
  TempDir tmp;
  // Two models trained by Tessera for 2 steps from its own initialisation: a Llama with GQA and
  // Llama 3.1 RoPE scaling (single file), and a tied Mistral with a sliding window (sharded).
  const std::vector<std::string> common = {"model_name=llama-test",
                                           "override_model_config=true",
                                           "base_output_directory=" + (tmp / "runs").string(),
                                           "steps=2",
                                           "per_device_batch_size=2",
                                           "max_target_length=16",
                                           "device_peak_tflops=1",
                                           "num_threads=1",
                                           "enable_tensorboard=false",
                                           "async_checkpointing=false",
                                           "dtype=float32",
                                           "learning_rate=0.01"};
  const std::vector<std::vector<std::string>> models = {
      {"run_name=llama", "rope_type=llama3.1", "rope_max_timescale=500000"},
      {"run_name=mistral", "decoder_block=mistral", "attention_type=local_sliding", "sliding_window_size=5",
       "logits_via_embedding=true", "rope_max_timescale=1000000"}};
  constexpr int64_t B = 2, T = 11;
  std::vector<int32_t> tokens(B * T);
  for (int64_t i = 0; i < B * T; ++i) tokens[i] = static_cast<int32_t>((i * 37 + 11) % 512);
  write_file_atomically(tmp / "tokens.bin",
                        std::string(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 4));
  std::string cmd = py + " " +
                    testing::shell_quote(tessera::source_dir().string() + "/tools/hf_export_logits.py") +
                    " " + testing::shell_quote((tmp / "tokens.bin").string()) + fmt::format(" {} {}", B, T);
  std::vector<std::vector<double>> want;
  for (size_t m = 0; m < models.size(); ++m) {
    std::vector<std::string> o = common;
    o.insert(o.end(), models[m].begin(), models[m].end());
    const Config cfg = load_config(tessera::source_dir() / "configs" / "base.yml", o);
    {
      std::ostringstream log;
      train::Trainer(cfg, log).run();
    }
    const fs::path ckpt = tmp / "runs" / cfg.run_name / "checkpoints" / "2";
    const fs::path hf = tmp / ("hf_" + cfg.run_name);
    to_hf(ckpt, hf, [&](convert::TesseraToHfOptions& o) { o.max_shard_bytes = m == 1 ? 40000u : 1u << 30; });
    want.push_back(tessera_logits(cfg, ckpt, tokens, B, T));
    cmd += testing::shell_words({hf.string(), (tmp / (cfg.run_name + ".f32")).string()});
  }
  EXPECT_TRUE(fs::exists(tmp / "hf_mistral" / "model.safetensors.index.json"));
  cmd += " >" + testing::shell_quote((tmp / "py.txt").string()) + " 2>&1";
  const int status = std::system(cmd.c_str());
  const std::string py_out = read_file(tmp / "py.txt");
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << cmd << "\n" << py_out;
  EXPECT_TRUE(has(py_out, "LlamaForCausalLM torch.float32")) << py_out;
  EXPECT_TRUE(has(py_out, "MistralForCausalLM torch.float32")) << py_out;
  for (size_t m = 0; m < models.size(); ++m) {
    SCOPED_TRACE(models[m][0]);
    const std::string bytes = read_file(tmp / (m == 0 ? "llama.f32" : "mistral.f32"));
    ASSERT_EQ(bytes.size(), want[m].size() * 4);
    std::vector<double> got(want[m].size());
    for (size_t i = 0; i < got.size(); ++i) {
      float v;
      std::memcpy(&v, bytes.data() + 4 * i, 4);
      got[i] = v;
    }
    EXPECT_TRUE(testing::all_close(got, want[m], kRtol, kAtol));
  }
}

// Every family's golden converted to Tessera and back, in float32: transformers loads each export
// and computes Tessera's logits (the tolerance above; the MoE goldens' routing margins are at least
// 4.7e-3, far from float32 noise, so both pick the same experts).
TEST(Transformers, LoadsEveryFamilysExportWithTesserasLogits) {
  const std::string py = testing::test_python();
  if (!testing::python_imports("torch, transformers"))
    GTEST_SKIP() << "'" << py
                 << " -c \"import torch, transformers\"' fails: this check needs a Python with torch "
                 << "and transformers; point TESSERA_PYTHON at one (CI's .venv-test has only tensorboard)";
  TempDir tmp;
  constexpr int64_t B = 2, T = 12;
  std::vector<int32_t> tokens(B * T);
  for (int64_t i = 0; i < B * T; ++i) tokens[i] = static_cast<int32_t>((i * 37 + 11) % 53);  // < every vocab
  write_file_atomically(tmp / "tokens.bin",
                        std::string(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 4));
  std::string cmd = py + " " +
                    testing::shell_quote(tessera::source_dir().string() + "/tools/hf_export_logits.py") +
                    " " + testing::shell_quote((tmp / "tokens.bin").string()) + fmt::format(" {} {}", B, T);
  std::vector<std::vector<double>> want;
  for (const char* name : kGoldens) {
    const fs::path t = tmp / (std::string(name) + "_t"), h = tmp / (std::string(name) + "_h");
    to_tessera(kGolden / name, t);
    to_hf(t, h, [](convert::TesseraToHfOptions& o) { o.dtype = "float32"; });
    want.push_back(tessera_logits(converted_config(t), t, tokens, B, T));
    cmd += testing::shell_words({h.string(), (tmp / (std::string(name) + ".f32")).string()});
  }
  cmd += " >" + testing::shell_quote((tmp / "py.txt").string()) + " 2>&1";
  const int status = std::system(cmd.c_str());
  const std::string py_out = read_file(tmp / "py.txt");
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << cmd << "\n" << py_out;
  for (const char* cls : {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
                          "GPT2LMHeadModel", "MixtralForCausalLM", "GptOssForCausalLM", "GemmaForCausalLM",
                          "Gemma2ForCausalLM", "Gemma3ForCausalLM"})
    EXPECT_TRUE(has(py_out, std::string(cls) + " torch.float32")) << cls << "\n" << py_out;
  for (size_t m = 0; m < want.size(); ++m) {
    SCOPED_TRACE(kGoldens[m]);
    const std::string bytes = read_file(tmp / (std::string(kGoldens[m]) + ".f32"));
    ASSERT_EQ(bytes.size(), want[m].size() * 4);
    std::vector<double> got(want[m].size());
    for (size_t i = 0; i < got.size(); ++i) {
      float v;
      std::memcpy(&v, bytes.data() + 4 * i, 4);
      got[i] = v;
    }
    EXPECT_TRUE(testing::all_close(got, want[m], kRtol, kAtol));
  }
}

}  // namespace
}  // namespace tessera
