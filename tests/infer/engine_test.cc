// The engine (infer/engine.h) on the Llama family against the training graph's forward pass: for a
// sequence of T tokens, the logits the engine returns from prefill (the last prompt row) and from each decode
// step equal the logits a full forward of the training Plan (models/llama.cc, forward only, no cache)
// computes at that position. Covered: GQA (4 query / 2 kv heads), a sliding window, tied embeddings,
// Llama 3.1 RoPE scaling, a prompt long enough for the oneDNN chunks, several slots of different lengths
// decoding together (bitwise equal to decoding them one at a time), slot reuse after release, a
// full slot, and argument errors. Both ISA builds run.
//
// Tolerances. float32: the engine and the Plan compute the same functions with different
// summation orders (gemv's lanes against oneDNN's blocks, decode attention against the flash
// kernel, residual adds folded into the products); logits of this model are O(1) and each is a chain of a few
// dozen f32 reductions of length <= 101, so they agree to 1e-5 relative (observed ~1e-6).
// bfloat16: both round every activation to 8 significant bits, at some different points (the
// engine rounds x + o·Woᵀ once, the Plan rounds o·Woᵀ and then the sum; logits are f32 in the
// engine and rounded to bf16 in the Plan). Each rounding is 2^-8 relative; through 2 layers about
// ten such differences reach a logit, so the bound is 10 x 2^-8 of the row's largest |logit|,
// plus the Plan's own final rounding, 2^-8 |logit|.
#include "tessera/infer/engine.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <new>
#include <random>

#include "infer/engine_util.h"
#include "tessera/backends/kernels.h"
#include "tessera/config/config.h"
#include "tessera/core/error.h"
#include "tessera/core/safetensors.h"
#include "tessera/core/source_dir.h"
#include "tessera/train/trainer.h"

// Counts the allocations made through operator new while g_count_allocations is set (the engine
// promises that prefill and decode allocate nothing once it is built). Replacing the global
// operators affects this whole test program; outside the counted window they only forward.
namespace {
std::atomic<bool> g_count_allocations{false};
std::atomic<int64_t> g_allocations{0};
}  // namespace

// Under a sanitizer its runtime owns the global operators (a second definition fails to link), so
// the counting test is skipped there.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TESSERA_SANITIZED_BUILD 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define TESSERA_SANITIZED_BUILD 1
#endif
#endif

#ifndef TESSERA_SANITIZED_BUILD
// GCC pairs std::free with the builtin operator new and warns; these operators are the pair.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(size_t n) {
  if (g_count_allocations.load(std::memory_order_relaxed)) g_allocations.fetch_add(1);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, size_t) noexcept {
  std::free(p);
}
#endif

