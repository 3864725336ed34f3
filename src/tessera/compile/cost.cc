// The roofline cost model (cost.h).
#include "tessera/compile/cost.h"

#include <fmt/format.h>

#include <map>

#include "tessera/compile/planner.h"
#include "tessera/core/error.h"
#include "tessera/graph/op_table.h"
#include "tessera/graph/sharding_expert.h"

namespace tessera::compile {
namespace {

// Per-call latency of one collective, seconds: a ring step's start-up on each kind of link. Round
// figures (NCCL's and MPI's small-message latencies), stated in the assumptions.
double link_latency(TargetKind kind, bool crosses_nodes) {
  switch (kind) {
    case TargetKind::kGpu:
      return crosses_nodes ? 20e-6 : 10e-6;
    case TargetKind::kTpu:
      return crosses_nodes ? 30e-6 : 5e-6;
    case TargetKind::kCpu:
      return 20e-6;
  }
  return 0;
}

struct Link {
  std::string name;
  double bytes_per_s = 0;
  bool crosses_nodes = false;
};

// The slowest link the ranks of `group` talk over. Axes run slowest-varying first, so an ICI
// axis spans itself and the axes after it; on a GPU it stays in a node while that span fits.
// A GPU group that leaves the node runs as many rings as its members in one node have network
// ports (NCCL's channels, one per NIC), so its ring bandwidth is the members' ports together, up
// to the node's own links: with 8 members per node of 50 GB/s ports, 400 GB/s, not 50.
Link link_of(const std::vector<MeshAxis>& group, const Config& cfg, const Topology& topo) {
  const Target& d = topo.device;
  bool inter = false;
  int64_t in_node = 1;  // the group's ranks inside one node (GPUs)
  for (MeshAxis axis : group) {
    const int a = static_cast<int>(axis);
    if (cfg.dcn_parallelism[a] > 1) inter = true;
    if (d.kind == TargetKind::kTpu) continue;
    int64_t stride = 1;  // devices between neighbours on this axis
    for (int b = a + 1; b < kNumMeshAxes; ++b) stride *= cfg.ici_parallelism[b];
    if (stride * cfg.ici_parallelism[a] > d.devices_per_node) inter = true;
    if (stride < d.devices_per_node) in_node *= std::min(cfg.ici_parallelism[a], d.devices_per_node / stride);
  }
  if (d.kind == TargetKind::kCpu) return {"shared memory", d.intra_node_bytes_per_s, false};
  if (d.kind == TargetKind::kTpu)
    return inter ? Link{"dcn", d.inter_node_bytes_per_s, true} : Link{"ici", d.intra_node_bytes_per_s, false};
  if (!inter) return Link{"intra-node", d.intra_node_bytes_per_s, false};
  const double rings = static_cast<double>(in_node);
  return Link{in_node > 1 ? fmt::format("inter-node, {} ports", in_node) : "inter-node",
              std::min(d.intra_node_bytes_per_s, d.inter_node_bytes_per_s * rings), true};
}

std::string group_name(const std::vector<MeshAxis>& group) {
  std::vector<std::string_view> names;
  for (MeshAxis a : group) names.push_back(kMeshAxes[static_cast<int>(a)].axis);
  return fmt::format("{}", fmt::join(names, "+"));
}

// Ring time of one collective of a `bytes` buffer over n ranks.
double ring_seconds(graph::CollectiveKind kind, double bytes, int64_t n, const Link& link, TargetKind tk) {
  if (n <= 1) return 0;
  const double part = bytes * static_cast<double>(n - 1) / static_cast<double>(n);
  const double moved = kind == graph::CollectiveKind::kAllReduce ? 2 * part : part;
  return moved / link.bytes_per_s + link_latency(tk, link.crosses_nodes);
}

// The roofline over the plan's nodes: one pass (forward, recompute, backward) and the optimizer.
struct NodeTotals {
  double pass_seconds = 0, pass_flops = 0, pass_bytes = 0, recompute_flops = 0;
  double optimizer_seconds = 0, optimizer_flops = 0, optimizer_bytes = 0;
  double tp_bytes = 0;  // tensor-parallel collectives of the graph's nodes, one pass
  int64_t tp_calls = 0;
  // Each deferred expert exchange (sharding_expert.h, overlap_expert_exchanges): its rows' bytes
  // and the compute time of the nodes between its start and its wait, which can hide it.
  std::vector<std::pair<double, double>> deferred;  // (bytes, covering seconds)
};

NodeTotals node_totals(const graph::Graph& g, double flop_rate, double hbm_bytes_per_s) {
  NodeTotals t;
  bool covering = false;  // between a deferred exchange and its wait
  for (const graph::Node& n : g.nodes()) {
    const double f = graph::node_flops(g, n), b = graph::node_bytes(g, n);
    const double s = std::max(f / flop_rate, b / hbm_bytes_per_s);
    if (n.op == graph::OpKind::kMoeExchangeWait) covering = false;
    if (covering) t.deferred.back().second += s;
    if (n.op == graph::OpKind::kMoeToExpertsBwd && n.attr<graph::MoeExchangeAttrs>().deferred) {
      const graph::Value& rows = g.value(n.out[0]);  // [R, E]: this rank's own rows come back
      t.deferred.emplace_back(static_cast<double>(rows.shape.numel() * dtype_size(rows.dtype)), 0.0);
      covering = true;
    }
    if (n.phase == graph::Phase::kOptimizer) {
      t.optimizer_seconds += s;
      t.optimizer_flops += f;
      t.optimizer_bytes += b;
      continue;
    }
    t.pass_seconds += s;
    t.pass_flops += f;
    t.pass_bytes += b;
    if (n.phase == graph::Phase::kRecompute) t.recompute_flops += f;
    const graph::NodeTraffic tr = graph::node_traffic(g, n);
    t.tp_bytes += tr.bytes;
    t.tp_calls += tr.calls;
  }
  return t;
}

std::vector<std::string> assumptions_of(const CostReport& r, const Config& cfg, const Target& d) {
  // Each assumption is one std::string: several lines of one literal are one sentence, not
  // literals missing their commas.
  return {
      fmt::format("each node takes max(FLOPs / ({} {} peak x {:.0f}% GEMM efficiency), bytes / "
                  "{:.0f} GB/s)",
                  tflops_text(r.peak_flops), cfg.dtype, 100 * d.gemm_efficiency, d.hbm_bytes_per_s / 1e9),
      std::string(
          "FLOPs: matmuls and attention only (the op table's counts); elementwise ops cost their bytes"),
      std::string(
          "collectives: ring algorithms, (n-1)/n of the buffer per rank (all-reduce 2x), on the slowest "
          "link of their axes, plus a fixed latency per call; a GPU group that leaves the node runs one "
          "ring per network port of its members in a node (NCCL's channels), up to the node's own link "
          "bandwidth"),
      std::string("FSDP gathers/reduce-scatters and data-parallel gradient reductions overlap the passes; "
                  "reductions after the last pass, ZeRO-1 gathers, tensor-parallel all-reduces and expert "
                  "all-to-alls do not, except each layer's backward dispatch, hidden behind that layer's "
                  "expert weight gradients as far as they last"),
      std::string(
          "expert all-to-alls: balanced routing, so (EP-1)/EP of each exchange's rows leave the rank; a "
          "skewed step moves more and waits for its busiest rank"),
      std::string(
          "no kernel launch, host or data-loading overhead; MFU is MaxText's: model FLOPs (3 x forward, "
          "remat not counted) over the step time and the peak"),
  };
}

}  // namespace

CostReport estimate_cost(const graph::PlanSpec& plan, const Config& cfg, const Topology& topo) {
  if (!plan.has_graph()) fail(ErrorKind::kInternal, "estimate_cost needs a plan with its graph");
  const Target& d = topo.device;
  const graph::Graph& g = plan.graph();
  const double G = static_cast<double>(cfg.gradient_accumulation_steps);
  const DType compute = cfg.dtype == "bfloat16" ? DType::kBF16 : DType::kF32;
  CostReport r;
  r.peak_flops = d.peak_for(compute);
  const double rate = r.peak_flops * d.gemm_efficiency;

  const NodeTotals n = node_totals(g, rate, d.hbm_bytes_per_s);
  r.compute_seconds = G * n.pass_seconds;
  r.optimizer_seconds = n.optimizer_seconds;
  r.recompute_flops = G * n.recompute_flops;
  r.model_flops = plan.flops().model_training() * G;
  r.executed_flops = G * n.pass_flops + n.optimizer_flops;
  r.memory_bytes = G * n.pass_bytes + n.optimizer_bytes;
  const double tp_bytes = n.tp_bytes;
  const int64_t tp_calls = n.tp_calls;

  // The schedule's collectives, grouped by their axes.
  const dist::MeshSizes sizes = mesh_sizes(cfg);
  std::map<std::string, AxisTraffic> by_group;
  auto entry = [&](const std::vector<MeshAxis>& group, bool overlapped) -> AxisTraffic& {
    const std::string key = group_name(group) + (overlapped ? "" : " (exposed)");
    AxisTraffic& t = by_group[key];
    if (t.group.empty()) {
      const Link link = link_of(group, cfg, topo);
      t.group = key;
      t.link = link.name;
      t.link_bytes_per_s = link.bytes_per_s;
      t.overlapped = overlapped;
      t.ranks = 1;
      for (MeshAxis a : group) t.ranks *= sizes[static_cast<int>(a)];
    }
    return t;
  };
  for (const graph::Collective& c : plan.collectives()) {
    const bool exposed =
        c.when == graph::CollectiveWhen::kBeforeUpdate || c.when == graph::CollectiveWhen::kAfterUpdate;
    const double times = c.when == graph::CollectiveWhen::kEveryPass ? G : 1;
    AxisTraffic& t = entry(c.group, !exposed);
    const double bytes = static_cast<double>(c.bytes) * times;
    (c.kind == graph::CollectiveKind::kAllGather       ? t.all_gather_bytes
     : c.kind == graph::CollectiveKind::kReduceScatter ? t.reduce_scatter_bytes
                                                       : t.all_reduce_bytes) += bytes;
    t.calls += static_cast<int64_t>(times);
    const Link link = link_of(c.group, cfg, topo);
    const double s = times * ring_seconds(c.kind, static_cast<double>(c.bytes), t.ranks, link, d.kind);
    t.seconds += s;
    (exposed ? r.exposed_comm_seconds : r.overlapped_comm_seconds) += s;
  }
  if (tp_calls > 0) {
    const std::vector<MeshAxis> tensor = {MeshAxis::kTensor};
    AxisTraffic& t = entry(tensor, false);
    t.group = "tensor (activations)";
    t.all_reduce_bytes += G * tp_bytes;
    t.calls += static_cast<int64_t>(G) * tp_calls;
    const Link link = link_of(tensor, cfg, topo);
    const double n = static_cast<double>(t.ranks);
    t.seconds = G * (2 * tp_bytes * (n - 1) / n / link.bytes_per_s +
                     static_cast<double>(tp_calls) * link_latency(d.kind, link.crosses_nodes));
    r.tensor_comm_seconds = t.seconds;
  }
  // Expert parallelism: the exchanges of every pass (sharding_expert.h), each a ragged all-to-all
  // whose balanced share (EP-1)/EP leaves the rank, and the per-expert counts' all-gathers.
  const graph::ExpertParallelTraffic ep = graph::expert_parallel_traffic(g);
  if (ep.all_to_alls > 0) {
    const auto& deferred = n.deferred;
    const std::vector<MeshAxis> expert = {MeshAxis::kExpert};
    AxisTraffic& t = entry(expert, false);
    t.group = "expert (tokens)";
    const Link link = link_of(expert, cfg, topo);
    const double n = static_cast<double>(t.ranks);
    t.all_to_all_bytes += G * ep.total();
    t.all_gather_bytes += G * ep.count_bytes;
    t.calls += static_cast<int64_t>(G) * (ep.all_to_alls + ep.count_gathers);
    const double latency = link_latency(d.kind, link.crosses_nodes);
    double hidden = 0;
    for (const auto& [bytes, cover] : deferred)
      hidden += std::min(bytes * (n - 1) / n / link.bytes_per_s + latency, cover);
    t.seconds += G * ((ep.total() * (n - 1) / n + ep.count_bytes * (n - 1) / n) / link.bytes_per_s +
                      static_cast<double>(ep.all_to_alls + ep.count_gathers) * latency - hidden);
    r.expert_comm_seconds = t.seconds;
  }
  for (auto& [k, t] : by_group) r.traffic.push_back(t);

  r.step_seconds = std::max(r.compute_seconds, r.overlapped_comm_seconds) + r.exposed_comm_seconds +
                   r.tensor_comm_seconds + r.expert_comm_seconds + r.optimizer_seconds;
  r.mfu = r.step_seconds > 0 ? r.model_flops / (r.step_seconds * r.peak_flops) : 0;
  const double tokens =
      static_cast<double>(cfg.micro_batch_size_to_train_on) * static_cast<double>(cfg.max_target_length) * G;
  r.tokens_per_s_per_device = tokens / static_cast<double>(cfg.num_devices) / r.step_seconds;

  r.assumptions = assumptions_of(r, cfg, d);
  return r;
}

}  // namespace tessera::compile
