// Expert parallelism in the plan, without running it (graph/sharding_expert.h): the receive
// buffer's rows, each rank's experts of the expert weights (pieces in global coordinates, so init
// and checkpoints see the one-device tensor), the exchange ops around the grouped matmuls, the
// analytic all-to-all bytes, and what is refused by name.
#include <gtest/gtest.h>

#include <filesystem>

#include "tessera/compile/planner.h"
#include "tessera/core/error.h"
#include "tessera/core/source_dir.h"
#include "tessera/graph/param_sync.h"
#include "tessera/graph/sharding_expert.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

Config config(std::vector<std::string> overrides, int devices) {
  overrides.insert(overrides.end(),
                   {"model_name=mixtral-test", "max_target_length=32", "dtype=float32", "steps=1",
                    "enable_checkpointing=false", "enable_tensorboard=false", "remat_policy=none"});
  return load_config(tessera::source_dir() / "configs" / "base.yml", overrides, {devices, 1});
}

dist::MeshSizes coords_with(MeshAxis axis, int64_t c) {
  dist::MeshSizes s{};
  s[static_cast<int>(axis)] = c;
  return s;
}

TEST(RaggedBuffer, WorstCaseOrFactorOfTheBalancedLoad) {
  // N = 64 tokens, top-2 of 4 experts: at most min(EP * k, X) = 4 rows per token arrive on EP = 2.
  EXPECT_EQ(graph::ragged_buffer_rows(64, 2, 4, 2, -1), 64 * 4);
  EXPECT_EQ(graph::ragged_buffer_rows(64, 2, 16, 2, -1), 64 * 4);
  EXPECT_EQ(graph::ragged_buffer_rows(64, 2, 16, 8, -1), 64 * 16);
  EXPECT_EQ(graph::ragged_buffer_rows(64, 2, 16, 2, 1.5), 192);
  EXPECT_EQ(graph::ragged_buffer_rows(64, 2, 4, 2, 8.0), 64 * 4);  // never above the worst case
}

TEST(ExpertPlan, EachRankHoldsItsExpertsAndExchangesAroundTheGroupedMatmuls) {
  const Config cfg =
      config({"ici_expert_parallelism=2", "ici_fsdp_parallelism=1", "per_device_batch_size=2"}, 2);
  const compile::RankPlan rp = compile::build_rank_plan(cfg, coords_with(MeshAxis::kExpert, 1));
  const graph::PlanSpec& p = rp.plan;
  int experts_split = 0;
  for (const graph::ParamLayout& L : p.layouts()) {
    const graph::Value& v = p.graph().value(L.param);
    if (v.logical_axes.empty() || v.logical_axes[0] != "exp") {
      EXPECT_EQ(L.expert_parts, 1) << v.name;
      continue;
    }
    ++experts_split;
    EXPECT_EQ(v.shape[0], 2) << v.name;
    EXPECT_EQ(L.expert_parts, 2);
    EXPECT_EQ(L.stored.whole[0], 4) << v.name;
    EXPECT_EQ(L.stored.offset[0], 2) << v.name;  // rank 1 holds experts 2 and 3
  }
  EXPECT_EQ(experts_split, 2 * 3);  // wi_0, wi_1, wo per layer
  int to = 0, from = 0, to_bwd = 0, from_bwd = 0;
  for (const graph::Node& n : p.graph().nodes()) {
    to += n.op == graph::OpKind::kMoeToExperts;
    from += n.op == graph::OpKind::kMoeFromExperts;
    to_bwd += n.op == graph::OpKind::kMoeToExpertsBwd;
    from_bwd += n.op == graph::OpKind::kMoeFromExpertsBwd;
    if (n.op == graph::OpKind::kGroupedMatmul && !n.attr<graph::GroupedMatmulAttrs>().weight_grad) {
      EXPECT_EQ(p.graph().value(n.in[1]).shape[0], 2) << n.name;  // the local experts' weights
    }
  }
  EXPECT_EQ(to, 2);
  EXPECT_EQ(from, 2);
  EXPECT_EQ(to_bwd, 2);
  EXPECT_EQ(from_bwd, 2);
  // Bytes: 2 layers x 4 exchanges x (N = 2 x 32 tokens) x k 2 x E 64 x 4 bytes; the counts' all-gathers
  // 2 layers x EP 2 x X 4 x 4 bytes.
  const dist::TrafficCounters t = graph::expected_traffic(p, 1);
  EXPECT_EQ(t.all_to_all, 2u * 4 * 64 * 2 * 64 * 4);
  EXPECT_EQ(t.all_gather, 2u * 2 * 4 * 4);
  EXPECT_NE(p.summary().find("8 all-to-alls"), std::string::npos) << p.summary();
}

