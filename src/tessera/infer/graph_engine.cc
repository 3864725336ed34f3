// The Engine (engine.h): the model definition itself decodes, for every family of
// models/decoder.h, through inference plans of the same graph builder the trainer uses
// (ModelSpec::decode), with the KV cache as graph values (graph.h's cached_attention).
//
// Plans: one per step size, sharing one arena of parameters and KV caches and one of activations
// (graph/workspace.h's SharedArenas), as only one runs at a time:
//   prefill  chunks of 1, 2, 4, ... rows up to max_prefill_length, logits of the last row only: a
//            prompt of P tokens runs as the chunks of P's binary digits, largest first (each row
//            attends to its slot's cache, so a chunk sees the chunks before it; the first chunk
//            attends with the tiled causal kernel, and the last layer after its attention runs on
//            the logit row only);
//   decode   1, 2, 4, ... rows up to the smallest power of two >= max_slots, logits of every row;
//            a step of M slots runs the smallest plan of at least M rows, the rest padding (slot -1:
//            no cache write, zero output).
// Weights are laid out for decoding at load time: kernels [out, in] (Value::transposed), so that
// products of few rows (fewer than 16 to 64 by CPU and dtype: ops::gemv_is_faster) stream them
// through gemv (ops/gemv.h) and larger ones go to oneDNN; residual sums are the accumulate of
// their products, and products of one input (q, k and v; gate and up) one gemv call
// (graph/fuse.h).
// Parameters are read into the plans' f32 masters and converted to the compute dtype once.
// Logits come out of the graph in the compute dtype and are widened to f32.
// After the constructor nothing allocates: it runs every plan once (oneDNN primitives, the
// attention kernels' per-thread scratch), then frees the slots.
//
// Left out: tensor parallelism and expert parallelism (an EP checkpoint decodes on one process).
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <map>
#include <string>

#include "tessera/core/arena.h"
#include "tessera/core/error.h"
#include "tessera/graph/executor.h"
#include "tessera/graph/plan.h"
#include "tessera/infer/engine.h"
#include "tessera/infer/slot_engine.h"
#include "tessera/models/decoder.h"
#include "tessera/models/init.h"
#include "tessera/ops/convert.h"

namespace tessera::infer {

namespace {

// dst [cols, rows] = src [rows, cols]ᵀ (f32), in tiles of 32 x 32.
void transpose_into(const Tensor& src, const Tensor& dst) {
  const int64_t rows = src.dim(0), cols = src.dim(1);
  const float* s = src.ptr<const float>();
  float* d = dst.ptr<float>();
  constexpr int64_t kTile = 32;
#pragma omp parallel for schedule(static) collapse(2) if (rows * cols > (1 << 16))
  for (int64_t r0 = 0; r0 < rows; r0 += kTile)
    for (int64_t c0 = 0; c0 < cols; c0 += kTile)
      for (int64_t c = c0; c < std::min(cols, c0 + kTile); ++c)
        for (int64_t r = r0; r < std::min(rows, r0 + kTile); ++r) d[c * rows + r] = s[r * cols + c];
}

// One step size's plan: rows, its inputs and output.
struct StepPlan {
  int64_t rows = 0;
  std::unique_ptr<graph::Plan> plan;
  std::unique_ptr<graph::Executor> exec;
  models::DecoderInputs in;
  graph::ValueId logits = graph::kNoValue;
};

class GraphEngine final : public SlotEngine {
 public:
  GraphEngine(const models::ModelSpec& spec, const EngineOptions& options, const ParameterSource& params);

  const char* name() const override { return "graph"; }
  void prefill(int slot, std::span<const int32_t> prompt, std::span<float> logits) override;
  void decode(std::span<const int> slots, std::span<const int32_t> tokens, std::span<float> logits) override;
  void set_profiling(bool on) override;
  std::string profile_report() const override;

