// What the golden tests (tests/models/*_golden_test.cc) share: a plan fed the golden file's batch.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tessera/core/safetensors.h"
#include "tessera/graph/executor.h"
#include "tessera/graph/plan.h"
#include "tessera/infer/engine.h"
#include "tessera/infer/generate.h"
#include "tessera/models/blocks.h"
#include "tessera/models/decoder.h"
#include "tessera/models/init.h"
#include "testing/op_test_util.h"

namespace tessera::testing {

// The file's inputs and targets, positions 0..T-1 in one segment per row, and dloss = 1 / N.
inline void feed_golden_batch(graph::Plan& plan, const models::DecoderInputs& in,
                              const models::ModelSpec& spec, const SafetensorsFile& file) {
  const Tensor inputs = file.get("inputs"), targets = file.get("targets");
  std::memcpy(plan.view(in.tokens).data(), inputs.data(), inputs.nbytes());
  std::memcpy(plan.view(in.targets).data(), targets.data(), targets.nbytes());
  auto* pos = plan.view(in.positions).ptr<int32_t>();
  auto* seg = plan.view(in.segment_ids).ptr<int32_t>();
  for (int64_t b = 0; b < spec.batch; ++b)
    for (int64_t t = 0; t < spec.seq; ++t) {
      pos[b * spec.seq + t] = static_cast<int32_t>(t);
      seg[b * spec.seq + t] = 1;
    }
  const Tensor& dloss = plan.view(plan.dloss());
  for (int64_t i = 0; i < dloss.numel(); ++i)
    dloss.ptr<float>()[i] = 1.0f / static_cast<float>(dloss.numel());
}

// A Hugging Face Linear weight [rows, cols] (out, in) as Tessera's kernel [cols, rows] (in, out).
inline std::vector<double> transposed(const std::vector<double>& v, int64_t rows, int64_t cols) {
  std::vector<double> out(v.size());
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      out[static_cast<size_t>(j * rows + i)] = v[static_cast<size_t>(i * cols + j)];
  return out;
}

// One Tessera parameter and its Hugging Face name, for the families whose Linear weights are
// [out, in] there (transpose) and whose other tensors are Tessera's as they are.
struct HfName {
  std::string tessera, hf;
  bool transpose = false;
};

// The file's tensor `prefix` + n.hf in Tessera's layout.
inline std::vector<double> hf_values(const SafetensorsFile& f, const std::string& prefix, const HfName& n) {
  const Tensor t = f.get(prefix + n.hf);
  std::vector<double> v = to_vector(t);
  if (!n.transpose) return v;
  return transposed(v, t.dim(0), t.dim(1));
}

// The logits of the tokens whose routing is not a near-tie: a token whose k-th and (k+1)-th router
// logits (float32, from the file's router_logits.<layer> [N, X]) are closer than `margin` in any
// layer may pick another expert in bfloat16 in either implementation. Fills got/want with the
// kept tokens' rows of `all_got` / `all_want` ([N, V]); returns how many tokens were kept.
inline int64_t logits_of_clear_routing(const SafetensorsFile& file, int64_t layers, int64_t k, double margin,
                                       const std::vector<double>& all_got,
                                       const std::vector<double>& all_want, int64_t vocab,
                                       std::vector<double>& got, std::vector<double>& want) {
  const Tensor first = file.get("router_logits.0");
  const int64_t n_tokens = first.dim(0), experts = first.dim(1);
  std::vector<bool> close(static_cast<size_t>(n_tokens), false);
  for (int64_t l = 0; l < layers; ++l) {
    const Tensor r = file.get("router_logits." + std::to_string(l));
    for (int64_t n = 0; n < n_tokens; ++n) {
      std::vector<float> row(r.ptr<float>() + n * experts, r.ptr<float>() + (n + 1) * experts);
      std::sort(row.begin(), row.end(), std::greater<>());
      if (row[static_cast<size_t>(k - 1)] - row[static_cast<size_t>(k)] < margin)
        close[static_cast<size_t>(n)] = true;
    }
  }
  int64_t kept = 0;
  for (int64_t n = 0; n < n_tokens; ++n) {
    if (close[static_cast<size_t>(n)]) continue;
    got.insert(got.end(), all_got.begin() + n * vocab, all_got.begin() + (n + 1) * vocab);
    want.insert(want.end(), all_want.begin() + n * vocab, all_want.begin() + (n + 1) * vocab);
    ++kept;
  }
  return kept;
}

// The id of the value named `name` in the plan's graph (a test failure and 0 when there is none).
inline graph::ValueId value_named(const graph::Plan& plan, const std::string& name) {
  const auto& v = plan.graph().values();
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i].name == name) return static_cast<graph::ValueId>(i);
  ADD_FAILURE() << "no value " << name;
  return 0;
}

// A golden model: the plan of `spec` (remat policy `remat`, default none) and its executor, every parameter
// set from the golden file through `param_values(tessera_name)` (the file's values in Tessera's layout), the
// file's batch fed, and the aux-loss seed set so that the objective is the mean token loss plus
// the mean over layers of the load-balance losses.
struct GoldenPlan {
  models::ModelSpec spec;
  std::unique_ptr<graph::Plan> plan;
  std::unique_ptr<graph::Executor> exec;
  models::DecoderInputs in;

  GoldenPlan(models::ModelSpec s, const SafetensorsFile& file, const std::vector<std::string>& param_names,
             const std::function<std::vector<double>(size_t)>& param_values,
             const std::string& remat = "none", bool fuse_gradient_sums = true)
      : spec(std::move(s)) {
    graph::Graph gr;
    in = models::build_decoder(gr, spec);
    plan = std::make_unique<graph::Plan>(
        std::move(gr), graph::PlanOptions{.remat_policy = remat, .fuse_gradient_sums = fuse_gradient_sums});
    exec = std::make_unique<graph::Executor>(
        *plan, std::make_unique<ops::RopeTable>(models::rope_config(spec, spec.seq)));
    EXPECT_EQ(param_names.size(), plan->graph().params().size());
    for (size_t p = 0; p < param_names.size(); ++p) {
      const std::vector<double> v = param_values(p);
      const Tensor& dst = plan->state(find(param_names[p]));
      EXPECT_EQ(dst.numel(), static_cast<int64_t>(v.size())) << param_names[p];
      for (int64_t i = 0; i < dst.numel(); ++i) dst.ptr<float>()[i] = static_cast<float>(v[i]);
    }
    models::sync_compute_copies(*plan);
    feed_golden_batch(*plan, in, spec, file);
    if (plan->daux() != graph::kNoValue)
      plan->view(plan->daux()).ptr<float>()[0] = 1.0f / static_cast<float>(spec.num_decoder_layers);
  }

  graph::ValueId find(const std::string& name) const { return value_named(*plan, name); }
  std::vector<double> values(const std::string& name) const {
    const Tensor& t = plan->view(find(name));
    std::vector<double> v(static_cast<size_t>(t.numel()));
    for (int64_t i = 0; i < t.numel(); ++i)
      v[static_cast<size_t>(i)] =
          t.dtype() == DType::kBF16 ? bf16_to_f32(t.ptr<uint16_t>()[i]) : t.ptr<float>()[i];
    return v;
  }
  const Tensor& grad_of(const std::string& param) const {
    return plan->view(plan->graph().value(find(param)).grad);
  }
  // The mean over layers of the load-balance losses of the last pass.
  double lb_loss() const { return exec->aux_loss() / static_cast<double>(spec.num_decoder_layers); }
};

// Decoding the golden model with make_engine (the graph engine for the MoE families) on the plan's
// f32 parameters: the prompt greedy.prompt [P] of the file's first sequence, then one token per
// decode step. `step_logits` receives the engine's logits of positions P-1 .. T-1 of that
// sequence (prefill, then each decode step fed the file's own next input), for comparison with
// the file's `logits` row by row; the return value is the greedy generation of
// greedy.tokens.size() new tokens (generate(), as transformers' generate(do_sample=False)).
inline std::vector<int32_t> decode_golden(const GoldenPlan& m, const SafetensorsFile& file,
                                          std::vector<std::vector<float>>& step_logits) {
  const Tensor prompt_t = file.get("greedy.prompt"), greedy = file.get("greedy.tokens"),
               inputs = file.get("inputs");
  const std::vector<int32_t> prompt(prompt_t.ptr<int32_t>(), prompt_t.ptr<int32_t>() + prompt_t.numel());
  const int64_t P = prompt_t.numel(), T = m.spec.seq, V = m.spec.vocab_size;
  const auto source = [&m](const std::string& name) { return m.plan->state(m.find(name)); };
  models::ModelSpec spec = m.spec;
  spec.dtype = DType::kF32;
  auto engine = infer::make_engine(
      spec, {.max_slots = 1, .max_target_length = std::max(T, P + greedy.numel()), .max_prefill_length = P},
      source);
  step_logits.assign(static_cast<size_t>(T - P + 1), std::vector<float>(static_cast<size_t>(V)));
  engine->prefill(0, prompt, step_logits[0]);
  for (int64_t t = P; t < T; ++t) {
    const int slot[] = {0};
    engine->decode(slot, std::span(inputs.ptr<int32_t>() + t, 1),
                   step_logits[static_cast<size_t>(t - P + 1)]);
  }
  engine->release(0);
  infer::GenerateOptions g;
  g.max_new_tokens = greedy.numel();
  return infer::generate(*engine, {prompt}, g)[0].tokens;
}

// decode_golden's step logits equal the file's `logits` at those positions of the first sequence
// (2e-5 relative plus 2e-6 absolute, the float32 forward tests' bound), and its greedy tokens are
// the file's greedy.tokens.
inline void expect_decoding_matches(const GoldenPlan& m, const SafetensorsFile& file) {
  std::vector<std::vector<float>> steps;
  const std::vector<int32_t> tokens = decode_golden(m, file, steps);
  const std::vector<double> want = to_vector(file.get("logits"));  // [B, T, V]
  const int64_t V = m.spec.vocab_size, P = file.get("greedy.prompt").numel();
  for (size_t i = 0; i < steps.size(); ++i) {
    SCOPED_TRACE(P - 1 + static_cast<int64_t>(i));
    const auto row = want.begin() + (P - 1 + static_cast<int64_t>(i)) * V;
    EXPECT_TRUE(all_close(std::vector<double>(steps[i].begin(), steps[i].end()),
                          std::vector<double>(row, row + V), 2e-5, 2e-6));
  }
  const Tensor greedy = file.get("greedy.tokens");
  EXPECT_EQ(tokens, std::vector<int32_t>(greedy.ptr<int32_t>(), greedy.ptr<int32_t>() + greedy.numel()));
}

}  // namespace tessera::testing
