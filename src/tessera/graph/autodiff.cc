#include "tessera/graph/autodiff.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "tessera/core/error.h"
#include "tessera/graph/op_table.h"

namespace tessera::graph {

GradBuilder::GradBuilder(Graph& g) : g_(g) {}

bool GradBuilder::is_param(ValueId v) const {
  const ValueKind k = g_.value(v).kind;
  return k == ValueKind::kParam || k == ValueKind::kParamCompute;
}

ValueId GradBuilder::param_grad(ValueId v) const {
  const Value& val = g_.value(v);
  ValueId master = val.kind == ValueKind::kParamCompute ? val.master : v;
  return g_.value(master).grad;
}

bool GradBuilder::needs(ValueId v) const {
  return g_.value(v).kind == ValueKind::kActivation && static_cast<size_t>(v) < requires_grad_.size() &&
         requires_grad_[v];
}

// A new activation gradient for `of`, placed in the layer of the node that produces it.
ValueId GradBuilder::grad_value(ValueId of) {
  const Value& v = g_.value(of);
  const TensorShard tp = v.tp;
  ValueId id = g_.activation("d." + v.name, v.shape, v.dtype);
  g_.value(id).layer = fwd_ ? fwd_->layer : -1;
  g_.value(id).tp = tp;
  return id;
}

void GradBuilder::contribute(ValueId v, ValueId grad) {
  if (needs(v)) parts_[v].push_back(grad);
}

Node GradBuilder::node(OpKind op, std::vector<ValueId> in, std::vector<ValueId> out,
                       const std::string& suffix) const {
  TESSERA_ASSERT(fwd_ != nullptr);
  Node n{.op = op, .in = std::move(in), .out = std::move(out)};
  n.attrs = fwd_->attrs;
  n.name = fwd_->name + suffix;
  n.phase = Phase::kBackward;
  n.layer = fwd_->layer;
  return n;
}

// Sums the contributions to `v`'s gradient into one value (add nodes in the backward phase).
ValueId GradBuilder::total_grad(ValueId v, int layer) {
  auto it = parts_.find(v);
  if (it == parts_.end() || it->second.empty()) return kNoValue;
  std::vector<ValueId>& parts = it->second;
  ValueId sum = parts[0];
  for (size_t i = 1; i < parts.size(); ++i) {
    const Value& val = g_.value(v);
    ValueId s = g_.activation("d." + val.name, val.shape, val.dtype);
    g_.value(s).layer = layer;
    g_.value(s).tp = g_.value(v).tp;
    Node n{.op = OpKind::kAdd, .in = {sum, parts[i]}, .out = {s}};
    n.name = "d." + g_.value(v).name + ".sum";
    n.phase = Phase::kBackward;
    n.layer = layer;
    g_.add_node(n);
    sum = s;
  }
  parts = {sum};
  return sum;
}

namespace {

// Whether v's buffer chain (v, what it aliases, ...) passes through `target`.
bool aliases(const Graph& g, ValueId v, ValueId target) {
  for (; v != kNoValue; v = g.value(v).alias_of)
    if (v == target) return true;
  return false;
}

ValueId buffer_root(const Graph& g, ValueId v) {
  while (g.value(v).alias_of != kNoValue) v = g.value(v).alias_of;
  return v;
}

// A backward rule may write an output over one of its node's inputs (cross-entropy writes dlogits
// over the logits, which are dead afterwards), which is right only when no later node reads that
// buffer. Attention's backward reads its own output, so when the logits are an attention output (or
// anything a later backward reads) the output gets a buffer of its own.
void unalias_inputs_read_later(Graph& g) {
  const std::vector<Node>& nodes = g.nodes();
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].phase != Phase::kBackward) continue;
    for (ValueId out : nodes[i].out) {
      const ValueId over = g.value(out).alias_of;
      if (over == kNoValue || std::find(nodes[i].in.begin(), nodes[i].in.end(), over) == nodes[i].in.end())
        continue;
      const ValueId root = buffer_root(g, over);
      bool read_later = false;
      for (size_t j = i + 1; j < nodes.size() && !read_later; ++j)
        for (ValueId v : nodes[j].in)
          if (!aliases(g, v, out) && buffer_root(g, v) == root) read_later = true;
      if (read_later) g.value(out).alias_of = kNoValue;
    }
  }
}

// The loss's cross_entropy node and its backward as one forward node (kCrossEntropyGrad): the seed
// dloss is an input filled before the step, so the forward can write the gradient as it reads each
// row and compute every logit's exp once (the backward alone computes each a second time). Left as
// two nodes when a node between them reads the logits' buffer, which the gradient would have
// overwritten by then, or when anything but the backward reads lse.
void fuse_loss_gradient(Graph& g, ValueId dloss) {
  const std::vector<Node>& nodes = g.nodes();
  const int fi = g.value(g.loss()).producer;
  if (fi < 0 || nodes[fi].op != OpKind::kCrossEntropy) return;
  const ValueId logits = nodes[fi].in[0], lse = nodes[fi].out[1];
  int bi = -1;
  for (int i = fi + 1; i < static_cast<int>(nodes.size()); ++i) {
    const bool reads_lse = std::find(nodes[i].in.begin(), nodes[i].in.end(), lse) != nodes[i].in.end();
    if (!reads_lse) continue;
    if (bi >= 0 || nodes[i].op != OpKind::kCrossEntropyBwd) return;
    bi = i;
  }
  if (bi < 0 || nodes[bi].in[3] != dloss) return;
  const ValueId dlogits = nodes[bi].out[0];
  const ValueId root = buffer_root(g, logits);
  for (int j = fi + 1; j < bi; ++j)
    for (ValueId v : nodes[j].in)
      if (buffer_root(g, v) == root) return;
  std::vector<Node> fused = nodes;
  Node& f = fused[fi];
  f.op = OpKind::kCrossEntropyGrad;
  f.in.push_back(dloss);
  f.out.push_back(dlogits);
  fused.erase(fused.begin() + bi);
  g.set_nodes(std::move(fused));
}

}  // namespace

ValueId append_backward(Graph& g, ValueId* daux) {
  TESSERA_CHECK(g.loss() != kNoValue, ErrorKind::kInternal, "autodiff: the graph has no loss");
  const int fwd_count = static_cast<int>(g.nodes().size());
  GradBuilder b(g);
  b.requires_grad_.assign(g.values().size(), false);
  for (int i = 0; i < fwd_count; ++i) {
    const Node& n = g.nodes()[i];
    bool any = std::any_of(n.in.begin(), n.in.end(),
                           [&](ValueId v) { return b.is_param(v) || b.requires_grad_[v]; });
    for (ValueId o : n.out) b.requires_grad_[o] = any;
  }
  const Value& loss = g.value(g.loss());
  ValueId dloss = g.input("dloss", loss.shape, DType::kF32);
  b.requires_grad_.resize(g.values().size(), false);
  b.parts_[g.loss()].push_back(dloss);
  ValueId aux_seed = kNoValue;
  if (!g.aux_losses().empty()) {  // one seed for every aux loss: they are summed into the objective
    aux_seed = g.input("daux", Shape{1}, DType::kF32);
    for (ValueId a : g.aux_losses()) b.parts_[a].push_back(aux_seed);
  }
  if (daux) *daux = aux_seed;
  g.set_phase(Phase::kBackward);
  for (int i = fwd_count - 1; i >= 0; --i) {
    const Node f = g.nodes()[i];  // a copy: add_node may reallocate the vector
    if (f.phase != Phase::kForward) continue;
    b.requires_grad_.resize(g.values().size(), false);
    ValueId dy = b.total_grad(f.out[0], f.layer);
    if (dy == kNoValue) continue;
    const OpDef& def = op_def(f.op);
    TESSERA_CHECK(def.backward != nullptr, ErrorKind::kInternal, "autodiff: no backward rule for {}",
                  def.name);
    b.fwd_ = &f;
    def.backward(b, f, dy);
    b.fwd_ = nullptr;
  }
  unalias_inputs_read_later(g);
  fuse_loss_gradient(g, dloss);
  return dloss;
}

const std::vector<std::string>& remat_policy_names() {
  static const std::vector<std::string> names = {"none",
                                                 "minimal",
                                                 "minimal_with_context",
                                                 "save_dot_with_context_except_mlp",
                                                 "save_dot_except_mlpwi",
                                                 "save_dot_except_mlp",
                                                 "save_qkv_proj",
                                                 "save_out_proj",
                                                 "full"};
  return names;
}

namespace {

std::set<std::string> saved_names(const std::string& policy) {
  std::set<std::string> qkv = {"query_proj", "key_proj", "value_proj", "qkv_proj"};
  auto with = [&](std::set<std::string> base, std::initializer_list<const char*> more) {
    for (const char* m : more) base.insert(m);
    return base;
  };
  if (policy == "minimal") return with(qkv, {"out_proj", "mlpwi_0", "mlpwi_1", "mlpwo"});
  if (policy == "minimal_with_context")
    return with(qkv, {"out_proj", "mlpwi_0", "mlpwi_1", "mlpwo", "context"});
  if (policy == "save_dot_with_context_except_mlp") return with(qkv, {"out_proj", "context"});
  if (policy == "save_dot_except_mlpwi") return with(qkv, {"out_proj", "mlpwo"});
  if (policy == "save_dot_except_mlp") return with(qkv, {"out_proj"});
  if (policy == "save_qkv_proj") return qkv;
  if (policy == "save_out_proj") return {"out_proj"};
  if (policy == "full") return {};
  fail(ErrorKind::kConfig, "remat_policy '{}' is not supported; choose one of: {}", policy,
       fmt::join(remat_policy_names(), ", "));
}

}  // namespace

void apply_remat(Graph& g, const std::string& policy) {
  if (policy == "none") return;
  const std::set<std::string> keep = saved_names(policy);
  std::vector<Node> nodes = g.nodes();
  const size_t nv = g.values().size();

  // Forward consumers per value, to find values crossing a layer boundary.
  std::vector<bool> crosses(nv, false);
  for (const Node& n : nodes) {
    if (n.phase != Phase::kForward) continue;
    for (ValueId v : n.in) {
      const Value& val = g.value(v);
      if (val.kind == ValueKind::kActivation && val.producer >= 0 && nodes[val.producer].layer != n.layer)
        crosses[v] = true;
    }
  }
  auto saved = [&](ValueId v) {
    const Value& val = g.value(v);
    if (val.kind != ValueKind::kActivation || val.producer < 0) return true;
    const Node& p = nodes[val.producer];
    if (p.phase != Phase::kForward || p.layer < 0 || crosses[v]) return true;
    return !p.ckpt_name.empty() && keep.count(p.ckpt_name) > 0;
  };

  std::vector<Node> out;
  std::map<ValueId, ValueId> copy;  // forward value -> its recomputed copy (for the current layer)
  int current_layer = -2;
  // Recomputes value v (and, first, whatever unsaved values its producer reads).
  std::function<ValueId(ValueId)> recompute = [&](ValueId v) -> ValueId {
    if (saved(v)) return v;
    if (auto it = copy.find(v); it != copy.end()) return it->second;
    Node r = nodes[g.value(v).producer];
    for (ValueId& in : r.in) in = recompute(in);
    for (ValueId& o : r.out) {
      const Value src = g.value(o);
      ValueId c = g.activation(src.name + ".remat", src.shape, src.dtype);
      g.value(c).layer = src.layer;
      copy[o] = c;
      o = c;
    }
    r.phase = Phase::kRecompute;
    r.name += ".remat";
    out.push_back(r);
    return copy.at(v);
  };

  for (Node n : nodes) {
    if (n.phase == Phase::kBackward) {
      if (n.layer != current_layer) {
        copy.clear();
        current_layer = n.layer;
      }
      for (ValueId& in : n.in) in = recompute(in);
    }
    out.push_back(std::move(n));
  }
  g.set_nodes(std::move(out));
}

void append_optimizer(Graph& g, OptimizerKind kind) {
  for (ValueId p : g.params()) {
    const Value pv = g.value(p);
    Node n{.op = kind == OptimizerKind::kAdamW ? OpKind::kAdamW : OpKind::kSgd, .in = {p, pv.grad}};
    if (kind == OptimizerKind::kAdamW) {
      for (const char* m : {".adam_m", ".adam_v"}) {
        ValueId s = g.input(pv.name + m, pv.shape, DType::kF32);
        g.value(s).kind = ValueKind::kOptState;
        g.value(s).master = p;
        g.value(s).tp = pv.tp;
        n.in.push_back(s);
      }
    }
    if (pv.compute_copy != kNoValue) n.out.push_back(pv.compute_copy);
    n.name = pv.name + (kind == OptimizerKind::kAdamW ? ".adamw" : ".sgd");
    n.phase = Phase::kOptimizer;
    g.add_node(n);
  }
}

}  // namespace tessera::graph
