// PlanSpec as plain data: its memory report is the sum of its placements, live values never share
// bytes, FLOPs by phase match hand counts, the FSDP schedule lists the collectives ParamSync runs
// with their sizes, the JSON form round-trips and fingerprints shapes, and building one (even for
// Llama-3-8B) maps no arena memory. Workspace binds a spec's placements to one allocation.
#include "tessera/graph/plan_spec.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "tessera/config/config.h"
#include "tessera/core/arena.h"
#include "tessera/core/error.h"
#include "tessera/core/source_dir.h"
#include "tessera/graph/param_sync.h"
#include "tessera/graph/workspace.h"
#include "tessera/models/decoder.h"
#include "tessera/train/trainer.h"

namespace tessera {
namespace {

using graph::ArenaKind;
using graph::Collective;
using graph::CollectiveKind;
using graph::CollectiveWhen;
using graph::PlanSpec;

std::vector<AxisRule> default_rules() {
  const std::vector<std::string> o = {"model_name=llama-test"};
  return load_config(tessera::source_dir().string() + "/configs/base.yml", o).logical_axis_rules;
}

// E 16, H 2, K 2, D 8, F 24, L 3, V 37 (odd: the vocabulary never splits over 2), B 1, T 4.
models::ModelSpec tiny_spec(int64_t seq = 4) {
  models::ModelSpec s;
  s.emb_dim = 16;
  s.num_query_heads = 2;
  s.num_kv_heads = 2;
  s.head_dim = 8;
  s.mlp_dim = 24;
  s.num_decoder_layers = 3;
  s.vocab_size = 37;
  s.batch = 1;
  s.seq = seq;
  s.dtype = DType::kBF16;
  return s;
}

PlanSpec tiny_plan(const graph::PlanOptions& po = {}, int64_t seq = 4) {
  graph::Graph g;
  models::build_decoder(g, tiny_spec(seq));
  return PlanSpec(std::move(g), po);
}

graph::PlanOptions fsdp2(int64_t rank) {
  graph::PlanOptions po;
  po.sharding.rules = default_rules();
  po.sharding.sizes[static_cast<int>(MeshAxis::kFsdp)] = 2;
  po.sharding.coords[static_cast<int>(MeshAxis::kFsdp)] = rank;
  return po;
}

bool persistent(graph::ValueKind k) {
  return k != graph::ValueKind::kActivation;
}

TEST(PlanSpec, MemoryReportIsTheSumOfThePlacements) {
  for (const graph::PlanOptions& po : {graph::PlanOptions{}, fsdp2(1)}) {
    const PlanSpec p = tiny_plan(po);
    const auto& values = p.graph().values();
    size_t persistent_bytes = 0, persistent_end = 0, activation_end = 0, gathered_end = 0;
    for (size_t i = 0; i < values.size(); ++i) {
      const auto id = static_cast<graph::ValueId>(i);
      const graph::Placement& s = p.state(id);
      if (persistent(values[i].kind)) {
        EXPECT_EQ(s.arena, ArenaKind::kPersistent);
        persistent_bytes += aligned_bytes(s.shape, s.dtype);
        persistent_end = std::max(persistent_end, s.offset + aligned_bytes(s.shape, s.dtype));
      } else {
        EXPECT_EQ(s.arena, ArenaKind::kActivations);
        activation_end = std::max(activation_end, s.offset + aligned_bytes(s.shape, s.dtype));
      }
      for (const graph::Placement* q : {&p.view(id), &p.opt(id)})
        if (q->arena == ArenaKind::kGathered) gathered_end = std::max(gathered_end, q->offset + q->bytes());
    }
    const graph::MemoryReport& m = p.memory();
    EXPECT_EQ(m.params + m.param_copies + m.grads + m.optimizer + m.inputs, persistent_bytes);
    EXPECT_EQ(p.arena_bytes(ArenaKind::kPersistent), persistent_bytes);
    EXPECT_EQ(persistent_end, persistent_bytes);  // packed one after another
    EXPECT_EQ(m.activations, p.arena_bytes(ArenaKind::kActivations));
    EXPECT_EQ(activation_end, m.activations);
    EXPECT_EQ(m.gathered, p.arena_bytes(ArenaKind::kGathered));
    EXPECT_LE(gathered_end, m.gathered);
    EXPECT_EQ(m.gathered > 0, p.any_sharded());
    EXPECT_EQ(m.total(), persistent_bytes + m.gathered + m.activations);
  }
}

// FSDP staging: a decoder layer's gather and gradient staging each have bytes of their own in the
// layer's slot; the outer parameters' gather staging (used before the first reader in the forward
// pass) and gradient staging (after the last writer in the backward pass) share one region, whose
// size is the larger of the two lists, at the end of the gathered arena.
TEST(PlanSpec, OuterGatherAndGradientStagingShareOneRegion) {
  const PlanSpec p = tiny_plan(fsdp2(0));
  struct Span {
    size_t begin, end;
  };
  std::vector<Span> outer_gather, outer_grad;
  size_t layer_end = 0, gather_bytes = 0, grad_bytes = 0;
  for (const graph::ParamLayout& L : p.layouts()) {
    if (!L.sharded()) continue;
    for (const auto& g : L.gathered) {
      layer_end = std::max(layer_end, p.view(g.value).offset + p.view(g.value).bytes());
      if (L.fsdp_dim <= 0) continue;
      ASSERT_EQ(g.staging.arena, ArenaKind::kGathered);
      if (L.layer < 0) {
        outer_gather.push_back({g.staging.offset, g.staging.offset + g.staging.bytes()});
        gather_bytes += aligned_bytes(g.staging.shape, g.staging.dtype);
      }
    }
    if (L.fsdp_dim > 0 && L.layer < 0) {
      outer_grad.push_back({L.grad_staging.offset, L.grad_staging.offset + L.grad_staging.bytes()});
      grad_bytes += aligned_bytes(L.grad_staging.shape, L.grad_staging.dtype);
    }
  }
  // The embedding [V, E] is split over fsdp on E (dim 1), so it is staged.
  ASSERT_FALSE(outer_gather.empty());
  ASSERT_FALSE(outer_grad.empty());
  const size_t region = outer_gather.front().begin;
  EXPECT_EQ(outer_grad.front().begin, region);  // both lists start the shared region
  for (const auto* list : {&outer_gather, &outer_grad})
    for (size_t i = 0; i < list->size(); ++i) {
      EXPECT_GE((*list)[i].begin, region);
      for (size_t j = 0; j < i; ++j)  // within one list, no two share bytes
        EXPECT_TRUE((*list)[i].begin >= (*list)[j].end || (*list)[j].begin >= (*list)[i].end);
    }
  EXPECT_LE(layer_end, region);
  EXPECT_EQ(p.memory().gathered, region + std::max(gather_bytes, grad_bytes));
}

TEST(PlanSpec, NoTwoLiveValuesOverlap) {
  const PlanSpec p = tiny_plan({.remat_policy = "minimal"});
  const graph::Graph& g = p.graph();
  const auto& values = g.values();
  const int nn = static_cast<int>(g.nodes().size());
  auto root = [&](graph::ValueId v) {
    while (values[v].alias_of != graph::kNoValue) v = values[v].alias_of;
    return v;
  };
  // Live intervals from the node list, written out again here (the loss lives to the end).
  std::vector<std::pair<int, int>> life(values.size(), {-1, -1});
  auto touch = [&](graph::ValueId v, int i) {
    auto& l = life[root(v)];
    l.first = l.first < 0 ? i : std::min(l.first, i);
    l.second = std::max(l.second, i);
  };
  for (int i = 0; i < nn; ++i) {
    for (graph::ValueId v : g.nodes()[i].in) touch(v, i);
    for (graph::ValueId v : g.nodes()[i].out) touch(v, i);
  }
  touch(g.loss(), nn - 1);
  struct Range {
    size_t begin, end;
    int first, last;
  };
  std::vector<Range> act, pers;
  for (size_t i = 0; i < values.size(); ++i) {
    const graph::Placement& s = p.state(static_cast<graph::ValueId>(i));
    const Range r{s.offset, s.offset + s.bytes(), life[i].first, life[i].second};
    if (persistent(values[i].kind))
      pers.push_back(r);
    else if (values[i].alias_of == graph::kNoValue && life[i].first >= 0 && s.bytes() > 0)
      act.push_back(r);
  }
  for (size_t a = 0; a < act.size(); ++a)
    for (size_t b = a + 1; b < act.size(); ++b) {
      const bool live_together = act[a].first <= act[b].last && act[b].first <= act[a].last;
      const bool share = act[a].begin < act[b].end && act[b].begin < act[a].end;
      ASSERT_FALSE(live_together && share) << a << " and " << b;
    }
  for (size_t a = 0; a < pers.size(); ++a)
    for (size_t b = a + 1; b < pers.size(); ++b)
      ASSERT_FALSE(pers[a].begin < pers[b].end && pers[b].begin < pers[a].end) << a << " and " << b;
}

// A prefill chunk's decoding plan: every residual sum of a full-width layer is its product
// accumulating into the stream (fuse_residual_products), and the last layer runs its output
// projection and MLP on the logit row only.
TEST(PlanSpec, DecodingPlanFusesResidualsAndNarrowsTheLastLayer) {
  models::ModelSpec s = tiny_spec(8);
  s.decode = {.slots = 2, .max_length = 16, .last_row_logits = true};
  graph::Graph built;
  models::build_decoder(built, s);
  const PlanSpec p(std::move(built), {.remat_policy = "none"});
  const graph::Graph& g = p.graph();
  int accumulating = 0, sums = 0;
  for (const graph::Node& n : g.nodes()) {
    if (n.op == graph::OpKind::kAdd) ++sums;
    if (n.op != graph::OpKind::kMatmul) continue;
    const graph::Value& out = g.value(n.out[0]);
    if (n.attr<graph::MatmulAttrs>().accumulate) {
      ++accumulating;
      ASSERT_EQ(n.in.size(), 3u) << n.name;
      EXPECT_EQ(out.alias_of, n.in[2]) << n.name;  // accumulates in place over the stream
    }
    const bool narrowed = n.layer == 2 && (n.name.find(".out") != std::string::npos ||
                                           n.name.find(".mlp.") != std::string::npos);
    EXPECT_EQ(out.shape[0], narrowed || n.layer < 0 ? 1 : 8) << n.name;
  }
  // Two sums per layer; the last layer's attention sum adds the gathered row after its product,
  // so it stays a sum.
  EXPECT_EQ(accumulating, 2 * 3 - 1);
  EXPECT_EQ(sums, 1);
}

// A decoding plan of fewer than kGemvRows rows runs each layer's q, k and v projections as one
// shared-input node, and its gate and up as another, with the products' FLOPs; a prefill chunk of
// kGemvRows rows or more keeps its products (they run on oneDNN's GEMM).
TEST(PlanSpec, DecodingPlanRunsProductsOfOneInputAsOne) {
  for (const int64_t rows : {int64_t{1}, int64_t{8}, graph::kGemvRows}) {
    SCOPED_TRACE(rows);
    models::ModelSpec s = tiny_spec(rows);
    s.decode = {.slots = 2, .max_length = 128, .last_row_logits = false};
    graph::Graph built;
    models::build_decoder(built, s);
    const double flops_before = [&] {
      double f = 0;
      for (const graph::Node& n : built.nodes()) f += graph::node_flops(built, n);
      return f;
    }();
    const PlanSpec p(std::move(built), {.remat_policy = "none"});
    const graph::Graph& g = p.graph();
    std::vector<size_t> groups;
    double flops_after = 0;
    for (const graph::Node& n : g.nodes()) {
      flops_after += graph::node_flops(g, n);
      if (n.op != graph::OpKind::kSharedInputMatmuls) continue;
      groups.push_back(n.out.size());
      ASSERT_EQ(n.in.size(), n.out.size() + 1) << n.name;
      for (size_t i = 1; i < n.in.size(); ++i) {  // weights stored [out, in] (their f32 master says so)
        const graph::Value& w = g.value(n.in[i]);
        EXPECT_TRUE((w.kind == graph::ValueKind::kParamCompute ? g.value(w.master) : w).transposed) << n.name;
      }
      for (graph::ValueId o : n.out) EXPECT_EQ(g.value(o).shape[0], rows) << n.name;
    }
    EXPECT_DOUBLE_EQ(flops_after, flops_before);
    if (rows >= graph::kGemvRows) {
      EXPECT_TRUE(groups.empty());
    } else {
      EXPECT_EQ(groups, (std::vector<size_t>{3, 2, 3, 2, 3, 2}));  // q, k, v; gate, up; per layer
    }
  }
}

TEST(PlanSpec, FlopsByPhaseOfATinyGraphByHand) {
  // ids [N=4] -> embedding of table [V=16, E=8] -> x @ W [8, 16] -> cross-entropy.
  graph::Graph g;
  const graph::ValueId ids = g.input("ids", Shape{4}, DType::kI32);
  const graph::ValueId targets = g.input("targets", Shape{4}, DType::kI32);
  const graph::ValueId table = g.param("table", Shape{16, 8}, {"vocab", "embed"});
  const graph::ValueId w = g.param("w", Shape{8, 16}, {"embed", "vocab"});
  const graph::ValueId x = g.embedding(table, ids, DType::kF32, "embed");
  g.set_loss(g.cross_entropy(g.matmul(x, w, "logits"), targets, 0.0f, "loss"));
  const PlanSpec p(std::move(g), {.remat_policy = "none"});
  const double mm = 2.0 * 4 * 16 * 8;  // [4, 8] x [8, 16]
  EXPECT_DOUBLE_EQ(p.flops().forward, mm);
  EXPECT_DOUBLE_EQ(p.flops().backward, 2 * mm);  // dx = dlogits W^T and dW = x^T dlogits
  EXPECT_DOUBLE_EQ(p.flops().recompute, 0);
  EXPECT_DOUBLE_EQ(p.flops().optimizer, 0);
  EXPECT_DOUBLE_EQ(p.flops().model_training(), 3 * mm);  // the embedding lookup counts 0
  EXPECT_EQ(p.num_params(), 16 * 8 + 8 * 16);
}

// Training's loss and its gradient are one forward node (kCrossEntropyGrad) that writes dlogits
// over the logits; they stay two nodes when a node between them reads the logits.
TEST(PlanSpec, TrainingRunsTheLossAndItsGradientAsOneNode) {
  for (bool read_later : {false, true}) {
    graph::Graph g;
    const graph::ValueId ids = g.input("ids", Shape{4}, DType::kI32);
    const graph::ValueId targets = g.input("targets", Shape{4}, DType::kI32);
    const graph::ValueId table = g.param("table", Shape{16, 8}, {"vocab", "embed"});
    const graph::ValueId w = g.param("w", Shape{8, 16}, {"embed", "vocab"});
    const graph::ValueId logits = g.matmul(g.embedding(table, ids, DType::kF32, "embed"), w, "logits");
    g.set_loss(g.cross_entropy(logits, targets, 0.0f, "loss"));
    if (read_later) g.scale(logits, 2.0f, "reads_the_logits");
    const PlanSpec p(std::move(g), {.remat_policy = "none"});
    std::map<graph::OpKind, int> count;
    for (const graph::Node& n : p.graph().nodes()) ++count[n.op];
    SCOPED_TRACE(read_later ? "logits read after the loss" : "logits read by the loss only");
    EXPECT_EQ(count[graph::OpKind::kCrossEntropyGrad], read_later ? 0 : 1);
    EXPECT_EQ(count[graph::OpKind::kCrossEntropy], read_later ? 1 : 0);
    EXPECT_EQ(count[graph::OpKind::kCrossEntropyBwd], read_later ? 1 : 0);
    if (read_later) continue;
    const graph::Node& ce = p.graph().nodes()[p.graph().value(p.graph().loss()).producer];
    ASSERT_EQ(ce.op, graph::OpKind::kCrossEntropyGrad);
    EXPECT_EQ(ce.phase, graph::Phase::kForward);
    ASSERT_EQ(ce.in.size(), 3u);
    EXPECT_EQ(ce.in[2], p.dloss());
    ASSERT_EQ(ce.out.size(), 3u);
    EXPECT_EQ(p.graph().value(ce.out[2]).alias_of, logits);
    EXPECT_EQ(p.graph().value(ce.out[2]).producer, p.graph().value(p.graph().loss()).producer);
  }
}

TEST(PlanSpec, FlopsByPhaseOfTheTinyLlamaByHand) {
  const PlanSpec p = tiny_plan({.remat_policy = "full"});
  // B 1, T 4, E 16, H = K 2, D 8, F 24, V 37, L 3 (tiny_spec).
  const double B = 1, S = 4, E = 16, H = 2, K = 2, D = 8, F = 24, V = 37, L = 3;
  const double matmuls = 2 * B * S * E * F * 3 + 2 * B * S * E * (H + 2 * K) * D + 2 * B * S * E * H * D;
  const double attention = 2 * B * S * S * H * D;  // causal: half of 4 B S^2 H D
  const double unembed = 2 * B * S * E * V;
  EXPECT_DOUBLE_EQ(p.flops().forward, L * (matmuls + attention) + unembed);
  // Every matmul has two backward matmuls; attention's backward is 2.5x its forward.
  EXPECT_DOUBLE_EQ(p.flops().backward, 2 * (L * matmuls + unembed) + 2.5 * L * attention);
  // full: each layer again, but for its down projection (wo), whose output no backward node reads.
  const double wo = 2 * B * S * F * E;
  EXPECT_DOUBLE_EQ(p.flops().recompute, L * (matmuls + attention - wo));
}

int count(const std::vector<Collective>& cs, graph::ValueId value, CollectiveKind kind) {
  return static_cast<int>(std::count_if(
      cs.begin(), cs.end(), [&](const Collective& c) { return c.value == value && c.kind == kind; }));
}

TEST(PlanSpec, FsdpScheduleListsEachGatherAndReduceScatterWithItsBytes) {
  const PlanSpec p = tiny_plan(fsdp2(0));
  const graph::Graph& g = p.graph();
  const auto& cs = p.collectives();
  int layer_params = 0, outer_params = 0;
  for (const graph::ParamLayout& L : p.layouts()) {
    const graph::Value& v = g.value(L.param);
    SCOPED_TRACE(v.name);
    const size_t whole_f32 = static_cast<size_t>(v.shape.numel()) * 4;
    if (!L.sharded()) {  // norms and the odd vocabulary: all-reduced over {data, fsdp} once
      EXPECT_EQ(count(cs, v.grad, CollectiveKind::kAllReduce), 1);
      EXPECT_EQ(count(cs, L.param, CollectiveKind::kAllGather) +
                    count(cs, v.compute_copy, CollectiveKind::kAllGather),
                0);
      continue;
    }
    (L.layer >= 0 ? layer_params : outer_params)++;
    ASSERT_FALSE(L.gathered.empty());
    for (const auto& gv : L.gathered) {
      // A layer's parameters: one gather for the forward run and one for recompute + backward,
      // except the last layer, whose backward follows its forward with no other layer between
      // (one run); outside the layers: one per step.
      EXPECT_EQ(count(cs, gv.value, CollectiveKind::kAllGather), L.layer < 0 ? 1 : L.layer == 2 ? 1 : 2);
      for (const Collective& c : cs) {
        if (c.value != gv.value) continue;
        EXPECT_EQ(c.bytes,
                  static_cast<size_t>(g.value(gv.value).shape.numel()) * dtype_size(g.value(gv.value).dtype));
        EXPECT_EQ(c.group, std::vector<MeshAxis>{MeshAxis::kFsdp});
        EXPECT_EQ(c.when, L.layer >= 0 ? CollectiveWhen::kEveryPass : CollectiveWhen::kOncePerStep);
        EXPECT_GE(c.wait, 0);
        EXPECT_EQ(c.layer, L.layer);
      }
    }
    EXPECT_EQ(count(cs, v.grad, CollectiveKind::kReduceScatter), 1);
    EXPECT_EQ(count(cs, v.grad, CollectiveKind::kAllReduce), 0);
    for (const Collective& c : cs) {
      if (c.value != v.grad) continue;
      EXPECT_EQ(c.bytes, whole_f32);
      EXPECT_EQ(c.when, L.layer >= 0 ? CollectiveWhen::kEveryPass : CollectiveWhen::kLastMicroStep);
      EXPECT_GE(c.issue, 0);
      if (L.layer >= 0) {
        EXPECT_LE(c.first_write, c.issue);
      }
    }
  }
  EXPECT_EQ(layer_params, 3 * 7);  // q, k, v, out, wi_0, wi_1, wo in each of the 3 layers
  EXPECT_GT(outer_params, 0);
  // The byte counts the trainer compares with the communicators' are the schedule's.
  const dist::TrafficCounters t = graph::expected_traffic(p, 2);
  size_t gathers = 0;
  for (const Collective& c : cs)
    if (c.kind == CollectiveKind::kAllGather)
      gathers += c.bytes * (c.when == CollectiveWhen::kEveryPass ? 2 : 1);
  EXPECT_EQ(t.all_gather, gathers);
  // One 16 MiB chunk for each group that reduces without blocking: fsdp, and {data, fsdp} for the
  // whole parameters (what the MPI communicators map for this plan's first step).
  EXPECT_EQ(p.memory().collective_scratch_estimate, size_t{32} << 20);
  // One device: no schedule, no scratch.
  EXPECT_TRUE(tiny_plan().collectives().empty());
  EXPECT_EQ(tiny_plan().memory().collective_scratch_estimate, 0u);
}

TEST(PlanSpec, ScratchOfOneCollectiveFollowsTheCommunicator) {
  Collective c{.kind = CollectiveKind::kReduceScatter, .bytes = 4 * 1000};
  EXPECT_EQ(graph::collective_scratch_bytes(c, 2),
            aligned_bytes(Shape{500}, DType::kF32));  // a receive block
  EXPECT_EQ(graph::collective_scratch_bytes(c, 4),
            2 * aligned_bytes(Shape{250}, DType::kF32));  // + a send block
  EXPECT_EQ(graph::collective_scratch_bytes(c, 1), 0u);
  c.kind = CollectiveKind::kAllGather;
  EXPECT_EQ(graph::collective_scratch_bytes(c, 4), 0u);
}

TEST(PlanSpec, JsonRoundTripsAndTheFingerprintFollowsShapes) {
  for (const graph::PlanOptions& po : {graph::PlanOptions{}, fsdp2(1)}) {
    const PlanSpec p = tiny_plan(po);
    const nlohmann::json j = p.to_json();
    const PlanSpec back = PlanSpec::from_json(nlohmann::json::parse(j.dump()));
    EXPECT_FALSE(back.has_graph());
    EXPECT_TRUE(back == p);
    EXPECT_EQ(back.memory(), p.memory());
    EXPECT_EQ(back.flops(), p.flops());
    EXPECT_EQ(back.collectives(), p.collectives());
    EXPECT_EQ(back.fingerprint(), p.fingerprint());
    EXPECT_EQ(back.to_json(), j);
    EXPECT_EQ(p.fingerprint().size(), 16u);
    EXPECT_EQ(tiny_plan(po).fingerprint(), p.fingerprint());  // stable across builds
  }
  const PlanSpec a = tiny_plan(), b = tiny_plan({}, /*seq=*/8);
  EXPECT_NE(a.fingerprint(), b.fingerprint());
  EXPECT_FALSE(a == b);
  EXPECT_NE(tiny_plan(fsdp2(0)).fingerprint(), tiny_plan(fsdp2(1)).fingerprint());  // other offsets
}

size_t rss_bytes() {
  std::ifstream statm("/proc/self/statm");
  size_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

TEST(PlanSpec, BuildingLlama3_8bAllocatesNothing) {
  const std::vector<std::string> o = {"model_name=llama3-8b", "per_device_batch_size=2",
                                      "max_target_length=2048"};
  const Config cfg = load_config(tessera::source_dir().string() + "/configs/base.yml", o);
  models::ModelSpec s = models::model_spec_from_config(cfg);
  const size_t rss0 = rss_bytes();
  const auto t0 = std::chrono::steady_clock::now();
  graph::Graph g;
  models::build_decoder(g, s);
  const PlanSpec p(std::move(g), {.remat_policy = "full"});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const size_t grown = rss_bytes() - std::min(rss0, rss_bytes());
  EXPECT_GT(p.num_params(), 8'000'000'000);
  const size_t arenas = p.arena_bytes(ArenaKind::kPersistent) + p.arena_bytes(ArenaKind::kActivations);
  EXPECT_GT(arenas, size_t{100} << 30);  // f32 masters, AdamW moments and gradients alone: 128 GB
  EXPECT_LT(grown, arenas / 1000) << "grown " << grown << " bytes";
  EXPECT_LT(grown, size_t{256} << 20);
  EXPECT_LT(seconds, 30.0);
  EXPECT_EQ(PlanSpec::from_json(p.to_json()), p);
}

TEST(Workspace, BindsThePlacementsToOneMapping) {
  const PlanSpec p = tiny_plan(fsdp2(1));
  const graph::Workspace ws(p);
  EXPECT_GE(ws.mapped_bytes(), p.memory().total());
  for (graph::ValueId id = 0; id < static_cast<graph::ValueId>(p.graph().values().size()); ++id) {
    EXPECT_EQ(ws.view(id).shape(), p.view(id).shape);
    EXPECT_EQ(ws.state(id).dtype(), p.state(id).dtype);
    EXPECT_EQ(ws.opt_view(id).numel(), p.opt(id).shape.numel());
  }
  // Two values at one persistent offset difference are that many bytes apart.
  const graph::ValueId a = p.layouts()[0].param, b = p.layouts()[1].param;
  EXPECT_EQ(static_cast<char*>(ws.state(b).data()) - static_cast<char*>(ws.state(a).data()),
            static_cast<std::ptrdiff_t>(p.state(b).offset) - static_cast<std::ptrdiff_t>(p.state(a).offset));
  EXPECT_THROW(graph::Workspace{PlanSpec::from_json(p.to_json())}, Error);
}

}  // namespace
}  // namespace tessera
