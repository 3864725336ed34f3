#include "tessera/graph/executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/dist/communicator.h"
#include "tessera/ops/activation.h"
#include "tessera/ops/attention.h"
#include "tessera/ops/convert.h"
#include "tessera/ops/cross_entropy.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/embedding.h"
#include "tessera/ops/matmul.h"
#include "tessera/ops/norm.h"
#include "tessera/ops/vocab_parallel.h"

namespace tessera::graph {

Executor::Executor(const PlanSpec& spec, Workspace& workspace, std::unique_ptr<ops::RopeTable> rope,
                   dist::Mesh* mesh)
    : spec_(spec), ws_(workspace), backend_(backends::backend_for(workspace.device())), rope_(std::move(rope)),
      mesh_(mesh) {
  // Every node must have a kernel on the workspace's device, for its activations' dtype: a clear
  // error before the first step rather than inside one.
  for (const Node& n : spec_.graph().nodes()) {
    const DType dt = spec_.graph().value(n.out.empty() ? n.in[0] : n.out[0]).dtype;
    TESSERA_CHECK(backend_.supports(op_name(n.op), dt), ErrorKind::kConfig,
                  "{}: the {} backend has no {} kernel for {}", n.name, backend_.name(), op_name(n.op),
                  dtype_name(dt));
  }
  for (const Value& v : spec_.graph().values())
    if (v.kind == ValueKind::kParam) grads_.push_back(ws_.opt_view(v.grad));
  if (mesh_ && mesh_->num_devices() > 1) sync_ = std::make_unique<ParamSync>(spec_, ws_, *mesh_);
  TESSERA_CHECK(sync_ || (!spec_.any_sharded() && !spec_.zero1()), ErrorKind::kInternal,
                "a sharded plan needs the mesh it was planned for");
}

Executor::~Executor() = default;

void Executor::zero_grads() {
  if (sync_) return sync_->zero_grads();
  const auto& values = spec_.graph().values();
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i].kind == ValueKind::kGrad) {
      const Tensor& t = ws_.view(static_cast<ValueId>(i));
      backend_.fill_zero(t);
    }
}

namespace {

// [N, heads*D] activations seen as [B, T, heads, D].
Tensor heads_view(const Tensor& t, const NodeAttrs& a, int heads) {
  return t.reshape(Shape{a.batch, a.seq, heads, a.head_dim});
}

ops::AttentionOptions attention_options(const Workspace& p, const Node& n, size_t seg_index) {
  ops::AttentionOptions o;
  o.sliding_window = n.attrs.sliding_window;
  if (n.in.size() > seg_index) o.segment_ids = p.view(n.in[seg_index]);
  return o;
}

// ---- tensor parallelism (graph.h): the collectives of the tensor axis ----------------------------

dist::Communicator& tensor_group(dist::Mesh* mesh) {
  static const std::unique_ptr<dist::Communicator> one = dist::make_single_process_communicator();
  return mesh ? mesh->axis(MeshAxis::kTensor) : *one;
}

// Megatron's g (and f's backward): y = the sum over the tensor group of x. y may be x (in place).
// Reductions run in f32, so a bf16 value is summed through `scratch` (f32, x's shape): each
// rank's bf16 partial is widened exactly, the sum rounded to bf16 once.
void tensor_all_reduce(dist::Communicator& group, const Tensor& x, const Tensor& y, const Tensor* scratch) {
  if (x.dtype() == DType::kF32) {
    backends::backend_for(y.device()).copy(y, x);
    group.all_reduce(y.data(), static_cast<size_t>(y.numel()), DType::kF32);
    return;
  }
  TESSERA_ASSERT(scratch != nullptr);
  ops::convert(x, *scratch);
  group.all_reduce(scratch->data(), static_cast<size_t>(scratch->numel()), DType::kF32);
  ops::convert(*scratch, y);
}

// The vocab-parallel loss: ops/vocab_parallel.h's three steps around its two all-reduces.
void vocab_cross_entropy(dist::Communicator& group, const Tensor& logits, const Tensor& targets,
                         const NodeAttrs& a, const Tensor& loss, const Tensor& lse, const Tensor& stats) {
  const ops::VocabShardRange r{.offset = a.vocab_offset, .vocab = a.vocab};
  ops::vocab_cross_entropy_partials(logits, targets, r, lse, stats);
  group.all_reduce(lse.data(), static_cast<size_t>(lse.numel()), DType::kF32, dist::ReduceOp::kMax);
  ops::vocab_cross_entropy_rescale(lse, stats);
  group.all_reduce(stats.data(), static_cast<size_t>(stats.numel()), DType::kF32);
  ops::vocab_cross_entropy_finish(targets, stats, a.z_loss, lse, loss);
}

}  // namespace

void Executor::run(const Node& n) {
  const Workspace& p = ws_;
  auto in = [&](size_t i) -> const Tensor& { return p.view(n.in[i]); };
  auto out = [&](size_t i) -> const Tensor& { return p.view(n.out[i]); };
  const NodeAttrs& a = n.attrs;
  switch (n.op) {
    case OpKind::kEmbedding:
      ops::embedding_forward(in(0), in(1), out(0));
      break;
    case OpKind::kEmbeddingBwd:
      ops::embedding_backward(in(0), in(1), out(0));
      break;
    case OpKind::kRmsNorm:
      ops::rmsnorm_fwd(in(0), in(1), a.eps, out(0), out(1));
      break;
    case OpKind::kRmsNormBwd:  // in: dy, x, gamma, rstd
      ops::rmsnorm_bwd(in(1), in(2), in(3), in(0), out(0), out(1));
      break;
    case OpKind::kMatmul:
      ops::matmul(in(0), in(1), out(0),
                  {.trans_a = a.trans_a, .trans_b = a.trans_b, .accumulate = a.accumulate});
      break;
    case OpKind::kRope:
      ops::rope_fwd(heads_view(in(0), a, a.heads), in(1), *rope_, ops::RopeLayout::kRotateHalf,
                    heads_view(out(0), a, a.heads));
      break;
    case OpKind::kRopeBwd:
      ops::rope_bwd(heads_view(in(0), a, a.heads), in(1), *rope_, ops::RopeLayout::kRotateHalf,
                    heads_view(out(0), a, a.heads));
      break;
    case OpKind::kAttention:
      ops::attention_fwd(heads_view(in(0), a, a.heads), heads_view(in(1), a, a.kv_heads),
                         heads_view(in(2), a, a.kv_heads), heads_view(out(0), a, a.heads), out(1),
                         attention_options(p, n, 3));
      break;
    case OpKind::kAttentionBwd:  // in: do, q, k, v, o, lse [, seg]
      ops::attention_bwd(heads_view(in(0), a, a.heads), heads_view(in(1), a, a.heads),
                         heads_view(in(2), a, a.kv_heads), heads_view(in(3), a, a.kv_heads),
                         heads_view(in(4), a, a.heads), in(5), heads_view(out(0), a, a.heads),
                         heads_view(out(1), a, a.kv_heads), heads_view(out(2), a, a.kv_heads),
                         attention_options(p, n, 6));
      break;
    case OpKind::kGlu:
      ops::glu_fwd(static_cast<ops::Activation>(a.activation), in(0), in(1), out(0));
      break;
    case OpKind::kGluBwd:  // in: dy, gate, up
      ops::glu_bwd(static_cast<ops::Activation>(a.activation), in(1), in(2), in(0), out(0), out(1));
      break;
    case OpKind::kAdd:
      ops::add(in(0), in(1), out(0));
      break;
    case OpKind::kCrossEntropy:
      ops::cross_entropy_forward(in(0), in(1), out(0), out(1), a.z_loss);
      break;
    case OpKind::kCrossEntropyBwd:  // in: logits, targets, lse, dloss
      ops::cross_entropy_backward(in(0), in(1), in(2), in(3), out(0), a.z_loss);
      break;
    case OpKind::kTpCopy:  // the identity: nothing to do unless a recomputed copy has its own buffer
      backend_.copy(out(0), in(0));
      break;
    case OpKind::kTpAllReduce:
      tensor_all_reduce(tensor_group(mesh_), in(0), out(0), n.out.size() > 1 ? &out(1) : nullptr);
      break;
    case OpKind::kVocabEmbedding:
      ops::vocab_embedding_forward(in(0), in(1), {.offset = a.vocab_offset, .vocab = a.vocab}, out(0));
      break;
    case OpKind::kVocabEmbeddingBwd:
      ops::vocab_embedding_backward(in(0), in(1), {.offset = a.vocab_offset, .vocab = a.vocab}, out(0));
      break;
    case OpKind::kVocabCrossEntropy:
      vocab_cross_entropy(tensor_group(mesh_), in(0), in(1), a, out(0), out(1), out(2));
      break;
    case OpKind::kVocabCrossEntropyBwd:  // in: logits, targets, lse, dloss
      ops::vocab_cross_entropy_backward(in(0), in(1), {.offset = a.vocab_offset, .vocab = a.vocab}, in(2),
                                        in(3), out(0), a.z_loss);
      break;
    // The optimizer updates this rank's pieces (opt_view: the whole tensors on one device).
    case OpKind::kAdamW: {
      ops::AdamWHyperparams hp = step_.adamw;
      if (!spec_.graph().value(n.in[0]).weight_decay) hp.weight_decay = 0;
      hp.grad_scale = grad_scale_;
      ops::adamw_update(p.opt_view(n.in[0]), p.opt_view(n.in[1]), p.opt_view(n.in[2]), p.opt_view(n.in[3]),
                        hp, n.out.empty() ? Tensor() : p.opt_view(n.out[0]));
      break;
    }
    case OpKind::kSgd: {
      ops::SgdHyperparams hp{.lr = step_.sgd_lr, .grad_scale = grad_scale_};
      ops::sgd_update(p.opt_view(n.in[0]), p.opt_view(n.in[1]), hp,
                      n.out.empty() ? Tensor() : p.opt_view(n.out[0]));
      break;
    }
  }
}

void Executor::run_range(int begin, int end, bool forward_only, bool last_micro_step) {
  const auto& nodes = spec_.graph().nodes();
  if (sync_) sync_->begin_pass(forward_only, last_micro_step);
  for (int i = begin; i < end; ++i) {
    if (forward_only && nodes[i].phase != Phase::kForward) continue;
    if (!profiling_) {
      if (sync_) sync_->before_node(i);
      run(nodes[i]);
      if (sync_) sync_->after_node(i);
      continue;
    }
    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    if (sync_) sync_->before_node(i);  // the wait for a gather counts to the node that needs it
    const auto t1 = Clock::now();
    run(nodes[i]);
    const auto t2 = Clock::now();
    if (sync_) sync_->after_node(i);
    const auto t3 = Clock::now();
    ProfileRow& row = profile_[{static_cast<int>(nodes[i].op), static_cast<int>(nodes[i].phase)}];
    row.seconds += std::chrono::duration<double>(t3 - t0).count();
    row.sync_seconds += std::chrono::duration<double>((t1 - t0) + (t3 - t2)).count();
    row.flops += node_flops(spec_.graph(), nodes[i]);
    ++row.calls;
  }
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
    s += fmt::format("{:<20} {:<10} {:>7} {:>10.3f} {:>6.1f}% {:>8.3f} {:>9.1f}\n",
                     op_name(static_cast<OpKind>(key.first)), kPhase[key.second], r.calls, r.seconds,
                     100 * r.seconds / total, r.sync_seconds,
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

double Executor::forward_backward(bool last_micro_step) {
  run_range(0, spec_.first_optimizer_node(), false, last_micro_step);
  return summed_loss(nullptr);
}

double Executor::forward_only(int64_t* counted) {
  run_range(0, spec_.first_optimizer_node(), true, false);
  return summed_loss(counted);
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
  if (sync_) sync_->finish_gradients();
  r.grad_norm = (sync_ ? std::sqrt(sync_->grad_sq_norm()) : ops::global_norm(grads_)) / step.grad_divisor;
  r.clip_scale = ops::clip_scale(r.grad_norm, step.clip_threshold);
  step_ = step;
  grad_scale_ = r.clip_scale / step.grad_divisor;
  const auto& nodes = spec_.graph().nodes();
  for (size_t i = static_cast<size_t>(spec_.first_optimizer_node()); i < nodes.size(); ++i) run(nodes[i]);
  if (sync_) sync_->after_optimizer();
  return r;
}

}  // namespace tessera::graph
