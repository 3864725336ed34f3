// The step graph: values (tensors described by shape, dtype and role) and nodes (coarse ops over
// them), in execution order. Model code builds the forward part through Graph's op methods;
// autodiff.h appends the backward part and the recomputation (apply_remat), and the optimizer nodes close
// the step. plan.h turns the finished graph into a Plan with every value placed in an arena.
//
// Shapes (STYLE.md 4): N = B*T tokens, E embedding, H query heads, K kv heads, D head dim,
// F mlp dim, V vocabulary. Activations are [N, C] row-major; attention views them as [B, T, H, D].
//
// Tensor parallelism (Megatron-LM) is a property of the graph, not of the model code: with
// set_tensor_parallel(), param() keeps the shard of this rank along the one dimension whose
// logical axis the tensor mesh axis splits (heads, kv_heads, mlp, vocab: whatever
// logical_axis_rules say), and records where it sits (Value::tp). The op methods then follow the
// shards through [N, C] activations and insert the collectives themselves:
//   matmul, x whole, W split on its output dim   column-parallel: x goes through f (tp_copy: the
//                                                 identity forward, all-reduce of dx backward), the
//                                                 output is split on C
//   matmul, x split on C, W split on its input   row-parallel: partial sums, then g (tp_all_reduce:
//                                                 all-reduce forward, identity backward)
//   embedding of a table split by rows           vocab-parallel lookup (zeros outside the shard), g
//   cross_entropy of logits split on V           vocab-parallel loss (two small all-reduces of [N])
// Elementwise ops, rope and attention keep the split of their inputs; norms need whole inputs.
// Per decoder layer that is Megatron's 2 all-reduces of [N, E] forward and 2 backward.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera::graph {

using ValueId = int;
constexpr ValueId kNoValue = -1;

enum class ValueKind {
  kParam,         // f32 master weight: persistent, updated by the optimizer
  kParamCompute,  // a lower-precision copy of a kParam used by matmuls (bf16 training)
  kGrad,          // f32 gradient of a kParam: persistent, accumulated, zeroed each step
  kOptState,      // optimizer moments: persistent
  kInput,         // a batch input (tokens, targets, positions, segment ids): filled each step
  kActivation,    // anything else: placed in the activation arena by the memory plan
};

// Where a tensor-parallel shard sits in its global tensor: dimension `dim` holds the global indices
// [offset, offset + shape[dim]) of a dimension of `global` elements. dim = -1: the value is whole
// (replicated over the tensor axis). Parameters carry it, and so do their gradient, compute copy
// and optimizer moments (checkpoints and init map shards to the global tensor with it), and the
// activations the op methods derive from them (dim 1 of an [N, C] activation).
struct TensorShard {
  int dim = -1;
  int64_t offset = 0;
  int64_t global = 0;
  bool split() const { return dim >= 0; }
  bool operator==(const TensorShard&) const = default;
};

// The tensor mesh axis as the graph builder sees it: its size, this rank's coordinate on it, and
// the logical axes it splits (from logical_axis_rules; models::ModelSpec carries them).
struct TensorParallel {
  int64_t size = 1;
  int64_t rank = 0;
  std::vector<std::string> axes;
  // How many ways `logical` is split: size when the tensor axis splits it, else 1.
  int64_t ways(const std::string& logical) const;
};

struct Value {
  std::string name;
  Shape shape;
  DType dtype = DType::kF32;
  ValueKind kind = ValueKind::kActivation;
  std::vector<std::string> logical_axes;  // params: one logical axis name per dimension
  bool weight_decay = true;               // params: false for norms and biases
  ValueId compute_copy = kNoValue;        // params: their kParamCompute copy, if any
  ValueId master = kNoValue;              // kParamCompute / kGrad / kOptState: the kParam they serve
  ValueId grad = kNoValue;                // params: their gradient
  ValueId alias_of = kNoValue;            // activations that share another's buffer (in-place ops)
  int producer = -1;                      // index of the node that writes it
  int layer = -1;                         // decoder layer of the producing node (-1: outside layers)
  TensorShard tp;                         // the tensor-parallel shard this value holds (see above)
};

