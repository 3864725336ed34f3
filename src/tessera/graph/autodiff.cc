#include "tessera/graph/autodiff.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <functional>
#include <set>

#include "tessera/core/error.h"

namespace tessera::graph {

namespace {

// Gradient bookkeeping during the reverse walk: each activation collects its contributions.
struct GradState {
  std::map<ValueId, std::vector<ValueId>> parts;
  std::vector<bool> requires_grad;
};

bool is_param_like(const Value& v) { return v.kind == ValueKind::kParam || v.kind == ValueKind::kParamCompute; }

ValueId param_grad(const Graph& g, ValueId v) {
  const Value& val = g.value(v);
  ValueId master = val.kind == ValueKind::kParamCompute ? val.master : v;
  return g.value(master).grad;
}

Node bwd_node(OpKind op, std::vector<ValueId> in, std::vector<ValueId> out, const Node& fwd,
              const std::string& suffix) {
  Node n{.op = op, .in = std::move(in), .out = std::move(out)};
  n.attrs = fwd.attrs;
  n.name = fwd.name + suffix;
  n.phase = Phase::kBackward;
  n.layer = fwd.layer;
  return n;
}

// A new activation gradient for `of`, placed in the layer of the node that produces it.
ValueId grad_value(Graph& g, ValueId of, int layer) {
  const Value& v = g.value(of);
  const TensorShard tp = v.tp;
  ValueId id = g.activation("d." + v.name, v.shape, v.dtype);
  g.value(id).layer = layer;
  g.value(id).tp = tp;
  return id;
}

// Sums the contributions to `v`'s gradient into one value (add nodes in the backward phase).
ValueId total_grad(Graph& g, GradState& st, ValueId v, int layer) {
  auto it = st.parts.find(v);
  if (it == st.parts.end() || it->second.empty()) return kNoValue;
  std::vector<ValueId>& parts = it->second;
  ValueId sum = parts[0];
  for (size_t i = 1; i < parts.size(); ++i) {
    ValueId s = grad_value(g, v, layer);
    Node n{.op = OpKind::kAdd, .in = {sum, parts[i]}, .out = {s}};
    n.name = "d." + g.value(v).name + ".sum";
    n.phase = Phase::kBackward;
    n.layer = layer;
    g.add_node(n);
    sum = s;
  }
  parts = {sum};
  return sum;
}

void contribute(GradState& st, const Graph& g, ValueId v, ValueId grad) {
  if (g.value(v).kind == ValueKind::kActivation && st.requires_grad[v]) st.parts[v].push_back(grad);
}

bool needs(const GradState& st, const Graph& g, ValueId v) {
  return g.value(v).kind == ValueKind::kActivation && st.requires_grad[v];
}

// The backward rule of one forward node, given the gradient of its main output.
void backward_rule(Graph& g, GradState& st, const Node& f, ValueId dy) {
  const int L = f.layer;
  switch (f.op) {
    case OpKind::kCrossEntropy: {
      // dlogits = dloss * (softmax - onehot), written over the logits (they are dead afterwards).
      ValueId logits = f.in[0];
      ValueId dlogits = grad_value(g, logits, L);
      g.value(dlogits).alias_of = logits;
      g.add_node(bwd_node(OpKind::kCrossEntropyBwd, {logits, f.in[1], f.out[1], dy}, {dlogits}, f, ".bwd"));
      contribute(st, g, logits, dlogits);
      break;
    }
    case OpKind::kMatmul: {
      ValueId a = f.in[0], b = f.in[1];
      const bool tb = f.attrs.trans_b;
      if (needs(st, g, a)) {  // c = a·op(b)  =>  da = dc·op(b)ᵀ
        ValueId da = grad_value(g, a, L);
        Node n = bwd_node(OpKind::kMatmul, {dy, b}, {da}, f, ".dx");
        n.attrs = NodeAttrs{};
        n.attrs.trans_b = !tb;
        g.add_node(n);
        contribute(st, g, a, da);
      }
      if (is_param_like(g.value(b))) {  // db += aᵀ·dc, or for op(b) = bᵀ: db += dcᵀ·a
        Node n = bwd_node(OpKind::kMatmul, tb ? std::vector{dy, a} : std::vector{a, dy},
                          {param_grad(g, b)}, f, ".dw");
        n.attrs = NodeAttrs{};
        n.attrs.trans_a = true;
        n.attrs.accumulate = true;
        g.add_node(n);
      } else {
        TESSERA_ASSERT(!needs(st, g, b));  // activation x activation products go through attention
      }
      break;
    }
    case OpKind::kEmbedding:
      g.add_node(bwd_node(OpKind::kEmbeddingBwd, {dy, f.in[1]}, {param_grad(g, f.in[0])}, f, ".bwd"));
      break;
    case OpKind::kRmsNorm: {
      ValueId x = f.in[0];
      ValueId dx = needs(st, g, x) ? grad_value(g, x, L) : kNoValue;
      TESSERA_ASSERT(dx != kNoValue);
      g.add_node(bwd_node(OpKind::kRmsNormBwd, {dy, x, f.in[1], f.out[1]}, {dx, param_grad(g, f.in[1])}, f,
                          ".bwd"));
      contribute(st, g, x, dx);
      break;
    }
    case OpKind::kRope: {
      ValueId dx = grad_value(g, f.in[0], L);
      g.add_node(bwd_node(OpKind::kRopeBwd, {dy, f.in[1]}, {dx}, f, ".bwd"));
      contribute(st, g, f.in[0], dx);
      break;
    }
    case OpKind::kAttention: {
      ValueId dq = grad_value(g, f.in[0], L), dk = grad_value(g, f.in[1], L), dv = grad_value(g, f.in[2], L);
      std::vector<ValueId> in = {dy, f.in[0], f.in[1], f.in[2], f.out[0], f.out[1]};
      if (f.in.size() > 3) in.push_back(f.in[3]);
      g.add_node(bwd_node(OpKind::kAttentionBwd, in, {dq, dk, dv}, f, ".bwd"));
      contribute(st, g, f.in[0], dq);
      contribute(st, g, f.in[1], dk);
      contribute(st, g, f.in[2], dv);
      break;
    }
    case OpKind::kGlu: {
      ValueId dgate = grad_value(g, f.in[0], L), dup = grad_value(g, f.in[1], L);
      g.add_node(bwd_node(OpKind::kGluBwd, {dy, f.in[0], f.in[1]}, {dgate, dup}, f, ".bwd"));
      contribute(st, g, f.in[0], dgate);
      contribute(st, g, f.in[1], dup);
      break;
    }
    case OpKind::kAdd:
      contribute(st, g, f.in[0], dy);
      contribute(st, g, f.in[1], dy);
      break;
    // Tensor parallelism (graph.h). f's readers are column-parallel matmuls: each rank's dx is the
    // part of the input gradient from its own columns, and their sum over the tensor axis is the
    // whole gradient (into a new value: dy may be shared with another reader, e.g. an add's).
    case OpKind::kTpCopy: {
      ValueId x = f.in[0];
      if (!needs(st, g, x)) break;
      ValueId dx = grad_value(g, x, L);
      std::vector<ValueId> out = {dx};
      if (g.value(x).dtype != DType::kF32) {  // reductions run in f32 (see Graph::tp_all_reduce)
        ValueId scratch = g.activation("d." + g.value(x).name + ".f32", g.value(x).shape, DType::kF32);
        g.value(scratch).layer = L;
        out.push_back(scratch);
      }
      g.add_node(bwd_node(OpKind::kTpAllReduce, {dy}, out, f, ".bwd"));
      contribute(st, g, x, dx);
      break;
    }
    case OpKind::kTpAllReduce:  // g: y = sum of the ranks' x, so each rank's dx is dy itself
      contribute(st, g, f.in[0], dy);
      break;
    case OpKind::kVocabEmbedding:  // dy is whole on every rank: each adds its own rows, no collective
      g.add_node(bwd_node(OpKind::kVocabEmbeddingBwd, {dy, f.in[1]}, {param_grad(g, f.in[0])}, f, ".bwd"));
      break;
    case OpKind::kVocabCrossEntropy: {  // local softmax - onehot from the global lse, over the logits
      ValueId logits = f.in[0];
      ValueId dlogits = grad_value(g, logits, L);
      g.value(dlogits).alias_of = logits;
      g.add_node(
          bwd_node(OpKind::kVocabCrossEntropyBwd, {logits, f.in[1], f.out[1], dy}, {dlogits}, f, ".bwd"));
      contribute(st, g, logits, dlogits);
      break;
    }
    default:
      fail(ErrorKind::kInternal, "autodiff: no backward rule for {}", op_name(f.op));
  }
}

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

// The cross-entropy rules write dlogits over the logits, which is right only when no later node
// reads the logits' buffer. Attention's backward reads its own output, so when the logits are an
// attention output (or anything a later backward reads) dlogits gets a buffer of its own.
void unalias_logits_read_later(Graph& g) {
  const std::vector<Node>& nodes = g.nodes();
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].op != OpKind::kCrossEntropyBwd && nodes[i].op != OpKind::kVocabCrossEntropyBwd) continue;
    const ValueId logits = nodes[i].in[0], dlogits = nodes[i].out[0];
    if (g.value(dlogits).alias_of != logits) continue;
    const ValueId root = buffer_root(g, logits);
    bool read_later = false;
    for (size_t j = i + 1; j < nodes.size() && !read_later; ++j)
      for (ValueId v : nodes[j].in)
        if (!aliases(g, v, dlogits) && buffer_root(g, v) == root) read_later = true;
    if (read_later) g.value(dlogits).alias_of = kNoValue;
  }
}

}  // namespace

