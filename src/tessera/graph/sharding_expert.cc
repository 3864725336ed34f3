// The expert-parallel pass (sharding_expert.h): the expert weights' split, then the exchange ops
// around each MoE block's grouped matmuls.
#include "tessera/graph/sharding_expert.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "tessera/core/error.h"
#include "tessera/graph/op_table.h"

namespace tessera::graph {

namespace {

// Step 1: this rank's experts of every expert weight; its gradient and compute copy follow.
void shard_expert_weights(Graph& g, const ExpertParallel& ep) {
  for (ValueId p : g.params()) {
    Value& v = g.value(p);
    if (v.logical_axes.empty() || v.logical_axes[0] != "exp") continue;
    const int64_t experts = v.shape[0];
    TESSERA_CHECK(experts % ep.size == 0, ErrorKind::kConfig,
                  "parameter {} {}: its {} experts do not split over {} expert ranks "
                  "(ici_expert_parallelism x dcn_expert_parallelism must divide num_experts)",
                  v.name, v.shape.str(), experts, ep.size);
    const int64_t local = experts / ep.size;
    const TensorShard s{.dim = 0, .offset = ep.rank * local, .global = experts};
    for (ValueId id : {p, v.grad, v.compute_copy}) {
      if (id == kNoValue) continue;
      Value& w = g.value(id);
      w.ep = s;
      w.shape[0] = local;
    }
  }
}

// Emits n with its outputs' shapes inferred again from its (possibly new) inputs.
void emit(Graph& g, Node n) {
  if (const OpDef& def = op_def(n.op); def.infer) {
    const std::vector<OutputSpec> outs = def.infer(g, n);
    TESSERA_ASSERT(outs.size() == n.out.size());
    for (size_t i = 0; i < outs.size(); ++i) g.value(n.out[i]).shape = outs[i].shape;
  }
  g.add_node(std::move(n));
}

Node exchange_node(const Graph& g, OpKind op, std::vector<ValueId> in, std::vector<ValueId> out,
                   const MoeExchangeAttrs& a, const std::string& name) {
  Node n{.op = op, .in = std::move(in), .out = std::move(out), .attrs = a};
  n.name = name;
  n.phase = g.phase();
  n.layer = g.layer();
  return n;
}

}  // namespace

int64_t ragged_buffer_rows(int64_t tokens, int64_t k, int64_t experts, int64_t ranks, double factor) {
  const int64_t worst = tokens * std::min(ranks * k, experts);
  if (factor <= 0) return worst;
  const auto balanced = static_cast<int64_t>(std::ceil(factor * static_cast<double>(tokens * k)));
  return std::min(worst, std::max<int64_t>(balanced, 1));
}

void shard_expert_parallel(Graph& g, const ExpertParallel& ep) {
  if (ep.size <= 1) return;
  TESSERA_ASSERT(ep.rank >= 0 && ep.rank < ep.size);
  shard_expert_weights(g, ep);
  std::vector<Node> nodes = std::move(g.nodes());
  g.nodes().clear();
  for (ValueId v = 0; v < static_cast<ValueId>(g.values().size()); ++v) g.value(v).producer = -1;
  const int layer = g.layer();
  const Phase phase = g.phase();
  std::map<ValueId, ValueId> remap;  // the dispatch's rows and sizes -> this rank's
  ValueId counts = kNoValue;         // the current MoE block's [EP, X] counts
  MoeExchangeAttrs attrs;
  for (Node& n : nodes) {
    for (ValueId& v : n.in)
      if (auto it = remap.find(v); it != remap.end()) v = it->second;
    g.set_layer(n.layer);
    g.set_phase(n.phase);
    if (n.op == OpKind::kMoeCombine) {  // yl [Rb, E] -> ys [R, E], then the combine as before
      TESSERA_ASSERT(counts != kNoValue);
      const Value yl = g.value(n.in[0]);
      const ValueId ys = g.activation(n.name + ".from_experts", Shape{attrs.rows, yl.shape[1]}, yl.dtype);
      const ValueId staging = g.activation(n.name + ".from_experts.staging", yl.shape, yl.dtype);
      emit(g, exchange_node(g, OpKind::kMoeFromExperts, {n.in[0], counts}, {ys, staging}, attrs,
                            n.name + ".from_experts"));
      n.in[0] = ys;
      emit(g, std::move(n));
      counts = kNoValue;
      continue;
    }
    if (n.op != OpKind::kMoeDispatch) {
      if (n.op == OpKind::kGroupedMatmul && counts != kNoValue)
        n.attr<GroupedMatmulAttrs>().ragged_buffer = true;
      emit(g, std::move(n));
      continue;
    }
    const MoeAttrs& a = n.attr<MoeAttrs>();
    TESSERA_CHECK(!a.dense && a.capacity == 0, ErrorKind::kConfig,
                  "{}: expert parallelism is built for the dropless path (sparse_matmul=true); the {} path "
                  "is not in this build yet",
                  n.name, a.dense ? "dense (sparse_matmul=false)" : "capacity (capacity_factor > 0)");
    TESSERA_CHECK(a.experts % ep.size == 0, ErrorKind::kConfig,
                  "{}: {} experts do not split over {} expert ranks", n.name, a.experts, ep.size);
    const Value x = g.value(n.in[0]);
    const int64_t tokens = x.shape[0], width = x.shape[1];
    attrs = MoeExchangeAttrs{
        .experts = a.experts,
        .ranks = ep.size,
        .rank = ep.rank,
        .rows = tokens * a.k,
        .buffer_rows = ragged_buffer_rows(tokens, a.k, a.experts, ep.size, ep.ragged_buffer_factor),
        .buffer_factor = ep.ragged_buffer_factor};
    const ValueId xs = n.out[0], sizes = n.out[2];
    const std::string name = n.name + ".to_experts";
    emit(g, std::move(n));
    const Shape buffer{attrs.buffer_rows, width};
    const ValueId xl = g.activation(name, buffer, x.dtype);
    const ValueId local_sizes = g.activation(name + ".group_sizes", Shape{a.experts / ep.size}, DType::kI32);
    counts = g.activation(name + ".counts", Shape{ep.size, a.experts}, DType::kI32);
    const ValueId staging = g.activation(name + ".staging", buffer, x.dtype);
    emit(g, exchange_node(g, OpKind::kMoeToExperts, {xs, sizes}, {xl, local_sizes, counts, staging}, attrs,
                          name));
    remap[xs] = xl;
    remap[sizes] = local_sizes;
  }
  g.set_layer(layer);
  g.set_phase(phase);
}

void overlap_expert_exchanges(Graph& g) {
  std::set<int> layers;  // the layers whose backward has a dispatch exchange
  for (const Node& n : g.nodes())
    if (n.op == OpKind::kMoeToExpertsBwd) layers.insert(n.layer);
  if (layers.empty()) return;
  // An expert weight gradient: it reads the layer's activations and their gradients and writes
  // only a parameter gradient, which no other node of the pass reads.
  const auto weight_grad = [&](const Node& n) {
    return n.phase == Phase::kBackward && layers.count(n.layer) &&
           ((n.op == OpKind::kGroupedMatmul && n.attr<GroupedMatmulAttrs>().weight_grad) ||
            n.op == OpKind::kGroupedBiasGrad);
  };
  std::vector<Node> out, held;
  out.reserve(g.nodes().size() + layers.size());
  for (Node& n : g.nodes()) {
    if (weight_grad(n)) {
      held.push_back(std::move(n));
      continue;
    }
    if (n.op != OpKind::kMoeToExpertsBwd) {
      out.push_back(std::move(n));
      continue;
    }
    n.attr<MoeExchangeAttrs>().deferred = true;
    Node wait{.op = OpKind::kMoeExchangeWait,
              .in = n.out,
              .name = n.name + ".wait",
              .phase = n.phase,
              .layer = n.layer};
    out.push_back(std::move(n));
    for (Node& h : held) {
      TESSERA_ASSERT(h.layer == wait.layer);
      out.push_back(std::move(h));
    }
    held.clear();
    out.push_back(std::move(wait));
  }
  TESSERA_ASSERT(held.empty());
  g.set_nodes(std::move(out));
}

ExpertParallelTraffic expert_parallel_traffic(const Graph& g) {
  ExpertParallelTraffic t;
  for (const Node& n : g.nodes()) {
    if (n.op != OpKind::kMoeToExperts && n.op != OpKind::kMoeToExpertsBwd &&
        n.op != OpKind::kMoeFromExperts && n.op != OpKind::kMoeFromExpertsBwd)
      continue;
    const MoeExchangeAttrs& a = n.attr<MoeExchangeAttrs>();
    const Value& big = g.value(n.in[0]);  // [R or Rb, E]
    const double bytes =
        static_cast<double>(a.rows * big.shape[1]) * static_cast<double>(dtype_size(big.dtype));
    ++t.all_to_alls;
    (n.phase == Phase::kForward     ? t.forward
     : n.phase == Phase::kRecompute ? t.recompute
                                    : t.backward) += bytes;
    if (n.op == OpKind::kMoeToExperts) {
      t.count_bytes += static_cast<double>(a.ranks * a.experts * 4);
      ++t.count_gathers;
    }
  }
  return t;
}

}  // namespace tessera::graph
