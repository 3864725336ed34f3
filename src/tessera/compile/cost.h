// The cost analysis of one rank's step on a topology: FLOPs per step, bytes per collective per
// mesh axis, and a roofline estimate of the step time and MFU. Every assumption the estimate
// makes is returned as a line of text (CostReport::assumptions) so that the CLI prints it.
//
// The model, per optimizer step of G = gradient_accumulation_steps micro-steps:
//   node time      = max(FLOPs / (peak(dtype) x gemm_efficiency), bytes / HBM bandwidth), for each
//                    node of the plan (graph::node_flops, graph::node_bytes: the op table's counts);
//   pass           = sum over the forward, recompute and backward nodes; optimizer = its nodes, once;
//   collective     = ring algorithm: all-gather and reduce-scatter move (n-1)/n of the buffer per
//                    rank, all-reduce twice that, over the slowest link of the group's axes, plus
//                    a latency per call;
//   all-to-all     = the expert axis's ragged exchanges (sharding_expert.h): each moves the rank's
//                    R x E rows, of which (EP-1)/EP leave the rank when routing is balanced, over
//                    the expert axis's link, plus a latency per call;
//   step           = max(G x pass, overlapped collectives) + exposed collectives + tensor-parallel
//                    all-reduces + expert all-to-alls + optimizer.
// Overlapped: the FSDP gathers and reduce-scatters and the data-parallel gradient reduction, which
// ParamSync issues without blocking beside the passes (graph/param_sync.h). Exposed: the
// reductions after the last pass (kBeforeUpdate) and ZeRO-1's gathers after the update. Tensor
// parallelism's all-reduces and expert parallelism's all-to-alls are graph nodes on the critical
// path (each exchange is started and waited for inside its node).
#pragma once

#include <string>
#include <vector>

#include "tessera/compile/target.h"
#include "tessera/config/config.h"
#include "tessera/graph/plan_spec.h"

namespace tessera::compile {

// Traffic of one step over one group of mesh axes (e.g. "fsdp", "data", "tensor").
struct AxisTraffic {
  std::string group;  // the axes, '+'-joined
  int64_t ranks = 1;  // ranks in one group
  std::string link;   // "intra-node" / "inter-node" / "ici" / "dcn" / "shared memory"
  double link_bytes_per_s = 0;
  double all_gather_bytes = 0, reduce_scatter_bytes = 0, all_reduce_bytes = 0;  // buffers, per step
  double all_to_all_bytes = 0;  // the rank's send buffers (the share that leaves it is in `seconds`)
  int64_t calls = 0;
  double seconds = 0;  // ring time on the link
  bool overlapped = true;
};

struct CostReport {
  double model_flops = 0;     // MaxText's count (3 x forward, per step): the MFU numerator
  double executed_flops = 0;  // forward + recompute + backward, per step, + optimizer
  double recompute_flops = 0;
  double memory_bytes = 0;     // bytes the nodes read and write, per step
  double compute_seconds = 0;  // G x pass
  double optimizer_seconds = 0;
  double overlapped_comm_seconds = 0, exposed_comm_seconds = 0, tensor_comm_seconds = 0;
  double expert_comm_seconds = 0;  // the expert axis's all-to-alls (and their count all-gathers)
  double step_seconds = 0;
  double mfu = 0;
  double tokens_per_s_per_device = 0;
  double peak_flops = 0;  // the device's for the compute dtype
  std::vector<AxisTraffic> traffic;
  std::vector<std::string> assumptions;
};

// The plan must hold its graph (a PlanSpec built here, not one read from a file).
CostReport estimate_cost(const graph::PlanSpec& plan, const Config& cfg, const Topology& topology);

}  // namespace tessera::compile
