#include "tessera/graph/plan.h"

#include <fmt/format.h>

#include "tessera/core/error.h"
#include "tessera/ops/attention.h"

namespace tessera::graph {

namespace {
bool persistent_kind(ValueKind k) { return k != ValueKind::kActivation; }

std::string gib(size_t b) { return fmt::format("{:.3f} GiB", static_cast<double>(b) / (1u << 30)); }
}  // namespace

Plan::Plan(Graph forward, const PlanOptions& opts) : graph_(std::move(forward)) {
  dloss_ = append_backward(graph_);
  apply_remat(graph_, opts.remat_policy);
  first_opt_ = static_cast<int>(graph_.nodes().size());
  append_optimizer(graph_, opts.optimizer);
  mem_plan_ = plan_memory(graph_);

  const auto& values = graph_.values();
  size_t persistent_bytes = 0;
  for (const Value& v : values) {
    if (!persistent_kind(v.kind)) continue;
    size_t b = aligned_bytes(v.shape, v.dtype);
    persistent_bytes += b;
    switch (v.kind) {
      case ValueKind::kParam: memory_.params += b; break;
      case ValueKind::kParamCompute: memory_.param_copies += b; break;
      case ValueKind::kGrad: memory_.grads += b; break;
      case ValueKind::kOptState: memory_.optimizer += b; break;
      default: memory_.inputs += b; break;
    }
  }
  memory_.activations = mem_plan_.arena_bytes;
  memory_.activations_lower_bound = mem_plan_.lower_bound;

  persistent_ = Arena(persistent_bytes, "parameters and optimizer state");
  activations_ = Arena(mem_plan_.arena_bytes, "activations");
  views_.resize(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    const Value& v = values[i];
    if (persistent_kind(v.kind)) {
      views_[i] = persistent_.tensor(v.shape, v.dtype);
    } else {
      views_[i] = Tensor(activations_.base() + mem_plan_.offset[i], v.shape, v.dtype);
    }
  }
}

int64_t Plan::num_params() const {
  int64_t n = 0;
  for (const Value& v : graph_.values())
    if (v.kind == ValueKind::kParam) n += v.shape.numel();
  return n;
}

double node_flops(const Graph& g, const Node& n) {
  switch (n.op) {
    case OpKind::kMatmul: {
      const Shape& c = g.value(n.out[0]).shape;
      const Shape& a = g.value(n.in[0]).shape;
      int64_t k = n.attrs.trans_a ? a[0] : a[1];
      return 2.0 * static_cast<double>(c[0]) * static_cast<double>(c[1]) * static_cast<double>(k);
    }
    case OpKind::kAttention:
      return ops::attention_fwd_flops(n.attrs.batch, n.attrs.seq, n.attrs.heads, n.attrs.head_dim,
                                      n.attrs.sliding_window);
    case OpKind::kAttentionBwd:
      return ops::attention_bwd_flops(n.attrs.batch, n.attrs.seq, n.attrs.heads, n.attrs.head_dim,
                                      n.attrs.sliding_window);
    default: return 0;
  }
}

FlopReport Plan::flops() const {
  FlopReport r;
  for (const Node& n : graph_.nodes()) {
    double f = node_flops(graph_, n);
    switch (n.phase) {
      case Phase::kForward: r.forward += f; break;
      case Phase::kBackward: r.backward += f; break;
      case Phase::kRecompute: r.recompute += f; break;
      case Phase::kOptimizer: r.optimizer += f; break;
    }
  }
  return r;
}

std::string Plan::summary() const {
  FlopReport f = flops();
  const MemoryReport& m = memory_;
  std::string s;
  s += fmt::format("plan: {} parameters ({:.2f} M), {} nodes ({} optimizer)\n", num_params(),
                   static_cast<double>(num_params()) / 1e6, graph_.nodes().size(),
                   graph_.nodes().size() - static_cast<size_t>(first_opt_));
  s += fmt::format("plan: GFLOP per micro-step: forward {:.2f}, backward {:.2f}, recompute {:.2f}\n",
                   f.forward / 1e9, f.backward / 1e9, f.recompute / 1e9);
  s += fmt::format("plan: memory: parameters {}, compute copies {}, gradients {}, optimizer state {}, "
                   "inputs {}, activations {} (lower bound {}), total {}",
                   gib(m.params), gib(m.param_copies), gib(m.grads), gib(m.optimizer), gib(m.inputs),
                   gib(m.activations), gib(m.activations_lower_bound), gib(m.total()));
  return s;
}

}  // namespace tessera::graph