// The shape of the whole tensor a (possibly tensor-parallel) value is a shard of.
Shape global_shape(const Value& v);
// For logs: "tensor slice [32:64] of dim 1 (q_heads) of [64, 64]"; "" for a whole value.
std::string describe_tensor_shard(const Value& v);

enum class Phase { kForward, kRecompute, kBackward, kOptimizer };

enum class OpKind {
  kEmbedding,          // in: table [V,E], ids [N]              out: x [N,E]
  kEmbeddingBwd,       // in: dx [N,E], ids [N]                 out: dtable (accumulated)
  kRmsNorm,            // in: x [N,C], gamma [C]                out: y [N,C], rstd [N]
  kRmsNormBwd,         // in: dy, x, gamma, rstd                out: dx, dgamma (accumulated)
  kMatmul,             // in: a, b                              out: c   (attrs.trans_a/b, accumulate)
  kRope,               // in: x [N,H*D], positions [B,T]        out: y
  kRopeBwd,            // in: dy, positions                     out: dx
  kAttention,          // in: q, k, v, segment_ids              out: o [N,H*D], lse [B,H,T]
  kAttentionBwd,       // in: do, q, k, v, o, lse, segment_ids  out: dq, dk, dv
  kGlu,                // in: gate [N,F], up [N,F]              out: y [N,F]
  kGluBwd,             // in: dy, gate, up                      out: dgate, dup
  kAdd,                // in: a, b                              out: a + b
  kCrossEntropy,       // in: logits [N,V], targets [N]         out: loss [N], lse [N]
  kCrossEntropyBwd,    // in: logits, targets, lse, dloss [N]   out: dlogits (aliases logits)
  kTpCopy,             // in: x [N,C]                           out: y = x (aliases x)     Megatron's f
  kTpAllReduce,        // in: x [N,C] partial sums              out: y = sum over the tensor axis
                       //     [, scratch f32 [N,C] for bf16]         (y may alias x)        Megatron's g
  kVocabEmbedding,     // in: table shard [Vl,E], ids [N]       out: x [N,E], 0 outside the shard
  kVocabEmbeddingBwd,  // in: dx [N,E], ids [N]                 out: dtable shard (accumulated)
  kVocabCrossEntropy,  // in: logits [N,Vl], targets [N]        out: loss [N], lse [N], stats [2,N]
  // kVocabCrossEntropyBwd: in: logits, targets, lse, dloss       out: dlogits (aliases logits)
  kVocabCrossEntropyBwd,
  kAdamW,              // in: param grad m v [compute copy]     (updates in place)
  kSgd,                // in: param grad [compute copy]         (updates in place)
};

const char* op_name(OpKind op);

struct NodeAttrs {
  bool trans_a = false, trans_b = false, accumulate = false;  // kMatmul
  float eps = 0.0f;                                           // kRmsNorm
  int batch = 0, seq = 0, heads = 0, kv_heads = 0, head_dim = 0;  // kRope, kAttention
  int64_t sliding_window = 0;                                 // kAttention
  int activation = 0;                                         // kGlu: ops::Activation as int
  float z_loss = 0.0f;                                        // kCrossEntropy, kVocabCrossEntropy
  int64_t vocab_offset = 0, vocab = 0;                        // kVocab*: the shard's first id, V
};

struct Node {
  OpKind op;
  std::vector<ValueId> in;
  std::vector<ValueId> out;
  NodeAttrs attrs;
  std::string name;        // e.g. "layers.3.attention.query_proj"
  std::string ckpt_name;   // MaxText's checkpoint name of the main output ("query_proj", "mlpwo", ...)
  Phase phase = Phase::kForward;
  int layer = -1;
};

class Graph {
 public:
  // --- values
  ValueId param(const std::string& name, Shape shape, std::vector<std::string> logical_axes,
                bool weight_decay = true);
  ValueId input(const std::string& name, Shape shape, DType dtype);
  ValueId activation(const std::string& name, Shape shape, DType dtype);
  // The value matmuls should read for a parameter: its compute copy when the compute dtype is
  // lower than f32 (created on first use), else the parameter itself.
  ValueId compute_view(ValueId param, DType compute_dtype);

