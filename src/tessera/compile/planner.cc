// Rank-class plans, memory per device and the verdict (planner.h).
#include "tessera/compile/planner.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <tuple>
#include <utility>

#include "tessera/backends/cpu/onednn_matmul.h"
#include "tessera/core/error.h"
#include "tessera/models/decoder.h"
#include "tessera/models/tensor_parallel.h"

namespace tessera::compile {

namespace {

// The largest GEMM a node runs on oneDNN, if any. A grouped matmul (MoE experts) runs each group
// in chunks of at most 512 rows (onednn_matmul.cc), and its weight gradient as one GEMM per group
// whose reduction runs over that group's rows. A group holds at most one row per token (the
// dispatch's input rows; without the dispatch in sight, every row), which is what is charged: the
// buffer keeps the size of the most crowded expert a step ever routes to.
std::optional<backends::GemmShape> largest_gemm(const graph::Graph& g, const graph::Node& n) {
  if (n.op != graph::OpKind::kMatmul && n.op != graph::OpKind::kGroupedMatmul) return std::nullopt;
  const Shape &a = g.value(n.in[0]).shape, &b = g.value(n.in[1]).shape;
  const DType ab = g.value(n.in[0]).dtype, c = g.value(n.out[0]).dtype;
  if (n.op == graph::OpKind::kMatmul) {
    const graph::MatmulAttrs& at = n.attr<graph::MatmulAttrs>();
    return backends::GemmShape{.m = at.trans_a ? a[1] : a[0],
                               .n = at.trans_b ? b[0] : b[1],
                               .k = at.trans_a ? a[0] : a[1],
                               .trans_a = at.trans_a,
                               .trans_b = at.trans_b,
                               .ab_dtype = ab,
                               .c_dtype = c};
  }
  const graph::GroupedMatmulAttrs& at = n.attr<graph::GroupedMatmulAttrs>();
  int64_t group_rows = a[0];
  const int dispatch = g.value(n.in[2]).producer;  // of the group sizes
  if (dispatch >= 0 && g.nodes()[static_cast<size_t>(dispatch)].op == graph::OpKind::kMoeDispatch)
    group_rows = std::min(group_rows, g.value(g.nodes()[static_cast<size_t>(dispatch)].in[0]).shape[0]);
  if (at.weight_grad)  // c[g] [K, N] (+)= a_gᵀ · b_g over the group's rows
    return backends::GemmShape{
        .m = a[1], .n = b[1], .k = group_rows, .trans_a = true, .ab_dtype = ab, .c_dtype = c};
  return backends::GemmShape{
      .m = std::min<int64_t>(group_rows, 512),  // b: the weights [X, K, N] (or [X, N, K])
      .n = at.trans_b ? b[1] : b[2],
      .k = at.trans_b ? b[2] : b[1],
      .trans_b = at.trans_b,
      .ab_dtype = ab,
      .c_dtype = c};
}

// oneDNN's shared kernel buffers (backends/cpu/onednn_matmul.h), each as large as the largest GEMM
// needs: the copy of a weight in its blocked layout, and where this CPU has no bf16 GEMM the bf16
// operands widened to f32 (that GEMM then runs, and copies its weight, in f32).
std::pair<size_t, size_t> kernel_buffer_bytes(const graph::Graph& g) {
  size_t blocked = 0, widened = 0;
  for (const graph::Node& n : g.nodes()) {
    std::optional<backends::GemmShape> s = largest_gemm(g, n);
    if (!s) continue;
    const size_t w = cpu::widened_operands_bytes(*s);
    if (w > 0) s->ab_dtype = s->c_dtype = DType::kF32;
    if (n.op == graph::OpKind::kMatmul)  // the grouped chunks run from B as it is
      blocked = std::max(blocked, cpu::blocked_b_copy_bytes(*s));
    widened = std::max(widened, w);
  }
  return {blocked, widened};
}

}  // namespace

DeviceMemory device_memory(const graph::PlanSpec& plan, const Target& device) {
  const graph::MemoryReport& m = plan.memory();
  DeviceMemory d;
  d.params = m.params + m.param_copies;
  d.grads = m.grads;
  d.optimizer = m.optimizer;
  d.activations = m.activations;
  d.collective = m.gathered + m.collective_scratch_estimate;
  if (device.kind == TargetKind::kCpu && plan.has_graph())
    std::tie(d.kernels, d.widened) = kernel_buffer_bytes(plan.graph());
  d.other = m.inputs + static_cast<size_t>(device.reserved_bytes);
  return d;
}

void reject_unbuilt_parallelism(const Config& cfg) {
  const dist::MeshSizes sizes = mesh_sizes(cfg);
  for (int a = 0; a < kNumMeshAxes; ++a) {
    const auto axis = static_cast<MeshAxis>(a);
    if (axis == MeshAxis::kData || axis == MeshAxis::kFsdp || axis == MeshAxis::kTensor ||
        axis == MeshAxis::kExpert || sizes[a] == 1)
      continue;
    fail(
        ErrorKind::kConfig,
        "the mesh's {} axis has size {} (ici_{}_parallelism x dcn_{}_parallelism): Tessera shards over data, "
        "fsdp, tensor and expert only; {} parallelism is not in this build yet, so it cannot be planned "
        "either",
        kMeshAxes[a].axis, sizes[a], kMeshAxes[a].key, kMeshAxes[a].key, kMeshAxes[a].key);
  }
}

dist::MeshSizes mesh_sizes(const Config& cfg) {
  dist::MeshSizes s;
  for (int a = 0; a < kNumMeshAxes; ++a) s[a] = cfg.ici_parallelism[a] * cfg.dcn_parallelism[a];
  return s;
}

RankPlan build_rank_plan(const Config& cfg, const dist::MeshSizes& coords) {
  const dist::MeshSizes sizes = mesh_sizes(cfg);
  models::ModelSpec spec = models::model_spec_from_config(cfg);
  models::set_tensor_parallel(spec, cfg, coords[static_cast<int>(MeshAxis::kTensor)]);
  // MaxText's batch: per_device_batch_size x devices sequences per micro-step, split over the
  // data x fsdp x expert ranks (tensor ranks share their rows).
  const int64_t readers = sizes[static_cast<int>(MeshAxis::kData)] *
                          sizes[static_cast<int>(MeshAxis::kFsdp)] *
                          sizes[static_cast<int>(MeshAxis::kExpert)];
  if (cfg.micro_batch_size_to_train_on % readers != 0)
    fail(ErrorKind::kConfig,
         "the micro-batch of {} sequences does not split over {} data x fsdp x expert rank(s)",
         cfg.micro_batch_size_to_train_on, readers);
  spec.batch = cfg.micro_batch_size_to_train_on / readers;
  graph::Graph g;
  models::build_decoder(g, spec);
  graph::PlanOptions po;
  po.remat_policy = cfg.remat_policy;
  po.optimizer = cfg.opt_type == "sgd" ? graph::OptimizerKind::kSgd : graph::OptimizerKind::kAdamW;
  po.sharding.sizes = sizes;
  po.sharding.coords = coords;
  po.sharding.rules = cfg.logical_axis_rules;
  po.sharding.shard_optimizer_over_data = cfg.shard_optimizer_over_data;
  po.sharding.ragged_buffer_factor = cfg.ragged_buffer_factor;
  return RankPlan{.coords = coords, .model = spec, .plan = graph::PlanSpec(std::move(g), po)};
}

bool same_rank_class(const graph::PlanSpec& a, const graph::PlanSpec& b) {
  if (!(a.memory() == b.memory()) || !(a.flops() == b.flops()) || !(a.nodes() == b.nodes())) return false;
  if (a.collectives().size() != b.collectives().size()) return false;
  for (size_t i = 0; i < a.collectives().size(); ++i) {
    const graph::Collective &x = a.collectives()[i], &y = b.collectives()[i];
    if (x.kind != y.kind || x.when != y.when || x.group != y.group || x.bytes != y.bytes) return false;
  }
  return true;
}

Topology topology_of(const Config& cfg, const Catalogue& catalogue, const CpuMachine* cpu) {
  return resolve_topology(catalogue, cfg.compile_topology, cfg.compile_topology_num_slices, cpu);
}

CompiledRun compile_run(const Config& cfg, const Topology& topology, bool first_class_only) {
  if (cfg.num_devices != topology.num_devices() || cfg.num_slices != topology.num_slices)
    fail(ErrorKind::kInternal,
         "compile_run: the config was resolved for {} devices in {} slices, the topology has {} in {}",
         cfg.num_devices, cfg.num_slices, topology.num_devices(), topology.num_slices);
  reject_unbuilt_parallelism(cfg);
  CompiledRun run;
  run.cfg = cfg;
  run.topology = topology;
  const dist::MeshSizes sizes = mesh_sizes(cfg);
  // The corners: every combination of 0 and size-1 over the axes larger than one.
  std::vector<int> axes;
  for (int a = 0; a < kNumMeshAxes; ++a)
    if (sizes[a] > 1) axes.push_back(a);
  const int64_t corners = first_class_only ? 1 : int64_t{1} << axes.size();
  for (int64_t c = 0; c < corners; ++c) {
    dist::MeshSizes coords{};
    for (size_t i = 0; i < axes.size(); ++i)
      if ((c >> i) & 1) coords[axes[i]] = sizes[axes[i]] - 1;
    RankPlan rp = build_rank_plan(cfg, coords);
    ++run.corners_planned;
    bool seen = false;
    for (const RankPlan& k : run.classes) seen = seen || same_rank_class(k.plan, rp.plan);
    if (!seen) run.classes.push_back(std::move(rp));
  }
  for (const RankPlan& k : run.classes) {
    run.memory.push_back(device_memory(k.plan, topology.device));
    run.verdict.needed = std::max(run.verdict.needed, run.memory.back().total());
  }
  // `other` holds the runtime's reservation; the verdict compares against the whole device.
  run.verdict.usable = topology.device.memory_bytes;
  return run;
}

}  // namespace tessera::compile