 private:
  models::ModelSpec step_spec(int64_t rows, bool last_row) const;
  // Runs `p` on its filled inputs and widens logits rows [0, n) into `out`.
  void run(StepPlan& p, int64_t n, float* out);
  // Runs every plan once on token 0 (prefill rows in slot 0; decode rows one per slot), so that
  // what the kernels allocate on first use exists before the first request; the slots stay free.
  void warm_up();

  Arena model_state_, activations_;
  std::vector<StepPlan> prefill_, decode_;  // by rows 1, 2, 4, ...
};

models::ModelSpec GraphEngine::step_spec(int64_t rows, bool last_row) const {
  models::ModelSpec s = spec_;
  s.batch = 1;
  s.seq = rows;
  s.decode = {
      .slots = options_.max_slots, .max_length = options_.max_target_length, .last_row_logits = last_row};
  return s;
}

GraphEngine::GraphEngine(const models::ModelSpec& spec, const EngineOptions& options,
                         const ParameterSource& params)
    : SlotEngine(spec, options) {
  spec_.load_balance_loss_weight = 0;
  spec_.tp_size = 1, spec_.tp_rank = 0, spec_.tp_axes.clear();
  // The specs of every step size; their model state must be laid out alike to share one arena.
  struct Step {
    bool prefill;
    int64_t rows;
    graph::PlanSpec spec;
  };
  std::vector<Step> specs;
  auto add = [&](int64_t rows, bool prefill) {
    graph::Graph g;
    models::build_decoder(g, step_spec(rows, prefill));
    specs.push_back(
        {prefill, rows, graph::PlanSpec(std::move(g), graph::PlanOptions{.remat_policy = "none"})});
  };
  for (int64_t r = 1; r <= options_.max_prefill_length; r *= 2) add(r, true);
  for (int64_t r = 1;; r *= 2) {
    add(r, false);
    if (r >= options_.max_slots) break;
  }
  std::map<std::string, graph::Placement> model;  // the first spec's model state, by name
  size_t activation_bytes = 0;
  const size_t model_bytes = specs[0].spec.arena_bytes(graph::ArenaKind::kModelState);
  for (const Step& step : specs) {
    const graph::PlanSpec& s = step.spec;
    activation_bytes = std::max(activation_bytes, s.arena_bytes(graph::ArenaKind::kActivations));
    const auto& values = s.graph().values();
    for (size_t i = 0; i < values.size(); ++i) {
      const graph::Placement& p = s.state(static_cast<graph::ValueId>(i));
      if (p.arena != graph::ArenaKind::kModelState) continue;
      const auto [it, fresh] = model.try_emplace(values[i].name, p);
      TESSERA_CHECK(it->second == p, ErrorKind::kInternal,
                    "engine: the decoding plans place '{}' differently", values[i].name);
    }
    TESSERA_CHECK(s.arena_bytes(graph::ArenaKind::kModelState) == model_bytes, ErrorKind::kInternal,
                  "engine: the decoding plans' model state differs in size");
  }
  model_state_ = Arena(model_bytes, "decoding weights and KV cache");
  activations_ = Arena(std::max<size_t>(activation_bytes, 1), "decoding activations");
  const graph::SharedArenas shared{.model_state = &model_state_, .activations = &activations_};
  const auto rope =
      std::make_shared<const ops::RopeTable>(models::rope_config(spec_, options_.max_target_length));
  for (Step& step : specs) {
    StepPlan p;
    p.rows = step.rows;
    p.plan = std::make_unique<graph::Plan>(std::move(step.spec), shared);
    const auto& values = p.plan->graph().values();
    for (size_t i = 0; i < values.size(); ++i) {
      const auto id = static_cast<graph::ValueId>(i);
      if (values[i].name == "inputs") p.in.tokens = id;
      if (values[i].name == "inputs_position") p.in.positions = id;
      if (values[i].name == "decode_slots") p.in.slots = id;
      if (values[i].name == "logit_rows") p.in.logit_rows = id;
    }
    TESSERA_ASSERT(p.plan->graph().outputs().size() == 1);
    p.logits = p.plan->graph().outputs()[0];
    p.exec = std::make_unique<graph::Executor>(*p.plan, rope);
    (step.prefill ? prefill_ : decode_).push_back(std::move(p));
  }
  // The parameters, into the shared masters (kernels transposed to [out, in]); then the compute
  // copies.
  graph::Plan& first = *decode_[0].plan;
  for (graph::ValueId id : first.graph().params()) {
    const graph::Value& v = first.graph().value(id);
    const Shape shape = v.transposed ? Shape{v.shape[1], v.shape[0]} : v.shape;  // as a checkpoint has it
    const Tensor src = params(v.name);
    TESSERA_CHECK_SHAPE(
        src.defined() && src.dtype() == DType::kF32 && src.shape() == shape && src.is_contiguous(),
        "engine: parameter '{}' must be contiguous float32 {}, got {}", v.name, shape.str(),
        src.defined() ? src.str() : std::string("nothing"));
    if (v.transposed)
      transpose_into(src, first.state(id));
    else
      std::memcpy(first.state(id).data(), src.data(), src.nbytes());
  }
  models::sync_compute_copies(first);
  warm_up();
}

void GraphEngine::warm_up() {
  for (auto* plans : {&prefill_, &decode_})
    for (StepPlan& p : *plans) {
      const bool prefill = plans == &prefill_;
      auto* tok = p.plan->view(p.in.tokens).ptr<int32_t>();
      auto* pos = p.plan->view(p.in.positions).ptr<int32_t>();
      auto* slots = p.plan->view(p.in.slots).ptr<int32_t>();
      for (int64_t i = 0; i < p.rows; ++i) {
        tok[i] = 0;
        pos[i] = prefill ? static_cast<int32_t>(i) : 0;
        slots[i] = prefill ? 0 : (i < options_.max_slots ? static_cast<int32_t>(i) : -1);
      }
      if (prefill) p.plan->view(p.in.logit_rows).ptr<int32_t>()[0] = static_cast<int32_t>(p.rows - 1);
      p.exec->infer();
    }
}

void GraphEngine::run(StepPlan& p, int64_t n, float* out) {
  p.exec->infer();
  const Tensor logits = p.plan->view(p.logits);
  ops::convert(logits.slice0(0, n), Tensor(out, Shape{n, spec_.vocab_size}, DType::kF32));
}

void GraphEngine::prefill(int slot, std::span<const int32_t> prompt, std::span<float> logits) {
  check_prefill(slot, prompt, logits);
  const auto P = static_cast<int64_t>(prompt.size());
  length_[static_cast<size_t>(slot)] = 0;  // cleared first: a failed prefill leaves the slot free
  for (int64_t p0 = 0; p0 < P;) {
    // The largest chunk that fits what is left: the binary digits of P, largest first.
    const auto rows = static_cast<int64_t>(std::bit_floor(static_cast<uint64_t>(P - p0)));
    StepPlan& p = prefill_[static_cast<size_t>(std::countr_zero(static_cast<uint64_t>(rows)))];
    TESSERA_ASSERT(p.rows == rows);
    std::memcpy(p.plan->view(p.in.tokens).data(), prompt.data() + p0, static_cast<size_t>(rows) * 4);
    auto* pos = p.plan->view(p.in.positions).ptr<int32_t>();
    auto* slots = p.plan->view(p.in.slots).ptr<int32_t>();
    for (int64_t i = 0; i < rows; ++i) {
      pos[i] = static_cast<int32_t>(p0 + i);
      slots[i] = slot;
    }
    p.plan->view(p.in.logit_rows).ptr<int32_t>()[0] = static_cast<int32_t>(rows - 1);
    p0 += rows;
    if (p0 < P) {
      p.exec->infer();  // an earlier chunk: its keys and values are what matters
    } else {
      run(p, 1, logits.data());
    }
  }
  length_[static_cast<size_t>(slot)] = P;
}

void GraphEngine::decode(std::span<const int> slots, std::span<const int32_t> tokens,
                         std::span<float> logits) {
  check_decode(slots, tokens, logits);
  const auto M = static_cast<int64_t>(slots.size());
  if (M == 0) return;
  const auto rows = static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(M)));
  StepPlan& p = decode_[static_cast<size_t>(std::countr_zero(static_cast<uint64_t>(rows)))];
  TESSERA_ASSERT(p.rows == rows);
  auto* tok = p.plan->view(p.in.tokens).ptr<int32_t>();
  auto* pos = p.plan->view(p.in.positions).ptr<int32_t>();
  auto* row_slot = p.plan->view(p.in.slots).ptr<int32_t>();
  for (int64_t i = 0; i < M; ++i) {
    const int s = slots[static_cast<size_t>(i)];
    const int64_t len = length_[static_cast<size_t>(s)];
    tok[i] = tokens[static_cast<size_t>(i)];
    pos[i] = static_cast<int32_t>(len);
    row_slot[i] = s;
  }
  for (int64_t i = M; i < rows; ++i) tok[i] = 0, pos[i] = 0, row_slot[i] = -1;  // padding rows
  run(p, M, logits.data());
  for (int64_t i = 0; i < M; ++i) ++length_[static_cast<size_t>(slots[static_cast<size_t>(i)])];
}

