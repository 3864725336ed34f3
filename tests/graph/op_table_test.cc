// The op table and the tensor-parallel sharding pass: every OpKind has one complete entry; the
// pass shards parameters and rewrites an MLP and a vocabulary into Megatron's layout (f before a
// column-parallel matmul, g after a row-parallel one, vocab-parallel embedding and loss), with
// local shapes inferred by the entries; and it refuses splits its rules do not build, naming the
// node.
#include "tessera/graph/op_table.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "tessera/core/error.h"
#include "tessera/graph/sharding.h"

namespace tessera {
namespace {

using graph::Graph;
using graph::OpKind;
using graph::ValueId;

TEST(OpTable, EveryKindHasOneCompleteEntry) {
  std::set<std::string> names;
  for (int i = 0; i < graph::kNumOpKinds; ++i) {
    const auto kind = static_cast<OpKind>(i);
    const graph::OpDef& d = graph::op_def(kind);
    EXPECT_EQ(d.kind, kind);
    ASSERT_NE(d.name, nullptr);
    EXPECT_TRUE(names.insert(d.name).second) << d.name << " twice";
    EXPECT_NE(d.run, nullptr) << d.name;
    // A forward op (one a Graph method builds) infers its outputs and has a backward rule.
    if (d.infer) {
      EXPECT_NE(d.backward, nullptr) << d.name;
    }
  }
  EXPECT_STREQ(graph::op_name(OpKind::kRmsNormBwd), "rms_norm_bwd");
}

// x [N, E] -> norm -> wi [E, F] (split on mlp: columns) -> glu -> wo [F, E] (split on mlp: rows)
// -> + x -> logits over an embedding table split by vocabulary -> loss.
struct Mlp {
  Graph g;
  ValueId emb, wi0, wi1, wo, gamma, loss;
  static constexpr int64_t N = 6, E = 8, F = 12, V = 10;

  explicit Mlp(int64_t tp_size, int64_t tp_rank) {
    g.set_tensor_parallel({.size = tp_size, .rank = tp_rank, .axes = {"mlp", "vocab"}});
    ValueId ids = g.input("inputs", Shape{N}, DType::kI32);
    ValueId targets = g.input("targets", Shape{N}, DType::kI32);
    emb = g.param("embedding", Shape{V, E}, {"vocab", "embed"});
    gamma = g.param("norm.scale", Shape{E}, {"norm"}, false);
    wi0 = g.param("wi_0.kernel", Shape{E, F}, {"embed", "mlp"});
    wi1 = g.param("wi_1.kernel", Shape{E, F}, {"embed", "mlp"});
    wo = g.param("wo.kernel", Shape{F, E}, {"mlp", "embed"});
    ValueId x = g.embedding(emb, ids, DType::kF32, "embed");
    ValueId h = g.rms_norm(x, gamma, 1e-6f, "norm");
    ValueId gate = g.matmul(h, wi0, "wi_0", "mlpwi_0");
    ValueId up = g.matmul(h, wi1, "wi_1", "mlpwi_1");
    ValueId y = g.matmul(g.glu(0, gate, up, "glu", "mlp_act"), wo, "wo", "mlpwo");
    ValueId r = g.add(x, y, "residual");
    loss = g.cross_entropy(g.matmul(r, emb, "logits", "", /*trans_b=*/true), targets, 0.0f, "loss");
    g.set_loss(loss);
  }

