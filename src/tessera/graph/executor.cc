#include "tessera/graph/executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/dist/communicator.h"
#include "tessera/graph/sharding_expert.h"
#include "tessera/ops/cross_entropy.h"
#include "tessera/ops/optimizer.h"

namespace tessera::graph {

namespace {

// A mesh axis's communicator (a one-process one on one device).
dist::Communicator& axis_group(dist::Mesh* mesh, MeshAxis axis) {
  static const std::unique_ptr<dist::Communicator> one = dist::make_single_process_communicator();
  return mesh ? mesh->axis(axis) : *one;
}

// Profile rows for the optimizer step's work outside the nodes, keyed below every OpKind: zeroing
// the gradients, their global norm (on several ranks after waiting for their reductions, which
// count as its sync) and ParamSync's work after the update (ZeRO-1's gathers of the new pieces).
constexpr int kZeroGradsRow = -1, kGradNormRow = -2, kAfterUpdateRow = -3;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

Executor::Executor(const PlanSpec& spec, Workspace& workspace, std::shared_ptr<const ops::RopeTable> rope,
                   dist::Mesh* mesh)
    : spec_(spec),
      ws_(workspace),
      backend_(backends::backend_for(workspace.device())),
      rope_(std::move(rope)),
      mesh_(mesh) {
  ctx_.graph = &spec_.graph();
  ctx_.ws = &ws_;
  ctx_.backend = &backend_;
  ctx_.rope = rope_.get();
  ctx_.tensor = &axis_group(mesh_, MeshAxis::kTensor);
  ctx_.expert = &axis_group(mesh_, MeshAxis::kExpert);
  ctx_.pending = &pending_;
  // Every node must have a kernel on the workspace's device, for its activations' dtype: a clear
  // error before the first step rather than inside one.
  for (const Node& n : spec_.graph().nodes()) {
    const DType dt = spec_.graph().value(n.out.empty() ? n.in[0] : n.out[0]).dtype;
    TESSERA_CHECK(backend_.supports(op_name(n.op), dt), ErrorKind::kConfig,
                  "{}: the {} backend has no {} kernel for {}", n.name, backend_.name(), op_name(n.op),
                  dtype_name(dt));
  }
  for (const Value& v : spec_.graph().values())
    if (v.kind == ValueKind::kParam && v.grad != kNoValue) grads_.push_back(ws_.opt_view(v.grad));
  if (mesh_ && mesh_->num_devices() > 1) sync_ = std::make_unique<ParamSync>(spec_, ws_, *mesh_);
  TESSERA_CHECK(sync_ || (!spec_.any_sharded() && !spec_.zero1()), ErrorKind::kInternal,
                "a sharded plan needs the mesh it was planned for");
}

Executor::~Executor() = default;

void Executor::zero_grads() {
  const auto t0 = std::chrono::steady_clock::now();
  if (sync_) {
    sync_->zero_grads();
  } else {
    const auto& values = spec_.graph().values();
    for (size_t i = 0; i < values.size(); ++i)
      if (values[i].kind == ValueKind::kGrad) {
        const Tensor& t = ws_.view(static_cast<ValueId>(i));
        backend_.fill_zero_for_later(t);
      }
  }
  if (profiling_) add_profile(kZeroGradsRow, Phase::kOptimizer, seconds_since(t0), 0, 0);
}

void Executor::add_profile(int op, Phase phase, double seconds, double sync_seconds, double flops) {
  ProfileRow& row = profile_[{op, static_cast<int>(phase)}];
  row.seconds += seconds;
  row.sync_seconds += sync_seconds;
  row.flops += flops;
  ++row.calls;
}

void Executor::run(const Node& n) {
  op_def(n.op).run(ctx_, n);
  // An exchange in flight (sharding_expert.h) moves while the nodes between it and its wait run.
  if (!pending_.requests.empty()) ctx_.expert->progress();
}

void Executor::run_range(int begin, int end, bool forward_only, bool last_micro_step) {
  const auto& nodes = spec_.graph().nodes();
  if (sync_) sync_->begin_pass(forward_only, last_micro_step);
  ctx_.forward_only = forward_only;
  for (int i = begin; i < end; ++i) {
    if (forward_only && nodes[i].phase != Phase::kForward) continue;
    if (observer_ && !profiling_) {
      observer_->at(i, NodeStage::kSyncBegin);
      if (sync_) sync_->before_node(i);
      observer_->at(i, NodeStage::kKernelBegin);
      run(nodes[i]);
      observer_->at(i, NodeStage::kKernelEnd);
      if (sync_) sync_->after_node(i);
      observer_->at(i, NodeStage::kSyncEnd);
      continue;
    }
    if (!profiling_) {
      if (sync_) sync_->before_node(i);
      run(nodes[i]);
      if (sync_) sync_->after_node(i);
      continue;
    }
    using Clock = std::chrono::steady_clock;
    if (observer_) observer_->at(i, NodeStage::kSyncBegin);
    const auto t0 = Clock::now();
    if (sync_) sync_->before_node(i);  // the wait for a gather counts to the node that needs it
    const auto t1 = Clock::now();
    if (observer_) observer_->at(i, NodeStage::kKernelBegin);
    run(nodes[i]);
    if (observer_) observer_->at(i, NodeStage::kKernelEnd);
    const auto t2 = Clock::now();
    if (sync_) sync_->after_node(i);
    const auto t3 = Clock::now();
    if (observer_) observer_->at(i, NodeStage::kSyncEnd);
    add_profile(static_cast<int>(nodes[i].op), nodes[i].phase, std::chrono::duration<double>(t3 - t0).count(),
                std::chrono::duration<double>((t1 - t0) + (t3 - t2)).count(),
                node_flops(spec_.graph(), nodes[i]));
  }
  TESSERA_CHECK(pending_.requests.empty(), ErrorKind::kInternal,
                "a pass ended with {} expert exchanges in flight", pending_.requests.size());
}

std::string Executor::profile_report() const {
  static const char* kPhase[] = {"forward", "recompute", "backward", "optimizer"};
  std::vector<std::pair<std::pair<int, int>, ProfileRow>> rows(profile_.begin(), profile_.end());
  std::sort(rows.begin(), rows.end(), [](auto& a, auto& b) { return a.second.seconds > b.second.seconds; });
  double total = 0;
  for (auto& r : rows) total += r.second.seconds;
  // "sync": the collectives' share of the row (ParamSync before and after the node); GFLOP/s counts
  // the node's own time.
  std::string s = fmt::format("{:<20} {:<10} {:>7} {:>10} {:>7} {:>8} {:>9}\n", "op", "phase", "calls",
                              "seconds", "share", "sync", "GFLOP/s");
  for (auto& [key, r] : rows) {
    const double own = r.seconds - r.sync_seconds;
    const std::string_view name = key.first == kZeroGradsRow     ? "zero_grads"
                                  : key.first == kGradNormRow    ? "grad_norm"
                                  : key.first == kAfterUpdateRow ? "after_update"
                                                                 : op_name(static_cast<OpKind>(key.first));
    s += fmt::format("{:<20} {:<10} {:>7} {:>10.3f} {:>6.1f}% {:>8.3f} {:>9.1f}\n", name, kPhase[key.second],
                     r.calls, r.seconds, 100 * r.seconds / total, r.sync_seconds,
                     r.flops > 0 && own > 0 ? r.flops / own / 1e9 : 0.0);
  }
  return s;
}

double Executor::summed_loss(int64_t* counted) const {
  const Graph& g = spec_.graph();
  const Node& ce = g.nodes()[g.value(g.loss()).producer];
  ops::MeanLoss m = ops::cross_entropy_mean(ws_.view(g.loss()), ws_.view(ce.in[1]));
  if (counted) *counted = m.count;
  return m.mean * static_cast<double>(m.count);
}

double Executor::aux_loss() const {
  double sum = 0;
  for (ValueId a : spec_.graph().aux_losses()) sum += ws_.view(a).ptr<float>()[0];
  return sum;
}

double Executor::forward_backward(bool last_micro_step) {
  run_range(0, spec_.first_optimizer_node(), false, last_micro_step);
  return summed_loss(nullptr);
}

double Executor::forward_only(int64_t* counted) {
  run_range(0, spec_.first_optimizer_node(), true, false);
  return summed_loss(counted);
}

void Executor::infer() {
  TESSERA_ASSERT(spec_.graph().inference());
  run_range(0, spec_.first_optimizer_node(), true, false);
}

double Executor::param_norm() {
  if (sync_) return std::sqrt(sync_->param_sq_norm());
  std::vector<Tensor> params;
  for (ValueId p : spec_.graph().params()) params.push_back(ws_.state(p));
  return ops::global_norm(params);
}

OptimizerResult Executor::apply_optimizer(const OptimizerStep& step) {
  OptimizerResult r;
  TESSERA_ASSERT(step.grad_divisor > 0);
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  if (sync_) sync_->finish_gradients();
  const auto t1 = Clock::now();
  r.grad_norm = (sync_ ? std::sqrt(sync_->grad_sq_norm()) : ops::global_norm(grads_)) / step.grad_divisor;
  if (profiling_)
    add_profile(kGradNormRow, Phase::kOptimizer, seconds_since(t0),
                std::chrono::duration<double>(t1 - t0).count(), 0);
  r.clip_scale = ops::clip_scale(r.grad_norm, step.clip_threshold);
  ctx_.adamw = step.adamw;
  ctx_.sgd_lr = step.sgd_lr;
  ctx_.grad_scale = r.clip_scale / step.grad_divisor;
  const auto& nodes = spec_.graph().nodes();
  for (size_t i = static_cast<size_t>(spec_.first_optimizer_node()); i < nodes.size(); ++i) {
    if (observer_) observer_->at(static_cast<int>(i), NodeStage::kKernelBegin);
    const auto t = Clock::now();
    run(nodes[i]);
    if (profiling_) add_profile(static_cast<int>(nodes[i].op), Phase::kOptimizer, seconds_since(t), 0, 0);
    if (observer_) observer_->at(static_cast<int>(i), NodeStage::kKernelEnd);
  }
  if (sync_) {
    const auto t = Clock::now();
    sync_->after_optimizer();
    const double seconds = seconds_since(t);
    if (profiling_) add_profile(kAfterUpdateRow, Phase::kOptimizer, seconds, seconds, 0);
  }
  return r;
}

}  // namespace tessera::graph
