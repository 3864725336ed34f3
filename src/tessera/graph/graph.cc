#include "tessera/graph/graph.h"

#include <fmt/format.h>

#include "tessera/core/error.h"
#include "tessera/graph/op_table.h"

namespace tessera::graph {

void fail_attr_type(const Node& n) {
  fail(ErrorKind::kInternal, "{}: node of op {} carries another family's attributes (index {})", n.name,
       op_name(n.op), n.attrs.index());
}

int64_t TensorParallel::ways(const std::string& logical) const {
  if (size <= 1) return 1;
  for (const std::string& a : axes)
    if (a == logical) return size;
  return 1;
}

Shape global_shape(const Value& v) {
  Shape s = v.shape;
  if (v.tp.split()) s[v.tp.dim] = v.tp.global;
  if (v.ep.split()) s[v.ep.dim] = v.ep.global;
  return s;
}

std::string describe_tensor_shard(const Value& v) {
  if (!v.tp.split()) return "";
  const std::string axis =
      v.tp.dim < static_cast<int>(v.logical_axes.size()) ? " (" + v.logical_axes[v.tp.dim] + ")" : "";
  return fmt::format("tensor slice [{}:{}] of dim {}{} of {}", v.tp.offset, v.tp.offset + v.shape[v.tp.dim],
                     v.tp.dim, axis, global_shape(v).str());
}

void Graph::set_tensor_parallel(TensorParallel tp) {
  TESSERA_CHECK(tp.size >= 1 && tp.rank >= 0 && tp.rank < tp.size, ErrorKind::kInternal,
                "tensor parallelism: rank {} of {}", tp.rank, tp.size);
  TESSERA_CHECK(params().empty(), ErrorKind::kInternal, "set_tensor_parallel after the first parameter");
  tp_ = std::move(tp);
}

ValueId Graph::add_value(Value v) {
  values_.push_back(std::move(v));
  return static_cast<ValueId>(values_.size() - 1);
}

// `shape` is the global shape; sharding.h's pass keeps this rank's shard when the graph is split
// over a tensor axis.
ValueId Graph::param(const std::string& name, Shape shape, std::vector<std::string> logical_axes,
                     bool weight_decay) {
  TESSERA_ASSERT(static_cast<int>(logical_axes.size()) == shape.rank());
  TESSERA_CHECK(!sharded_, ErrorKind::kInternal, "parameter {} added after the graph was sharded", name);
  Value v{.name = name, .shape = shape, .dtype = DType::kF32, .kind = ValueKind::kParam};
  v.logical_axes = std::move(logical_axes);
  v.weight_decay = weight_decay;
  ValueId id = add_value(v);
  if (inference_) return id;
  Value g{.name = name + ".grad", .shape = shape, .dtype = DType::kF32, .kind = ValueKind::kGrad};
  g.master = id;
  ValueId gid = add_value(g);
  values_[id].grad = gid;
  return id;
}

ValueId Graph::input(const std::string& name, Shape shape, DType dtype) {
  return add_value(Value{.name = name, .shape = shape, .dtype = dtype, .kind = ValueKind::kInput});
}

void Graph::set_inference() {
  TESSERA_ASSERT(values_.empty());
  inference_ = true;
}

ValueId Graph::cache(const std::string& name, Shape shape, DType dtype) {
  TESSERA_ASSERT(inference_);
  return add_value(Value{.name = name, .shape = shape, .dtype = dtype, .kind = ValueKind::kCache});
}

ValueId Graph::activation(const std::string& name, Shape shape, DType dtype) {
  return add_value(
      Value{.name = name, .shape = shape, .dtype = dtype, .kind = ValueKind::kActivation, .layer = layer_});
}

ValueId Graph::compute_view(ValueId param, DType compute_dtype) {
  Value& p = values_[param];
  TESSERA_ASSERT(p.kind == ValueKind::kParam);
  if (compute_dtype == DType::kF32) return param;
  if (p.compute_copy != kNoValue) return p.compute_copy;
  Value c{.name = p.name + ".compute",
          .shape = p.shape,
          .dtype = compute_dtype,
          .kind = ValueKind::kParamCompute};
  c.master = param;
  c.tp = p.tp;
  c.ep = p.ep;
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

void Graph::set_nodes(std::vector<Node> nodes) {
  for (Value& v : values_) v.producer = -1;
  nodes_.clear();
  for (Node& n : nodes) add_node(std::move(n));
}

ValueId Graph::add_op(OpKind op, std::vector<ValueId> in, NodeAttrs attrs, const std::string& name,
                      const std::string& ckpt) {
  const OpDef& def = op_def(op);
  TESSERA_ASSERT(def.infer != nullptr);
  Node n{.op = op, .in = std::move(in), .attrs = attrs};
  n.name = name;
  n.ckpt_name = ckpt;
  n.phase = phase_;
  n.layer = layer_;
  for (const OutputSpec& o : def.infer(*this, n))
    n.out.push_back(activation(name + o.suffix, o.shape, o.dtype));
  const ValueId y = n.out[0];
  add_node(std::move(n));
  return y;
}

ValueId Graph::embedding(ValueId table, ValueId ids, DType out_dtype, const std::string& name) {
  return add_op(OpKind::kEmbedding, {table, ids}, EmbeddingAttrs{.dtype = out_dtype}, name);
}

ValueId Graph::rms_norm(ValueId x, ValueId gamma, float eps, const std::string& name, int64_t group,
                        float offset) {
  return add_op(OpKind::kRmsNorm, {x, gamma}, NormAttrs{.eps = eps, .group = group, .offset = offset}, name);
}

ValueId Graph::matmul(ValueId a, ValueId b, const std::string& name, const std::string& ckpt, bool trans_b) {
  return add_op(OpKind::kMatmul, {a, b}, MatmulAttrs{.trans_b = trans_b}, name, ckpt);
}

ValueId Graph::rope(ValueId x, ValueId positions, int batch, int seq, int heads, int head_dim,
                    const std::string& name, bool local) {
  return add_op(OpKind::kRope, {x, positions},
                RopeAttrs{.batch = batch, .seq = seq, .heads = heads, .head_dim = head_dim, .local = local},
                name);
}

ValueId Graph::attention(ValueId q, ValueId k, ValueId v, ValueId segment_ids, const AttentionAttrs& shape,
                         const std::string& name, ValueId sinks) {
  std::vector<ValueId> in = {q, k, v};
  if (segment_ids != kNoValue) in.push_back(segment_ids);
  AttentionAttrs a = shape;
  a.sinks = sinks != kNoValue;
  if (a.sinks) in.push_back(sinks);
  return add_op(OpKind::kAttention, std::move(in), a, name, "context");
}

ValueId Graph::cached_attention(ValueId q, ValueId k, ValueId v, ValueId k_cache, ValueId v_cache,
                                ValueId positions, ValueId slots, const AttentionAttrs& shape,
                                const std::string& name, ValueId sinks) {
  TESSERA_ASSERT(inference_);
  std::vector<ValueId> in = {q, k, v, k_cache, v_cache, positions, slots};
  AttentionAttrs a = shape;
  a.sinks = sinks != kNoValue;
  if (a.sinks) in.push_back(sinks);
  return add_op(OpKind::kCachedAttention, std::move(in), a, name, "context");
}

ValueId Graph::glu(int act, ValueId gate, ValueId up, const std::string& name, const std::string& ckpt,
                   float limit, float up_offset) {
  return add_op(OpKind::kGlu, {gate, up},
                ActivationAttrs{.activation = act, .limit = limit, .up_offset = up_offset}, name, ckpt);
}

ValueId Graph::activation(int act, ValueId x, const std::string& name, const std::string& ckpt) {
  return add_op(OpKind::kActivation, {x}, ActivationAttrs{.activation = act}, name, ckpt);
}

ValueId Graph::scale(ValueId x, float a, const std::string& name) {
  return add_op(OpKind::kScale, {x}, ScalarAttrs{.value = a}, name);
}

ValueId Graph::soft_cap(ValueId x, float cap, const std::string& name) {
  TESSERA_CHECK(cap > 0, ErrorKind::kInternal, "{}: soft cap {} must be > 0", name, cap);
  return add_op(OpKind::kSoftCap, {x}, ScalarAttrs{.value = cap}, name);
}

ValueId Graph::layer_norm(ValueId x, ValueId gamma, ValueId beta, float eps, const std::string& name) {
  return add_op(OpKind::kLayerNorm, {x, gamma, beta}, NormAttrs{.eps = eps}, name);
}

ValueId Graph::bias_add(ValueId x, ValueId bias, const std::string& name) {
  return add_op(OpKind::kBiasAdd, {x, bias}, std::monostate{}, name);
}

ValueId Graph::add(ValueId a, ValueId b, const std::string& name) {
  return add_op(OpKind::kAdd, {a, b}, std::monostate{}, name);
}

ValueId Graph::cross_entropy(ValueId logits, ValueId targets, float z_loss, const std::string& name) {
  return add_op(OpKind::kCrossEntropy, {logits, targets}, CrossEntropyAttrs{.z_loss = z_loss}, name);
}

Graph::MoeRouting Graph::moe_route(ValueId logits, const MoeAttrs& a, const std::string& name) {
  const ValueId w = add_op(OpKind::kMoeRoute, {logits}, a, name);
  return {w, nodes_.back().out[1]};
}

ValueId Graph::moe_load_balance(ValueId logits, ValueId experts, const MoeAttrs& a, const std::string& name) {
  const ValueId loss = add_op(OpKind::kMoeLoadBalance, {logits, experts}, a, name);
  add_aux_loss(loss);
  return loss;
}

Graph::MoeRows Graph::moe_dispatch(ValueId x, ValueId experts, const MoeAttrs& a, const std::string& name) {
  const ValueId xs = add_op(OpKind::kMoeDispatch, {x, experts}, a, name);
  return {xs, nodes_.back().out[1], nodes_.back().out[2]};
}

ValueId Graph::grouped_matmul(ValueId xs, ValueId w, ValueId group_sizes, int64_t useful_rows,
                              const std::string& name, const std::string& ckpt) {
  return add_op(OpKind::kGroupedMatmul, {xs, w, group_sizes}, GroupedMatmulAttrs{.useful_rows = useful_rows},
                name, ckpt);
}

ValueId Graph::moe_combine(ValueId ys, ValueId weights, ValueId rows, const MoeAttrs& a,
                           const std::string& name) {
  return add_op(OpKind::kMoeCombine, {ys, weights, rows}, a, name);
}

ValueId Graph::grouped_bias_add(ValueId xs, ValueId bias, ValueId group_sizes, const std::string& name) {
  return add_op(OpKind::kGroupedBiasAdd, {xs, bias, group_sizes}, std::monostate{}, name);
}

std::vector<ValueId> Graph::params() const {
  std::vector<ValueId> out;
  for (size_t i = 0; i < values_.size(); ++i)
    if (values_[i].kind == ValueKind::kParam) out.push_back(static_cast<ValueId>(i));
  return out;
}

}  // namespace tessera::graph
