// The engine (infer/engine.h, graph_engine.cc) against the training graph's full forward pass, for every
// family: the logits of prefill (the last prompt row) and of each decode step equal those the
// training Plan computes at that position (engine_util.h's check_sequence). Families: Llama (GQA,
// sliding window, tied, Llama 3.1 RoPE), GPT-2 (LayerNorm, learned positions, biases, plain GELU
// MLP), Qwen 3 (QK-norm), Mixtral (MoE, sliding window) and GPT-OSS (MoE with biases and the clamped
// SwiGLU, sinks, alternating sliding/full layers, YaRN). Also: prompts of several chunk sizes (the
// binary digits of the length), several slots decoding together with padding rows, and argument
// errors.
//
// Tolerances: engine_test.cc's (float32 1e-5 of the row's largest |logit|; bfloat16 10 x 2^-8 of
// it plus 2^-8 of the logit). The engine runs the training graph's ops on fewer rows, with
// decode attention in place of the flash kernel after a prompt's first chunk and the residual sums
// folded into their products: the same functions, other summation orders and (bf16) roundings. MoE
// routing could flip on a near-tie between the k-th and (k+1)-th expert; with these seeds no token
// is near one (a flip would move a logit by far more than the bound and fail loudly).
#include <gtest/gtest.h>

#include "infer/engine_util.h"
#include "tessera/config/config.h"
#include "tessera/core/error.h"
#include "tessera/core/source_dir.h"
#include "tessera/infer/engine.h"
#include "tessera/models/model_spec.h"