  std::vector<std::string> ops() const {
    std::vector<std::string> out;
    for (const graph::Node& n : g.nodes()) out.push_back(graph::op_name(n.op));
    return out;
  }
  const graph::Value& value(const std::string& name) const {
    for (const graph::Value& v : g.values())
      if (v.name == name) return v;
    throw std::runtime_error("no value " + name);
  }
};

TEST(ShardingPass, OneRankLeavesTheGraphAsBuilt) {
  Mlp m(1, 0);
  const std::vector<std::string> before = m.ops();
  graph::shard_tensor_parallel(m.g);
  EXPECT_EQ(m.ops(), before);
  EXPECT_EQ(m.g.value(m.wi0).shape, (Shape{Mlp::E, Mlp::F}));
}

TEST(ShardingPass, RewritesTheMlpAndVocabularyIntoMegatronsLayout) {
  Mlp m(2, 1);
  graph::shard_tensor_parallel(m.g);
  EXPECT_TRUE(m.g.sharded());
  EXPECT_EQ(m.ops(), (std::vector<std::string>{"vocab_embedding", "tp_all_reduce", "rms_norm", "tp_copy",
                                               "matmul", "matmul", "glu", "matmul", "tp_all_reduce", "add",
                                               "tp_copy", "matmul", "vocab_cross_entropy"}));
  // Parameters: this rank's half along the split axis, gradients alike; the norm stays whole.
  EXPECT_EQ(m.g.value(m.wi0).shape, (Shape{Mlp::E, Mlp::F / 2}));
  EXPECT_EQ(m.g.value(m.g.value(m.wi0).grad).shape, (Shape{Mlp::E, Mlp::F / 2}));
  EXPECT_EQ(m.g.value(m.wi0).tp, (graph::TensorShard{.dim = 1, .offset = Mlp::F / 2, .global = Mlp::F}));
  EXPECT_EQ(m.g.value(m.wo).shape, (Shape{Mlp::F / 2, Mlp::E}));
  EXPECT_EQ(m.g.value(m.emb).shape, (Shape{Mlp::V / 2, Mlp::E}));
  EXPECT_FALSE(m.g.value(m.gamma).tp.split());
  // Activations: the column-parallel outputs are split on C, the row-parallel sum is whole.
  EXPECT_EQ(m.value("wi_0").shape, (Shape{Mlp::N, Mlp::F / 2}));
  EXPECT_EQ(m.value("glu").tp.dim, 1);
  EXPECT_EQ(m.value("wo.partial").shape, (Shape{Mlp::N, Mlp::E}));
  EXPECT_FALSE(m.value("wo").tp.split());
  EXPECT_EQ(m.value("logits").shape, (Shape{Mlp::N, Mlp::V / 2}));
  // The residual reads g's output, not the partial sums; the remat name moved to g.
  const graph::Node& add = m.g.nodes()[9];
  EXPECT_EQ(m.g.value(add.in[1]).name, "wo");
  EXPECT_EQ(m.g.nodes()[8].ckpt_name, "mlpwo");
  EXPECT_EQ(m.g.nodes()[7].ckpt_name, "");
  // Both column-parallel matmuls over the norm's output share one f.
  EXPECT_EQ(m.g.nodes()[4].in[0], m.g.nodes()[5].in[0]);
  const graph::Node& loss = m.g.nodes().back();
  EXPECT_EQ(loss.attr<graph::CrossEntropyAttrs>().vocab_offset, Mlp::V / 2);
  EXPECT_EQ(loss.out.size(), 3u);  // loss, lse, stats
  EXPECT_EQ(m.g.loss(), loss.out[0]);
  // Per micro-step: g of the embedding and of wo ([N, E] each), the loss's [N] max and [2, N] sums.
  EXPECT_EQ(graph::tensor_parallel_traffic(m.g).forward, 4.0 * (2 * Mlp::N * Mlp::E + 3 * Mlp::N));
}

TEST(ShardingPass, RefusesANormOfASplitActivation) {
  Graph g;
  g.set_tensor_parallel({.size = 2, .rank = 0, .axes = {"mlp"}});
  ValueId x = g.input("x", Shape{4, 8}, DType::kF32);
  ValueId w = g.param("w", Shape{8, 6}, {"embed", "mlp"});
  ValueId gamma = g.param("gamma", Shape{6}, {"norm"}, false);
  g.set_loss(g.rms_norm(g.matmul(x, w, "proj"), gamma, 1e-6f, "bad_norm"));
  try {
    graph::shard_tensor_parallel(g);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_NE(std::string(e.what()).find("bad_norm: rms_norm needs its whole input"), std::string::npos)
        << e.what();
  }
}

TEST(ShardingPass, RefusesAParameterThatDoesNotDivide) {
  Graph g;
  g.set_tensor_parallel({.size = 4, .rank = 0, .axes = {"mlp"}});
  ValueId x = g.input("x", Shape{4, 8}, DType::kF32);
  g.set_loss(g.matmul(x, g.param("w", Shape{8, 6}, {"embed", "mlp"}), "proj"));
  try {
    graph::shard_tensor_parallel(g);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("parameter w [8, 6]: its mlp dimension (6) is not divisible by the tensor "
                                   "parallelism 4"),
        std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tessera