ValueId append_backward(Graph& g) {
  TESSERA_CHECK(g.loss() != kNoValue, ErrorKind::kInternal, "autodiff: the graph has no loss");
  const int fwd_count = static_cast<int>(g.nodes().size());
  GradState st;
  st.requires_grad.assign(g.values().size(), false);
  for (int i = 0; i < fwd_count; ++i) {
    const Node& n = g.nodes()[i];
    bool any = std::any_of(n.in.begin(), n.in.end(), [&](ValueId v) {
      return is_param_like(g.value(v)) || (v < static_cast<int>(st.requires_grad.size()) && st.requires_grad[v]);
    });
    for (ValueId o : n.out) st.requires_grad[o] = any;
  }
  const Value& loss = g.value(g.loss());
  ValueId dloss = g.input("dloss", loss.shape, DType::kF32);
  st.requires_grad.resize(g.values().size(), false);
  st.parts[g.loss()].push_back(dloss);
  g.set_phase(Phase::kBackward);
  for (int i = fwd_count - 1; i >= 0; --i) {
    Node f = g.nodes()[i];  // copy: add_node may reallocate the vector
    if (f.phase != Phase::kForward) continue;
    st.requires_grad.resize(g.values().size(), false);
    ValueId dy = total_grad(g, st, f.out[0], f.layer);
    if (dy == kNoValue) continue;
    backward_rule(g, st, f, dy);
  }
  unalias_logits_read_later(g);
  return dloss;
}

const std::vector<std::string>& remat_policy_names() {
  static const std::vector<std::string> names = {
      "none", "minimal", "minimal_with_context", "save_dot_with_context_except_mlp", "save_dot_except_mlpwi",
      "save_dot_except_mlp", "save_qkv_proj", "save_out_proj", "full"};
  return names;
}

namespace {

std::set<std::string> saved_names(const std::string& policy) {
  const std::set<std::string> qkv = {"query_proj", "key_proj", "value_proj", "qkv_proj"};
  auto with = [&](std::set<std::string> base, std::initializer_list<const char*> more) {
    for (const char* m : more) base.insert(m);
    return base;
  };
  if (policy == "minimal") return with(qkv, {"out_proj", "mlpwi_0", "mlpwi_1", "mlpwo"});
  if (policy == "minimal_with_context") return with(qkv, {"out_proj", "mlpwi_0", "mlpwi_1", "mlpwo", "context"});
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
  g.nodes() = std::move(out);
  // Producers now index the rewritten list.
  for (size_t i = 0; i < g.values().size(); ++i) g.value(static_cast<ValueId>(i)).producer = -1;
  for (size_t i = 0; i < g.nodes().size(); ++i)
    for (ValueId o : g.nodes()[i].out) {
      Value& val = g.value(o);
      if (val.kind == ValueKind::kActivation && val.producer < 0) val.producer = static_cast<int>(i);
    }
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