namespace tessera {
namespace {

using testing::check_sequence;
using testing::logits_match;
using testing::random_tokens;
using testing::Reference;
using testing::tiny_spec;

struct Variant {
  const char* name;
  std::function<void(models::ModelSpec&)> edit;
};

const std::vector<Variant>& variants() {
  static const std::vector<Variant> v = {
      {"gqa", [](models::ModelSpec&) {}},
      {"sliding_window_4", [](models::ModelSpec& s) { s.sliding_window = 4; }},
      {"tied_llama3_rope", [](models::ModelSpec& s) {
         s.logits_via_embedding = true;
         s.rope_type = "llama3.1";
       }}};
  return v;
}

TEST(Engine, CachedDecodingMatchesFullForwardFloat32) {
  testing::for_each_isa([] {
    for (const Variant& var : variants()) {
      SCOPED_TRACE(var.name);
      models::ModelSpec spec = tiny_spec(DType::kF32);
      var.edit(spec);
      constexpr int64_t T = 13;
      Reference ref(spec, T, 7);
      auto engine = infer::make_engine(
          spec, {.max_slots = 2, .max_target_length = T, .max_prefill_length = 6}, ref.source());
      check_sequence(*engine, ref, spec, 1, random_tokens(T, spec.vocab_size, 1), 5);
      check_sequence(*engine, ref, spec, 0, random_tokens(T, spec.vocab_size, 2), 1);
    }
  });
}

TEST(Engine, CachedDecodingMatchesFullForwardBfloat16) {
  for (const Variant& var : variants()) {
    SCOPED_TRACE(var.name);
    models::ModelSpec spec = tiny_spec(DType::kBF16);
    var.edit(spec);
    constexpr int64_t T = 13;
    Reference ref(spec, T, 7);
    auto engine = infer::make_engine(spec, {.max_slots = 1, .max_target_length = T, .max_prefill_length = 6},
                                     ref.source());
    check_sequence(*engine, ref, spec, 0, random_tokens(T, spec.vocab_size, 3), 6);
  }
}

// 70 prompt tokens: a 64-row chunk through oneDNN and the tiled attention, then chunks of 4 and 2
// rows through gemv attending to the cache; with a sliding window of 16 the first chunk's rows see
// only part of it.
TEST(Engine, LongPromptUsesGemmChunks) {
  for (int64_t window : {0, 16}) {
    SCOPED_TRACE(window);
    models::ModelSpec spec = tiny_spec(DType::kF32);
    spec.sliding_window = window;
    constexpr int64_t T = 74;
    Reference ref(spec, T, 9);
    auto engine = infer::make_engine(spec, {.max_slots = 1, .max_target_length = T, .max_prefill_length = 70},
                                     ref.source());
    check_sequence(*engine, ref, spec, 0, random_tokens(T, spec.vocab_size, 4), 70);
  }
}

// Three slots at different lengths step together; the same steps one slot at a time on a second
// engine give bitwise the same logits (each row's sums run in the same order either way), and
// every row matches its own sequence's full forward. Slot 1 is then released and reused.
TEST(Engine, BatchedSlotsEqualOneAtATimeAndReuse) {
  models::ModelSpec spec = tiny_spec(DType::kF32);
  spec.sliding_window = 5;
  constexpr int64_t T = 12;
  const int64_t V = spec.vocab_size;
  Reference ref(spec, T, 5);
  const infer::EngineOptions opts{.max_slots = 3, .max_target_length = T, .max_prefill_length = 6};
  auto batched = infer::make_engine(spec, opts, ref.source());
  auto single = infer::make_engine(spec, opts, ref.source());
  const int64_t prompt[] = {2, 6, 4};
  std::vector<std::vector<int32_t>> seqs;
  std::vector<std::vector<std::vector<double>>> want;
  std::vector<float> logits(static_cast<size_t>(3 * V)), one(static_cast<size_t>(V));
  for (int s = 0; s < 3; ++s) {
    seqs.push_back(random_tokens(T, V, 10 + s));
    want.push_back(ref.logits(seqs.back()));
    const auto p = std::span(seqs[s].data(), static_cast<size_t>(prompt[s]));
    batched->prefill(s, p, one);
    single->prefill(s, p, one);
  }
  // Steps until the shortest-prompt slot... every slot advances one token per step.
  for (int64_t step = 0; step < T - 6; ++step) {
    std::vector<int> slots = {2, 0, 1};  // not in slot order
    std::vector<int32_t> tokens;
    for (int s : slots) tokens.push_back(seqs[s][static_cast<size_t>(prompt[s] + step)]);
    batched->decode(slots, tokens, logits);
    for (size_t i = 0; i < slots.size(); ++i) {
      const int s = slots[i];
      const int one_slot[] = {s};
      single->decode(one_slot, std::span(&tokens[i], 1), one);
      const std::vector<float> row(logits.begin() + static_cast<int64_t>(i) * V,
                                   logits.begin() + static_cast<int64_t>(i + 1) * V);
      EXPECT_EQ(row, one) << "slot " << s << " step " << step;
      EXPECT_TRUE(logits_match(row, want[s][static_cast<size_t>(prompt[s] + step)], DType::kF32))
          << "slot " << s << " step " << step;
    }
  }
  batched->release(1);
  EXPECT_EQ(batched->length(1), 0);
  EXPECT_EQ(batched->length(0), 2 + T - 6);
  check_sequence(*batched, ref, spec, 1, random_tokens(T, V, 20), 3);
}

int64_t kind_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return static_cast<int64_t>(e.kind());
  }
  return -1;
}