  // --- forward ops; each returns its main output. `ckpt` is MaxText's checkpoint name.
  ValueId embedding(ValueId table, ValueId ids, DType out_dtype, const std::string& name);
  ValueId rms_norm(ValueId x, ValueId gamma, float eps, const std::string& name);
  ValueId matmul(ValueId a, ValueId b, const std::string& name, const std::string& ckpt = "",
                 bool trans_b = false);
  ValueId rope(ValueId x, ValueId positions, int batch, int seq, int heads, int head_dim,
               const std::string& name);
  ValueId attention(ValueId q, ValueId k, ValueId v, ValueId segment_ids, const NodeAttrs& shape,
                    const std::string& name);
  ValueId glu(int activation, ValueId gate, ValueId up, const std::string& name, const std::string& ckpt);
  ValueId add(ValueId a, ValueId b, const std::string& name);
  // Returns the per-token loss [N]; the lse is the node's second output.
  ValueId cross_entropy(ValueId logits, ValueId targets, float z_loss, const std::string& name);

  // --- tensor parallelism (see the file comment). Set before the first param(); size 1 (the
  // default) builds the one-device graph.
  void set_tensor_parallel(TensorParallel tp);
  const TensorParallel& tensor_parallel() const { return tp_; }
  // Megatron's f and g, which the op methods above insert; exposed for tests and other builders.
  // f: y = x forward (y aliases x), dx = all-reduce(dy) backward.
  ValueId tp_copy(ValueId x, const std::string& name);
  // g: y = all-reduce(x) forward, in place over x when in_place (x must have no other reader),
  // dx = dy backward. `ckpt` names y for the remat policies.
  ValueId tp_all_reduce(ValueId x, const std::string& name, const std::string& ckpt = "",
                        bool in_place = true);

  // Marks the start of decoder layer `layer` (-1 ends the layered region): nodes added from now on
  // carry it; remat and the memory report group by it.
  void set_layer(int layer) { layer_ = layer; }
  void set_phase(Phase p) { phase_ = p; }

  // Appends a node as is (autodiff, remat and the optimizer use this).
  int add_node(Node n);

  const Value& value(ValueId id) const { return values_[id]; }
  Value& value(ValueId id) { return values_[id]; }
  const std::vector<Value>& values() const { return values_; }
  const std::vector<Node>& nodes() const { return nodes_; }
  std::vector<Node>& nodes() { return nodes_; }
  std::vector<ValueId> params() const;  // kParam values in creation order

  ValueId loss() const { return loss_; }
  void set_loss(ValueId v) { loss_ = v; }

 private:
  ValueId add_value(Value v);
  ValueId embedding_shard(ValueId table, ValueId ids, DType out_dtype, const std::string& name);
  ValueId cross_entropy_shard(ValueId logits, ValueId targets, float z_loss, const std::string& name);
  std::vector<Value> values_;
  TensorParallel tp_;
  std::vector<std::pair<ValueId, ValueId>> copies_;  // x -> tp_copy(x), so readers of x share one f
  std::vector<Node> nodes_;
  int layer_ = -1;
  Phase phase_ = Phase::kForward;
  ValueId loss_ = kNoValue;
};

// What the tensor axis's all-reduces move per micro-step on this rank, counted as communicator.h
// counts (the f32 buffer passed in): each tp_all_reduce node's value (Megatron's g forward and f
// backward, [N, E] each; bf16 values travel as f32) and the vocab-parallel loss's [N] max and
// [2, N] sums, by phase. Recomputed forward nodes count again.
struct TensorParallelTraffic {
  double forward = 0, recompute = 0, backward = 0;  // bytes
  int64_t all_reduces = 0;                          // calls
  double total() const { return forward + recompute + backward; }
};
TensorParallelTraffic tensor_parallel_traffic(const Graph& g);

}  // namespace tessera::graph