void GraphEngine::set_profiling(bool on) {
  for (StepPlan& p : decode_) {
    if (on) p.exec->clear_profile();
    p.exec->set_profiling(on);
  }
}

std::string GraphEngine::profile_report() const {
  std::string s;
  for (const StepPlan& p : decode_)
    if (p.exec->profiled())
      s += fmt::format("decode steps of {} row(s):\n{}", p.rows, p.exec->profile_report());
  return s;
}

void check_buildable(const models::ModelSpec& s, const EngineOptions& o) {
  if (s.dtype != DType::kF32 && s.dtype != DType::kBF16)
    fail(ErrorKind::kConfig, "dtype {}: the engine computes in float32 or bfloat16", dtype_name(s.dtype));
  if (s.head_dim < 1 || s.head_dim > 256)
    fail(ErrorKind::kConfig, "head_dim {}: decoding attention takes head dims of 1 to 256", s.head_dim);
  if (o.max_slots < 1)
    fail(ErrorKind::kConfig, "the engine needs at least one slot, got max_slots {}", o.max_slots);
  if (o.max_target_length < 1 || o.max_target_length > std::numeric_limits<int32_t>::max())
    fail(ErrorKind::kConfig, "max_target_length {} must be in [1, 2^31)", o.max_target_length);
  if (o.max_prefill_length < 1 || o.max_prefill_length > o.max_target_length)
    fail(ErrorKind::kConfig, "max_prefill_predict_length {} must be in [1, max_target_length = {}]",
         o.max_prefill_length, o.max_target_length);
}

}  // namespace

std::vector<std::pair<std::string, Shape>> parameter_shapes(const models::ModelSpec& spec) {
  // The training graph's parameter list (models/decoder.h), built for one token: the engine reads
  // exactly what training writes.
  models::ModelSpec one = spec;
  one.batch = 1;
  one.seq = 1;
  graph::Graph g;
  models::build_decoder(g, one);
  std::vector<std::pair<std::string, Shape>> out;
  for (graph::ValueId id : g.params()) out.emplace_back(g.value(id).name, g.value(id).shape);
  return out;
}

std::unique_ptr<Engine> make_engine(const models::ModelSpec& spec, const EngineOptions& options,
                                    const ParameterSource& params) {
  check_buildable(spec, options);
  return std::make_unique<GraphEngine>(spec, options, params);
}

}  // namespace tessera::infer