TEST(Engine, RefusesBadCallsAndFullSlots) {
  models::ModelSpec spec = tiny_spec(DType::kF32);
  Reference ref(spec, 4, 3);
  auto engine = infer::make_engine(spec, {.max_slots = 2, .max_target_length = 4, .max_prefill_length = 3},
                                   ref.source());
  std::vector<float> logits(static_cast<size_t>(2 * spec.vocab_size));
  const auto shape = static_cast<int64_t>(ErrorKind::kShape);
  const std::vector<int32_t> none, four = {1, 2, 3, 4}, three = {1, 2, 3}, bad = {1, 101};
  EXPECT_EQ(kind_of([&] { engine->prefill(0, none, logits); }), shape);
  EXPECT_EQ(kind_of([&] { engine->prefill(0, four, logits); }), shape);  // over max_prefill_length
  EXPECT_EQ(kind_of([&] { engine->prefill(2, three, logits); }), shape);
  EXPECT_EQ(kind_of([&] { engine->prefill(-1, three, logits); }), shape);
  EXPECT_EQ(kind_of([&] { engine->prefill(0, bad, logits); }), shape);  // token outside the vocabulary
  EXPECT_EQ(kind_of([&] { engine->prefill(0, three, std::span(logits.data(), 5)); }), shape);
  engine->prefill(0, three, logits);
  engine->prefill(1, three, logits);
  const int twice[] = {1, 1};
  const int32_t two_tokens[] = {5, 6};
  EXPECT_EQ(kind_of([&] { engine->decode(twice, two_tokens, logits); }), shape);
  const int zero[] = {0};
  engine->decode(zero, std::span(two_tokens, 1), logits);  // position 3: the slot is now full
  EXPECT_EQ(engine->length(0), 4);
  EXPECT_EQ(kind_of([&] { engine->decode(zero, std::span(two_tokens, 1), logits); }), shape);
  engine->release(0);
  EXPECT_EQ(engine->length(0), 0);
  EXPECT_EQ(engine->length(1), 3);
  // A failed prefill leaves its slot free.
  EXPECT_EQ(kind_of([&] { engine->prefill(1, bad, logits); }), shape);
  EXPECT_EQ(engine->length(1), 3);  // the check comes before the slot is cleared
  const auto config = static_cast<int64_t>(ErrorKind::kConfig);
  EXPECT_EQ(kind_of([&] {
              infer::make_engine(spec, {.max_slots = 0, .max_target_length = 4, .max_prefill_length = 3},
                                 ref.source());
            }),
            config);
  EXPECT_EQ(kind_of([&] {
              infer::make_engine(spec, {.max_slots = 1, .max_target_length = 4, .max_prefill_length = 5},
                                 ref.source());
            }),
            config);
}

