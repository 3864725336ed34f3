// Gradient accumulation: two micro-steps of one sequence each give the loss, gradients and AdamW
// update of one step over both sequences (float32, within reordering tolerance: the per-token
// gradients are the same numbers summed in a different order).
#include <gtest/gtest.h>

#include <cstring>

#include "tessera/graph/executor.h"
#include "tessera/models/decoder.h"
#include "tessera/models/init.h"
#include "testing/op_test_util.h"

namespace tessera {
namespace {

models::ModelSpec tiny(int64_t batch) {
  models::ModelSpec s;
  s.emb_dim = 32;
  s.num_query_heads = 4;
  s.num_kv_heads = 2;
  s.head_dim = 8;
  s.mlp_dim = 48;
  s.num_decoder_layers = 2;
  s.vocab_size = 61;
  s.batch = batch;
  s.seq = 9;
  return s;
}

struct TrainRun {
  models::ModelSpec spec;
  models::DecoderInputs in;
  std::unique_ptr<graph::Plan> plan;
  std::unique_ptr<graph::Executor> exec;
  explicit TrainRun(int64_t batch) : spec(tiny(batch)) {
    graph::Graph g;
    in = models::build_decoder(g, spec);
    plan = std::make_unique<graph::Plan>(std::move(g), graph::PlanOptions{.remat_policy = "full"});
    ops::RopeConfig rc{.max_timescale = 10000, .head_dim = spec.head_dim, .max_positions = spec.seq};
    exec = std::make_unique<graph::Executor>(*plan, std::make_unique<ops::RopeTable>(rc));
    models::init_params(*plan, 7);
  }
  // Rows [row0, row0 + batch) of a fixed token table; every token counts; dloss = 1 / total.
  void feed(int64_t row0, int64_t total_tokens) {
    const int64_t T = spec.seq;
    for (int64_t b = 0; b < spec.batch; ++b)
      for (int64_t t = 0; t < T; ++t) {
        int64_t r = row0 + b;
        plan->view(in.tokens).ptr<int32_t>()[b * T + t] = static_cast<int32_t>((r * 31 + t * 7) % 61);
        plan->view(in.targets).ptr<int32_t>()[b * T + t] = static_cast<int32_t>((r * 31 + t * 7 + 5) % 61);
        plan->view(in.positions).ptr<int32_t>()[b * T + t] = static_cast<int32_t>(t);
        plan->view(in.segment_ids).ptr<int32_t>()[b * T + t] = 1;
      }
    const Tensor& d = plan->view(plan->dloss());
    for (int64_t i = 0; i < d.numel(); ++i) d.ptr<float>()[i] = 1.0f / static_cast<float>(total_tokens);
  }
};

TEST(GradientAccumulation, TwoMicroStepsEqualOneLargerBatch) {
  TrainRun big(2), small(1);
  const int64_t total = 2 * big.spec.seq;
  big.exec->zero_grads();
  big.feed(0, total);
  double loss_big = big.exec->forward_backward();
  small.exec->zero_grads();
  double loss_small = 0;
  for (int64_t m = 0; m < 2; ++m) {
    small.feed(m, total);
    loss_small += small.exec->forward_backward();
  }
  EXPECT_NEAR(loss_big / total, loss_small / total, 1e-6);
  graph::OptimizerStep step;
  step.adamw = {.lr = 1e-2, .b1 = 0.9, .b2 = 0.95, .eps = 1e-8, .weight_decay = 0.1, .step = 1};
  step.clip_threshold = 1.0;
  auto rb = big.exec->apply_optimizer(step);
  auto rs = small.exec->apply_optimizer(step);
  EXPECT_NEAR(rb.grad_norm, rs.grad_norm, 1e-5 * rb.grad_norm);
  const auto& values = big.plan->graph().values();
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i].kind != graph::ValueKind::kParam) continue;
    SCOPED_TRACE(values[i].name);
    auto id = static_cast<graph::ValueId>(i);
    EXPECT_TRUE(testing::all_close(testing::to_vector(small.plan->view(values[i].grad)),
                                   testing::to_vector(big.plan->view(values[i].grad)), 1e-4, 1e-7));
    EXPECT_TRUE(testing::all_close(testing::to_vector(small.plan->view(id)),
                                   testing::to_vector(big.plan->view(id)), 0, 1e-5));
  }
}

}  // namespace
}  // namespace tessera