namespace tessera {
namespace {

using testing::check_sequence;
using testing::logits_match;
using testing::random_tokens;
using testing::Reference;

// A preset shrunk to test size, in `dtype`.
models::ModelSpec preset(const std::string& name, std::vector<std::string> overrides, DType dtype) {
  overrides.insert(overrides.begin(), "model_name=" + name);
  overrides.push_back(std::string("dtype=") + (dtype == DType::kF32 ? "float32" : "bfloat16"));
  overrides.push_back("weight_dtype=float32");
  overrides.push_back("override_model_config=true");
  return models::model_spec_from_config(
      load_config(tessera::source_dir().string() + "/configs/base.yml", overrides));
}

struct Family {
  const char* name;
  std::function<models::ModelSpec(DType)> spec;
};

const std::vector<Family>& families() {
  static const std::vector<Family> f = {
      {"llama_window_tied",
       [](DType dt) {
         models::ModelSpec s = testing::tiny_spec(dt);
         s.sliding_window = 4;
         s.logits_via_embedding = true;
         s.rope_type = "llama3.1";
         return s;
       }},
      {"gpt2", [](DType dt) { return preset("gpt2-test", {"vocab_size=128"}, dt); }},
      {"qwen3",
       [](DType dt) {
         return preset("qwen3-0.6b",
                       {"base_emb_dim=64", "base_num_query_heads=4", "base_num_kv_heads=2", "head_dim=16",
                        "base_mlp_dim=96", "base_num_decoder_layers=2", "vocab_size=128"},
                       dt);
       }},
      {"mixtral",
       [](DType dt) {
         return preset("mixtral-test",
                       {"attention_type=local_sliding", "sliding_window_size=5", "vocab_size=128"}, dt);
       }},
      {"gpt_oss",
       [](DType dt) {
         return preset("gpt-oss-tiny",
                       {"base_emb_dim=64", "head_dim=16", "base_num_decoder_layers=3", "base_moe_mlp_dim=32",
                        "num_experts=4", "sliding_window_size=4", "vocab_size=128"},
                       dt);
       }},
      // Gemma 3's shape with both soft caps: local and global RoPE tables, (1 + w) norms, QK-norm.
      {"gemma3_capped", [](DType dt) { return preset("gemma-test", {"vocab_size=128"}, dt); }},
      {"gemma2",
       [](DType dt) {
         return preset("gemma-test",
                       {"decoder_block=gemma2", "base_num_decoder_layers=3", "local_rope_max_timescale=-1",
                        "rope_linear_scaling_factor=1", "rope_max_timescale=10000",
                        "query_pre_attn_scalar=24", "vocab_size=128"},
                       dt);
       }},
  };
  return f;
}

infer::EngineOptions graph_options(int slots, int64_t T, int64_t prefill) {
  return {.max_slots = slots, .max_target_length = T, .max_prefill_length = prefill};
}

// Random norm scales and biases (the reference sets scales away from 1; biases start at 0, which
// would hide a misplaced bias).
void randomise_biases(const Reference& ref, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  for (const auto& [name, t] : ref.params())
    if (name.ends_with("bias") || name.ends_with("sinks"))
      for (int64_t j = 0; j < t.numel(); ++j) t.ptr<float>()[j] = u(rng);
}

TEST(GraphEngine, EveryFamilyMatchesTheFullForwardFloat32) {
  testing::for_each_isa([] {
    for (const Family& f : families()) {
      SCOPED_TRACE(f.name);
      const models::ModelSpec spec = f.spec(DType::kF32);
      constexpr int64_t T = 13;
      Reference ref(spec, T, 7);
      randomise_biases(ref, 8);
      ref.refresh();
      auto engine = infer::make_engine(spec, graph_options(2, T, 7), ref.source());
      check_sequence(*engine, ref, spec, 1, random_tokens(T, spec.vocab_size, 1), 7);  // chunks 4, 2, 1
      check_sequence(*engine, ref, spec, 0, random_tokens(T, spec.vocab_size, 2), 1);
    }
  });
}

TEST(GraphEngine, EveryFamilyMatchesTheFullForwardBfloat16) {
  for (const Family& f : families()) {
    SCOPED_TRACE(f.name);
    const models::ModelSpec spec = f.spec(DType::kBF16);
    constexpr int64_t T = 13;
    Reference ref(spec, T, 7);
    randomise_biases(ref, 9);
    ref.refresh();
    auto engine = infer::make_engine(spec, graph_options(1, T, 6), ref.source());
    check_sequence(*engine, ref, spec, 0, random_tokens(T, spec.vocab_size, 3), 6);
  }
}

// Three GPT-OSS slots step together through the 4-row plan (one padding row); each row matches
// its own sequence's full forward; a released slot is reused.
TEST(GraphEngine, SlotsDecodeTogetherWithPaddingRows) {
  const models::ModelSpec spec = families()[4].spec(DType::kF32);
  constexpr int64_t T = 12;
  const int64_t V = spec.vocab_size;
  Reference ref(spec, T, 5);
  randomise_biases(ref, 6);
  ref.refresh();
  auto engine = infer::make_engine(spec, graph_options(3, T, 6), ref.source());
  const int64_t prompt[] = {2, 6, 3};
  std::vector<std::vector<int32_t>> seqs;
  std::vector<std::vector<std::vector<double>>> want;
  std::vector<float> logits(static_cast<size_t>(3 * V)), one(static_cast<size_t>(V));
  for (int s = 0; s < 3; ++s) {
    seqs.push_back(random_tokens(T, V, 10 + s));
    want.push_back(ref.logits(seqs.back()));
    engine->prefill(s, std::span(seqs[s].data(), static_cast<size_t>(prompt[s])), one);
  }
  for (int64_t step = 0; step < T - 6; ++step) {
    const std::vector<int> slots = {2, 0, 1};
    std::vector<int32_t> tokens;
    for (int s : slots) tokens.push_back(seqs[s][static_cast<size_t>(prompt[s] + step)]);
    engine->decode(slots, tokens, logits);
    for (size_t i = 0; i < slots.size(); ++i) {
      const int s = slots[i];
      const std::vector<float> row(logits.begin() + static_cast<int64_t>(i) * V,
                                   logits.begin() + static_cast<int64_t>(i + 1) * V);
      EXPECT_TRUE(logits_match(row, want[s][static_cast<size_t>(prompt[s] + step)], DType::kF32))
          << "slot " << s << " step " << step;
    }
  }
  engine->release(1);
  EXPECT_EQ(engine->length(1), 0);
  EXPECT_EQ(engine->length(0), 2 + T - 6);
  check_sequence(*engine, ref, spec, 1, random_tokens(T, V, 20), 5);
}

TEST(GraphEngine, RefusesBadCalls) {
  const models::ModelSpec spec = families()[3].spec(DType::kF32);
  Reference ref(spec, 4, 3);
  auto engine = infer::make_engine(spec, graph_options(2, 4, 3), ref.source());
  std::vector<float> logits(static_cast<size_t>(2 * spec.vocab_size));
  auto kind = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return e.kind();
    }
    return ErrorKind::kInternal;
  };
  const std::vector<int32_t> none, four = {1, 2, 3, 4}, three = {1, 2, 3}, bad = {1, 1000};
  EXPECT_EQ(kind([&] { engine->prefill(0, none, logits); }), ErrorKind::kShape);
  EXPECT_EQ(kind([&] { engine->prefill(0, four, logits); }), ErrorKind::kShape);
  EXPECT_EQ(kind([&] { engine->prefill(2, three, logits); }), ErrorKind::kShape);
  EXPECT_EQ(kind([&] { engine->prefill(0, bad, logits); }), ErrorKind::kShape);
  engine->prefill(0, three, logits);
  const int twice[] = {0, 0};
  const int32_t two[] = {5, 6};
  EXPECT_EQ(kind([&] { engine->decode(twice, two, logits); }), ErrorKind::kShape);
  const int zero[] = {0};
  engine->decode(zero, std::span(two, 1), logits);
  EXPECT_EQ(kind([&] { engine->decode(zero, std::span(two, 1), logits); }), ErrorKind::kShape);  // full
  EXPECT_EQ(kind([&] { infer::make_engine(spec, graph_options(0, 4, 3), ref.source()); }),
            ErrorKind::kConfig);
  EXPECT_EQ(kind([&] { infer::make_engine(spec, graph_options(1, 4, 5), ref.source()); }),
            ErrorKind::kConfig);
}

}  // namespace
}  // namespace tessera