// Once built, the engine allocates nothing in prefill and decode (chunks of rows that run on gemv:
// products of more rows go through oneDNN, whose execute makes small allocations of its own, see
// onednn_matmul.h; in bf16 on the AMX tiles that is from 16 rows, else from 64).
TEST(Engine, StepsDoNotAllocate) {
  models::ModelSpec spec = tiny_spec(DType::kBF16);
  Reference ref(spec, 40, 3);
  auto engine = infer::make_engine(spec, {.max_slots = 3, .max_target_length = 40, .max_prefill_length = 30},
                                   ref.source());
  const int64_t gemv_rows = backends::kernels_for(Device::cpu()).gemm->gemv_rows_below(DType::kBF16);
  const std::vector<int32_t> prompt = random_tokens(std::min<int64_t>(30, gemv_rows - 1), spec.vocab_size, 1);
  std::vector<float> logits(static_cast<size_t>(3 * spec.vocab_size));
  const int slots[] = {0, 2, 1};
  const int32_t tokens[] = {4, 5, 6};
#ifdef TESSERA_SANITIZED_BUILD
  GTEST_SKIP() << "a sanitizer build: its runtime owns operator new, which this test replaces to count";
#endif
  g_allocations = 0;
  g_count_allocations = true;
  engine->prefill(0, prompt, logits);
  engine->prefill(2, std::span(prompt.data(), 7), logits);
  engine->prefill(1, std::span(prompt.data(), 1), logits);
  for (int step = 0; step < 5; ++step) engine->decode(slots, tokens, logits);
  engine->release(2);
  g_count_allocations = false;
  EXPECT_EQ(g_allocations.load(), 0);
}

// Per-op timing covers the decode steps between set_profiling(true) and (false), by step size, and
// turning it on again starts afresh; the logits are those of an unprofiled step.
TEST(Engine, ProfilesTheDecodeStepsBetweenOnAndOff) {
  const models::ModelSpec spec = tiny_spec(DType::kF32);
  Reference ref(spec, 40, 3);
  auto engine = infer::make_engine(spec, {.max_slots = 3, .max_target_length = 40, .max_prefill_length = 8},
                                   ref.source());
  const std::vector<int32_t> prompt = random_tokens(8, spec.vocab_size, 1);
  const int64_t V = spec.vocab_size;
  std::vector<float> plain(static_cast<size_t>(3 * V)), timed(plain.size());
  for (int s = 0; s < 3; ++s) engine->prefill(s, prompt, plain);
  EXPECT_EQ(engine->profile_report(), "");
  const int one[] = {0}, three[] = {1, 2, 0};
  const int32_t tokens[] = {4, 5, 6};
  engine->decode(std::span(one), std::span(tokens, 1), plain);  // slot 0 at position 8
  engine->release(0);
  engine->prefill(0, prompt, timed);
  engine->set_profiling(true);
  engine->decode(std::span(one), std::span(tokens, 1), timed);  // the same step, timed
  EXPECT_EQ(std::vector<float>(plain.begin(), plain.begin() + V),
            std::vector<float>(timed.begin(), timed.begin() + V));
  engine->decode(std::span(one), std::span(tokens, 1), timed);
  engine->decode(three, tokens, timed);
  engine->set_profiling(false);
  engine->decode(three, tokens, timed);  // not timed
  const std::string report = engine->profile_report();
  EXPECT_NE(report.find("decode steps of 1 row(s):"), std::string::npos) << report;
  EXPECT_NE(report.find("decode steps of 4 row(s):"), std::string::npos) << report;
  EXPECT_EQ(report.find("decode steps of 2 row(s):"), std::string::npos) << report;
  // Two one-row steps and one four-row step: each runs every layer's cached attention once.
  const auto calls = [&](size_t from) {
    const size_t at = report.find("cached_attention", from);
    EXPECT_NE(at, std::string::npos) << report;
    return std::stoi(report.substr(report.find_first_of("0123456789", at + 16)));
  };
  EXPECT_EQ(calls(0), 2 * spec.num_decoder_layers) << report;
  EXPECT_EQ(calls(report.find("4 row(s)")), spec.num_decoder_layers) << report;
  engine->set_profiling(true);
  EXPECT_EQ(engine->profile_report(), "");
  engine->set_profiling(false);
}