// The backward dispatch exchange starts, then the layer's expert weight gradients run (three
// grouped matmul .dw: wi_0, wi_1, wo; mixtral-test has no expert biases), then the wait, before
// anything reads the exchanged rows; the forward exchanges and the combine's backward stay whole.
TEST(ExpertPlan, TheBackwardDispatchOverlapsTheExpertWeightGradients) {
  const Config cfg =
      config({"ici_expert_parallelism=2", "ici_fsdp_parallelism=1", "per_device_batch_size=2"}, 2);
  const compile::RankPlan rp = compile::build_rank_plan(cfg, coords_with(MeshAxis::kExpert, 0));
  const auto& nodes = rp.plan.graph().nodes();
  int exchanges = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const graph::Node& n = nodes[i];
    if (n.op == graph::OpKind::kMoeToExperts || n.op == graph::OpKind::kMoeFromExperts ||
        n.op == graph::OpKind::kMoeFromExpertsBwd) {
      EXPECT_FALSE(n.attr<graph::MoeExchangeAttrs>().deferred) << n.name;
    }
    if (n.op != graph::OpKind::kMoeToExpertsBwd) continue;
    ++exchanges;
    SCOPED_TRACE(n.name);
    EXPECT_TRUE(n.attr<graph::MoeExchangeAttrs>().deferred);
    ASSERT_LT(i + 4, nodes.size());
    for (size_t j = i + 1; j <= i + 3; ++j) {
      EXPECT_EQ(nodes[j].op, graph::OpKind::kGroupedMatmul) << nodes[j].name;
      EXPECT_TRUE(nodes[j].attr<graph::GroupedMatmulAttrs>().weight_grad) << nodes[j].name;
      EXPECT_EQ(nodes[j].layer, n.layer);
    }
    const graph::Node& wait = nodes[i + 4];
    EXPECT_EQ(wait.op, graph::OpKind::kMoeExchangeWait);
    EXPECT_EQ(wait.in, n.out);  // the receive buffer and staging stay live until the wait
    // No node before the wait reads what the exchange writes.
    for (size_t j = i + 1; j < i + 4; ++j)
      for (graph::ValueId v : nodes[j].in) EXPECT_TRUE(v != n.out[0] && v != n.out[1]) << nodes[j].name;
  }
  EXPECT_EQ(exchanges, 2);
  // One process has no exchange to split.
  const compile::RankPlan one = compile::build_rank_plan(config({"per_device_batch_size=2"}, 1), {});
  for (const graph::Node& n : one.plan.graph().nodes()) EXPECT_NE(n.op, graph::OpKind::kMoeExchangeWait);
}

TEST(ExpertPlan, FsdpAlsoShardsTheExpertWeights) {
  const Config cfg =
      config({"ici_expert_parallelism=2", "ici_fsdp_parallelism=2", "per_device_batch_size=1"}, 4);
  const compile::RankPlan rp = compile::build_rank_plan(cfg, coords_with(MeshAxis::kFsdp, 1));
  for (const graph::ParamLayout& L : rp.plan.layouts()) {
    const graph::Value& v = rp.plan.graph().value(L.param);
    if (v.name.ends_with("wi_0")) {
      EXPECT_EQ(L.fsdp_dim, 1) << v.name;  // embed_moe
      EXPECT_EQ(L.stored.shape, (Shape{2, 32, 96})) << v.name;
    }
  }
}

TEST(ExpertPlan, RefusesWhatIsNotBuiltByName) {
  auto error_of = [](const Config& cfg) {
    try {
      compile::build_rank_plan(cfg, dist::MeshSizes{});
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error_of(config({"ici_expert_parallelism=2", "ici_fsdp_parallelism=1", "per_device_batch_size=2",
                             "sparse_matmul=false"},
                            2))
                .find("dropless path (sparse_matmul=true)"),
            std::string::npos);
  EXPECT_NE(
      error_of(config({"ici_expert_parallelism=8", "ici_fsdp_parallelism=1", "per_device_batch_size=1"}, 8))
          .find("do not split over 8 expert ranks"),
      std::string::npos);
  EXPECT_NE(error_of(config({"ici_expert_parallelism=2", "ici_fsdp_parallelism=1", "per_device_batch_size=2",
                             "ici_data_parallelism=1", "shard_optimizer_over_data=true"},
                            2))
                .find("shard_optimizer_over_data (ZeRO-1) together with expert parallelism"),
            std::string::npos);
}

}  // namespace
}  // namespace tessera
