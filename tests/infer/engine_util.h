// What the engine tests (engine_test.cc, graph_engine_test.cc) share: a tiny model, the training
// graph's full forward as the reference, and a check that an engine's prefill and decode logits
// follow it position by position. The tolerances are engine_test.cc's (its header states them).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "tessera/graph/executor.h"
#include "tessera/infer/engine.h"
#include "tessera/models/decoder.h"
#include "tessera/models/init.h"
#include "testing/op_test_util.h"

namespace tessera::testing {

inline models::ModelSpec tiny_spec(DType dtype) {
  models::ModelSpec s;
  s.emb_dim = 40;
  s.num_query_heads = 4;
  s.num_kv_heads = 2;
  s.head_dim = 10;
  s.mlp_dim = 70;
  s.num_decoder_layers = 2;
  s.vocab_size = 101;
  s.rope_theta = 500.0;
  s.dtype = dtype;
  return s;
}

// The training graph for one sequence of T tokens, with random weights (norm scales away from 1
// so that a misplaced norm shows), run forward only.
class Reference {
 public:
  Reference(models::ModelSpec spec, int64_t T, uint64_t seed) : spec_(spec) {
    spec_.batch = 1;
    spec_.seq = T;
    graph::Graph g;
    in_ = models::build_decoder(g, spec_);
    plan_ = std::make_unique<graph::Plan>(std::move(g), graph::PlanOptions{.remat_policy = "none"});
    exec_ = std::make_unique<graph::Executor>(
        *plan_, std::make_unique<ops::RopeTable>(models::rope_config(spec_, T)));
    models::init_params(*plan_, seed);
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> u(0.8f, 1.2f);
    const auto& values = plan_->graph().values();
    for (size_t i = 0; i < values.size(); ++i) {
      if (values[i].kind != graph::ValueKind::kParam) continue;
      params_[values[i].name] = plan_->view(static_cast<graph::ValueId>(i));
      if (values[i].name.ends_with(".scale")) {
        const Tensor& t = plan_->view(static_cast<graph::ValueId>(i));
        for (int64_t j = 0; j < t.numel(); ++j) t.ptr<float>()[j] = u(rng);
      }
    }
    models::sync_compute_copies(*plan_);
  }

  const std::map<std::string, Tensor>& params() const { return params_; }
  // After a test edits the f32 masters: refreshes the compute copies.
  void refresh() { models::sync_compute_copies(*plan_); }

  infer::ParameterSource source() const {
    return [this](const std::string& name) { return params_.at(name); };
  }

  // Logits [T, V] of the full forward over `tokens` (T of them).
  std::vector<std::vector<double>> logits(const std::vector<int32_t>& tokens) {
    const int64_t T = spec_.seq, V = spec_.vocab_size;
    for (int64_t t = 0; t < T; ++t) {
      plan_->view(in_.tokens).ptr<int32_t>()[t] = tokens[static_cast<size_t>(t)];
      plan_->view(in_.targets).ptr<int32_t>()[t] = 0;
      plan_->view(in_.positions).ptr<int32_t>()[t] = static_cast<int32_t>(t);
      plan_->view(in_.segment_ids).ptr<int32_t>()[t] = 1;
    }
    exec_->forward_only();
    const std::vector<double> all = to_vector(plan_->view(find("decoder.logits")));
    std::vector<std::vector<double>> rows;
    for (int64_t t = 0; t < T; ++t) rows.emplace_back(all.begin() + t * V, all.begin() + (t + 1) * V);
    return rows;
  }

 private:
  graph::ValueId find(const std::string& name) const {
    const auto& v = plan_->graph().values();
    for (size_t i = 0; i < v.size(); ++i)
      if (v[i].name == name) return static_cast<graph::ValueId>(i);
    throw std::runtime_error("no value " + name);
  }

  models::ModelSpec spec_;
  models::DecoderInputs in_;
  std::unique_ptr<graph::Plan> plan_;
  std::unique_ptr<graph::Executor> exec_;
  std::map<std::string, Tensor> params_;
};

inline std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& v : t) v = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
  return t;
}

inline ::testing::AssertionResult logits_match(const std::vector<float>& got, const std::vector<double>& want,
                                               DType dtype) {
  double peak = 0;
  for (double w : want) peak = std::max(peak, std::abs(w));
  std::vector<double> tol(want.size());
  for (size_t i = 0; i < want.size(); ++i)
    tol[i] = dtype == DType::kF32 ? 1e-5 * peak : 10 * 0x1.0p-8 * peak + 0x1.0p-8 * std::abs(want[i]);
  return within(std::vector<double>(got.begin(), got.end()), want, tol);
}

// Prefills `prompt_len` tokens of `seq` into `slot`, then decodes the rest one token per step;
// every step's logits must match the reference's row.
inline void check_sequence(infer::Engine& engine, Reference& ref, const models::ModelSpec& spec, int slot,
                           const std::vector<int32_t>& seq, int64_t prompt_len) {
  const auto want = ref.logits(seq);
  const int64_t V = spec.vocab_size;
  std::vector<float> logits(static_cast<size_t>(V));
  engine.prefill(slot, std::span(seq.data(), static_cast<size_t>(prompt_len)), logits);
  EXPECT_EQ(engine.length(slot), prompt_len);
  EXPECT_TRUE(logits_match(logits, want[static_cast<size_t>(prompt_len - 1)], spec.dtype)) << "prefill";
  for (auto t = static_cast<size_t>(prompt_len); t < seq.size(); ++t) {
    const int slots[] = {slot};
    engine.decode(slots, std::span(&seq[t], 1), logits);
    EXPECT_TRUE(logits_match(logits, want[t], spec.dtype)) << "decode at position " << t;
  }
  EXPECT_EQ(engine.length(slot), static_cast<int64_t>(seq.size()));
}

}  // namespace tessera::testing