// The parameter list the engine asks for is the training graph's, names and shapes.
TEST(Engine, ParameterListIsTheTrainingGraphs) {
  for (bool tied : {false, true}) {
    models::ModelSpec spec = tiny_spec(DType::kF32);
    spec.logits_via_embedding = tied;
    const auto shapes = infer::parameter_shapes(spec);
    EXPECT_EQ(static_cast<int64_t>(shapes.size()), 2 + 9 * spec.num_decoder_layers + (tied ? 0 : 1));
    int64_t total = 0;
    for (const auto& [name, shape] : shapes) total += shape.numel();
    spec.batch = spec.seq = 1;
    EXPECT_EQ(total, spec.num_params());
  }
}

// make_engine(cfg): the same model from a config and a bare parameter file gives the in-memory
// engine's logits bit for bit; an empty path, a missing file and files of another model are
// refused with the error kinds engine.h promises.
TEST(Engine, LoadsParameterFilesAndRefusesOtherModels) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("tessera_engine_load_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::vector<std::string> overrides = {"base_emb_dim=40",
                                              "base_num_query_heads=4",
                                              "base_num_kv_heads=2",
                                              "head_dim=10",
                                              "base_mlp_dim=70",
                                              "base_num_decoder_layers=2",
                                              "vocab_size=101",
                                              "rope_max_timescale=500",
                                              "per_device_batch_size=1",
                                              "max_target_length=13",
                                              "max_prefill_predict_length=6",
                                              "dtype=float32",
                                              "logits_via_embedding=false"};
  Config cfg = load_config(tessera::source_dir() / "configs" / "base.yml", overrides);
  const models::ModelSpec spec = models::model_spec_from_config(cfg);
  Reference ref(spec, 13, 21);
  std::vector<NamedTensor> tensors;
  for (const auto& [name, t] : ref.params()) tensors.push_back({name, t});
  const std::string file = (dir / "params.safetensors").string();
  write_safetensors(file, tensors);

  cfg.load_parameters_path = file;
  auto from_file = infer::make_engine(cfg, {.max_slots = 1});
  auto in_memory = infer::make_engine(
      spec, {.max_slots = 1, .max_target_length = 13, .max_prefill_length = 6}, ref.source());
  EXPECT_EQ(from_file->max_target_length(), 13);
  EXPECT_EQ(from_file->max_prefill_length(), 6);
  const std::vector<int32_t> prompt = random_tokens(6, 101, 8);
  std::vector<float> a(101), b(101);
  from_file->prefill(0, prompt, a);
  in_memory->prefill(0, prompt, b);
  EXPECT_EQ(a, b);

  auto kind = [&](const std::string& path) {
    Config c = cfg;
    c.load_parameters_path = path;
    return kind_of([&] { infer::make_engine(c, {.max_slots = 1}); });
  };
  EXPECT_EQ(kind(""), static_cast<int64_t>(ErrorKind::kConfig));
  EXPECT_EQ(kind((dir / "absent").string()), static_cast<int64_t>(ErrorKind::kIo));
  EXPECT_EQ(kind(dir.string()), static_cast<int64_t>(ErrorKind::kIo));  // a folder without a manifest
  auto without_last = tensors;
  without_last.pop_back();
  write_safetensors((dir / "missing.safetensors").string(), without_last);
  EXPECT_EQ(kind((dir / "missing.safetensors").string()), static_cast<int64_t>(ErrorKind::kConfig));
  auto extra = tensors;
  extra.push_back({"decoder.layers_2.mlp.wo.kernel", tensors.back().tensor});
  write_safetensors((dir / "extra.safetensors").string(), extra);
  EXPECT_EQ(kind((dir / "extra.safetensors").string()), static_cast<int64_t>(ErrorKind::kConfig));
  Config wider = cfg;
  wider.mlp_dim = 72;  // another model size: every MLP kernel has another shape
  EXPECT_EQ(kind_of([&] { infer::make_engine(wider, {.max_slots = 1}); }),
            static_cast<int64_t>(ErrorKind::kConfig));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessera
