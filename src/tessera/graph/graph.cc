#include "tessera/graph/graph.h"

#include "tessera/core/error.h"

namespace tessera::graph {

const char* op_name(OpKind op) {
  switch (op) {
    case OpKind::kEmbedding: return "embedding";
    case OpKind::kEmbeddingBwd: return "embedding_bwd";
    case OpKind::kRmsNorm: return "rms_norm";
    case OpKind::kRmsNormBwd: return "rms_norm_bwd";
    case OpKind::kMatmul: return "matmul";
    case OpKind::kRope: return "rope";
    case OpKind::kRopeBwd: return "rope_bwd";
    case OpKind::kAttention: return "attention";
    case OpKind::kAttentionBwd: return "attention_bwd";
    case OpKind::kGlu: return "glu";
    case OpKind::kGluBwd: return "glu_bwd";
    case OpKind::kAdd: return "add";
    case OpKind::kCrossEntropy: return "cross_entropy";
    case OpKind::kCrossEntropyBwd: return "cross_entropy_bwd";
    case OpKind::kAdamW: return "adamw";
    case OpKind::kSgd: return "sgd";
  }
  return "?";
}

ValueId Graph::add_value(Value v) {
  values_.push_back(std::move(v));
  return static_cast<ValueId>(values_.size() - 1);
}

ValueId Graph::param(const std::string& name, Shape shape, std::vector<std::string> logical_axes,
                     bool weight_decay) {
  TESSERA_ASSERT(static_cast<int>(logical_axes.size()) == shape.rank());
  Value v{.name = name, .shape = shape, .dtype = DType::kF32, .kind = ValueKind::kParam};
  v.logical_axes = std::move(logical_axes);
  v.weight_decay = weight_decay;
  ValueId id = add_value(v);
  Value g{.name = name + ".grad", .shape = shape, .dtype = DType::kF32, .kind = ValueKind::kGrad};
  g.master = id;
  ValueId gid = add_value(g);
  values_[id].grad = gid;
  return id;
}

ValueId Graph::input(const std::string& name, Shape shape, DType dtype) {
  return add_value(Value{.name = name, .shape = shape, .dtype = dtype, .kind = ValueKind::kInput});
}

ValueId Graph::activation(const std::string& name, Shape shape, DType dtype) {
  return add_value(Value{.name = name, .shape = shape, .dtype = dtype, .kind = ValueKind::kActivation,
                         .layer = layer_});
}

ValueId Graph::compute_view(ValueId param, DType compute_dtype) {
  Value& p = values_[param];
  TESSERA_ASSERT(p.kind == ValueKind::kParam);
  if (compute_dtype == DType::kF32) return param;
  if (p.compute_copy != kNoValue) return p.compute_copy;
  Value c{.name = p.name + ".compute", .shape = p.shape, .dtype = compute_dtype,
          .kind = ValueKind::kParamCompute};
  c.master = param;
  ValueId id = add_value(c);
  values_[param].compute_copy = id;
  return id;
}

int Graph::add_node(Node n) {
  int idx = static_cast<int>(nodes_.size());
  for (ValueId o : n.out)
    if (values_[o].kind == ValueKind::kActivation && values_[o].producer < 0) values_[o].producer = idx;
  nodes_.push_back(std::move(n));
  return idx;
}

namespace {
Node make(OpKind op, std::vector<ValueId> in, std::vector<ValueId> out, std::string name, Phase phase,
          int layer, std::string ckpt = "") {
  Node n{.op = op, .in = std::move(in), .out = std::move(out)};
  n.name = std::move(name);
  n.ckpt_name = std::move(ckpt);
  n.phase = phase;
  n.layer = layer;
  return n;
}
}  // namespace

ValueId Graph::embedding(ValueId table, ValueId ids, DType out_dtype, const std::string& name) {
  const Shape& ts = values_[table].shape;
  ValueId y = activation(name, Shape{values_[ids].shape.numel(), ts[1]}, out_dtype);
  add_node(make(OpKind::kEmbedding, {table, ids}, {y}, name, phase_, layer_));
  return y;
}

ValueId Graph::rms_norm(ValueId x, ValueId gamma, float eps, const std::string& name) {
  const Value& xv = values_[x];
  ValueId y = activation(name, xv.shape, xv.dtype);
  ValueId rstd = activation(name + ".rstd", Shape{xv.shape[0]}, DType::kF32);
  Node n = make(OpKind::kRmsNorm, {x, gamma}, {y, rstd}, name, phase_, layer_);
  n.attrs.eps = eps;
  add_node(n);
  return y;
}

ValueId Graph::matmul(ValueId a, ValueId b, const std::string& name, const std::string& ckpt, bool trans_b) {
  const Value& av = values_[a];
  const Value& bv = values_[b];
  int64_t k = bv.shape[trans_b ? 1 : 0];
  TESSERA_CHECK_SHAPE(av.shape[1] == k, "{}: inner dimensions differ, {} vs {}", name, av.shape.str(),
                      bv.shape.str());
  ValueId c = activation(name, Shape{av.shape[0], bv.shape[trans_b ? 0 : 1]}, av.dtype);
  Node n = make(OpKind::kMatmul, {a, b}, {c}, name, phase_, layer_, ckpt);
  n.attrs.trans_b = trans_b;
  add_node(n);
  return c;
}

ValueId Graph::rope(ValueId x, ValueId positions, int batch, int seq, int heads, int head_dim,
                    const std::string& name) {
  const Value& xv = values_[x];
  ValueId y = activation(name, xv.shape, xv.dtype);
  Node n = make(OpKind::kRope, {x, positions}, {y}, name, phase_, layer_);
  n.attrs.batch = batch;
  n.attrs.seq = seq;
  n.attrs.heads = heads;
  n.attrs.head_dim = head_dim;
  add_node(n);
  return y;
}

ValueId Graph::attention(ValueId q, ValueId k, ValueId v, ValueId segment_ids, const NodeAttrs& shape,
                         const std::string& name) {
  const Value& qv = values_[q];
  ValueId o = activation(name, qv.shape, qv.dtype);
  ValueId lse = activation(name + ".lse", Shape{shape.batch, shape.heads, shape.seq}, DType::kF32);
  std::vector<ValueId> in = {q, k, v};
  if (segment_ids != kNoValue) in.push_back(segment_ids);
  Node n = make(OpKind::kAttention, in, {o, lse}, name, phase_, layer_, "context");
  n.attrs = shape;
  add_node(n);
  return o;
}

ValueId Graph::glu(int act, ValueId gate, ValueId up, const std::string& name, const std::string& ckpt) {
  const Value& gv = values_[gate];
  ValueId y = activation(name, gv.shape, gv.dtype);
  Node n = make(OpKind::kGlu, {gate, up}, {y}, name, phase_, layer_, ckpt);
  n.attrs.activation = act;
  add_node(n);
  return y;
}

ValueId Graph::add(ValueId a, ValueId b, const std::string& name) {
  const Value& av = values_[a];
  TESSERA_CHECK_SHAPE(av.shape == values_[b].shape && av.dtype == values_[b].dtype,
                      "{}: add of {} and {}", name, av.shape.str(), values_[b].shape.str());
  ValueId y = activation(name, av.shape, av.dtype);
  add_node(make(OpKind::kAdd, {a, b}, {y}, name, phase_, layer_));
  return y;
}

ValueId Graph::cross_entropy(ValueId logits, ValueId targets, float z_loss, const std::string& name) {
  int64_t n_tok = values_[logits].shape[0];
  ValueId loss = activation(name, Shape{n_tok}, DType::kF32);
  ValueId lse = activation(name + ".lse", Shape{n_tok}, DType::kF32);
  Node n = make(OpKind::kCrossEntropy, {logits, targets}, {loss, lse}, name, phase_, layer_);
  n.attrs.z_loss = z_loss;
  add_node(n);
  return loss;
}

std::vector<ValueId> Graph::params() const {
  std::vector<ValueId> out;
  for (size_t i = 0; i < values_.size(); ++i)
    if (values_[i].kind == ValueKind::kParam) out.push_back(static_cast<ValueId>(i));
  return out;
}

}  // namespace tessera::graph
