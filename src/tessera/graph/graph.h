// The step graph: values (tensors described by shape, dtype and role) and nodes (coarse ops over
// them), in execution order. Model code builds the forward part through Graph's op methods;
// autodiff.h appends the backward part and the recomputation (apply_remat), and the optimizer nodes close
// the step. plan.h turns the finished graph into a Plan with every value placed in an arena. What
// each op is (its attributes, shapes, sharding, backward rule, kernel call, FLOPs) is defined once,
// in op_table.h's table.
//
// Shapes (STYLE.md 4): N = B*T tokens, E embedding, H query heads, K kv heads, D head dim,
// F mlp dim, V vocabulary. Activations are [N, C] row-major; attention views them as [B, T, H, D].
//
// Tensor parallelism (Megatron-LM) is a property of the graph, not of the model code: the model
// builds the whole (logical) graph with global shapes, set_tensor_parallel() records the tensor
// mesh axis, and sharding.h's pass (run when the plan is made) rewrites the graph into this rank's
// part: each parameter keeps its shard along the one dimension whose logical axis the tensor axis
// splits (Value::tp), and each op's sharding rule follows the shards through the [N, C]
// activations, inserting the collectives (sharding.h lists them).
#pragma once

#include <cstdint>
#include <string>
#include <variant>
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
  kCache,         // decoding state (a layer's KV cache): persistent, written by the ops that own it
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
  std::vector<std::string> logical_axes{};  // params: one logical axis name per dimension
  bool weight_decay = true;                 // params: false for norms and biases
  ValueId compute_copy = kNoValue;          // params: their kParamCompute copy, if any
  ValueId master = kNoValue;                // kParamCompute / kGrad / kOptState: the kParam they serve
  ValueId grad = kNoValue;                  // params: their gradient
  ValueId alias_of = kNoValue;              // activations that share another's buffer (in-place ops)
  int producer = -1;                        // index of the node that writes it
  int layer = -1;                           // decoder layer of the producing node (-1: outside layers)
  // Inference graphs: a kernel stored [out, in], the transpose of its checkpoint shape (the layout
  // small-M products stream row by row; matmuls read it with trans_b). Loaders transpose it.
  bool transposed = false;
  TensorShard tp{};  // the tensor-parallel shard this value holds (see above)
  // Expert parallelism (sharding_expert.h): an expert weight [X, ...] holds the experts
  // [offset, offset + shape[0]) of `global` along dim 0; its gradient and compute copy too.
  TensorShard ep{};
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
  kRmsNormBwd,         // in: dy, x, gamma, rstd [, dx's prior] out: dx, dgamma (accumulated)
  kMatmul,             // in: a, b [, c's prior value]          out: c   (attrs.trans_a/b, accumulate)
  kRope,               // in: x [N,H*D], positions [B,T]        out: y
  kRopeBwd,            // in: dy, positions                     out: dx
  kAttention,          // in: q, k, v, segment_ids [, sinks]    out: o [N,H*D], lse [B,H,T]
  kAttentionBwd,       // in: do, q, k, v, o, lse, seg [, sinks] out: dq, dk, dv [, dsinks (accumulated)]
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
  kLayerNorm,      // in: x [N,C], gamma [C], beta [C]      out: y [N,C], mean [N], rstd [N]
  kLayerNormBwd,   // in: dy, x, gamma, mean, rstd [, dx's prior] out: dx, dgamma, dbeta (accumulated)
  kBiasAdd,        // in: x [N,C], bias [C] (f32)           out: y = x + bias
  kBiasGrad,       // in: dy [N,C]                          out: dbias (accumulated)
  kActivation,     // in: x [N,F]                           out: y = act(x)
  kActivationBwd,  // in: dy, x                             out: dx
  kScale,          // in: x                                 out: y = value * x (attrs ScalarAttrs)
  kSoftCap,        // in: x                                 out: y = value * tanh(x / value)
  kSoftCapBwd,     // in: dy, x                             out: dx = dy (1 - tanh^2(x / value))
  // Mixture of experts (ops/moe.h): N tokens, X experts, top-k, R dispatch rows.
  kMoeRoute,           // in: logits [N,X]                      out: weights [N,k] f32, experts [N,k] i32
  kMoeRouteBwd,        // in: dweights, weights, experts        out: dlogits [N,X]
  kMoeLoadBalance,     // in: logits [N,X], experts [N,k]       out: loss [1] f32 (an aux loss)
  kMoeLoadBalanceBwd,  // in: dloss [1], logits, experts        out: dlogits [N,X]
  kMoeDispatch,        // in: x [N,E], experts [N,k]            out: xs [R,E], rows [N*k] i32, sizes [X] i32
  kMoeDispatchBwd,     // in: dxs [R,E], rows                   out: dx [N,E]
  kGroupedMatmul,   // in: a, b, sizes [, c's prior]         out: c   (attrs.trans_b, weight_grad, accumulate)
  kMoeCombine,      // in: ys [R,E], weights [N,k], rows     out: y [N,E]
  kMoeCombineBwd,   // in: dy, ys, weights, rows             out: dys [R,E], dweights [N,k]
  kGroupedBiasAdd,  // in: x [R,C], bias [X,C] f32, sizes    out: y = x + bias of the row's group
  kGroupedBiasGrad,  // in: dy [R,C], sizes                   out: dbias (accumulated)
  // Decoding (inference graphs): M rows, each a token of the sequence in KV-cache slot slots[m] at
  // position positions[m]; k_cache, v_cache [S,T,K,D] are kCache values the op writes.
  // kCachedAttention: in: q [M,H*D], k, v [M,K*D], k_cache, v_cache, positions [1,M], slots [M]
  //                   [, sinks]                              out: o [M,H*D], index [2,M] i32
  kCachedAttention,
  kAdamW,  // in: param grad m v [compute copy]     (updates in place)
  kSgd,    // in: param grad [compute copy]         (updates in place)
  // Expert parallelism (sharding_expert.h): the ragged all-to-alls over the expert axis around the
  // grouped matmuls of this rank's Xl = X / EP experts. Rb: the receive buffer's rows.
  // kMoeToExperts: in: xs [R,E] (sorted by expert), sizes [X]
  //                out: xl [Rb,E] (sorted by local expert), local sizes [Xl] i32, counts [EP,X] i32,
  //                     staging [Rb,E]
  kMoeToExperts,
  kMoeToExpertsBwd,    // in: dxl [Rb,E], counts                out: dxs [R,E], staging [Rb,E]
  kMoeFromExperts,     // in: yl [Rb,E], counts                 out: ys [R,E], staging [Rb,E]
  kMoeFromExpertsBwd,  // in: dys [R,E], counts                 out: dyl [Rb,E], staging [Rb,E]
  // The end of an exchange that overlap_expert_exchanges split (MoeExchangeAttrs::deferred): waits
  // for the all-to-all its exchange node started. in: that node's outputs (receive buffer,
  // staging), which stay live until here; no output.
  kMoeExchangeWait,
  // Training's loss: kCrossEntropy with its kCrossEntropyBwd as one forward node, when dloss is the
  // gradient's seed (autodiff.h, fuse_loss_gradient).
  // kCrossEntropyGrad: in: logits, targets, dloss [N]       out: loss, lse, dlogits (aliases logits)
  kCrossEntropyGrad,
  // Inference graphs: products of one input against weights stored [out, in] (trans_b), run as
  // one call of the small-M kernel (fuse.h, fuse_shared_input_products).
  // kSharedInputMatmuls: in: a [M,K], b_1 [N_1,K] .. b_n     out: c_1 [M,N_1] .. c_n
  kSharedInputMatmuls,
};
// Inference graphs may run products of fewer rows than this with weights stored [out, in] on the
// small-M kernel (ops/gemv.h), which streams the weight at the memory bandwidth; at run time
// ops::gemv_is_faster decides by device and dtype (fewer rows where the device's GEMM is the
// faster sooner), and no device's GEMM is slower above (bench/decode_bench.cc).
inline constexpr int64_t kGemvRows = 64;
// The last kind above, plus one.
inline constexpr int kNumOpKinds = static_cast<int>(OpKind::kSharedInputMatmuls) + 1;

// The op's name as logs, profiles and backends spell it ("matmul", "rms_norm_bwd", ...).
const char* op_name(OpKind op);

// Typed attributes, one struct per op family; a backward node carries its forward node's.
struct MatmulAttrs {  // c = op(a)·op(b) (+= c when accumulate)
  bool trans_a = false, trans_b = false, accumulate = false;
};
struct NormAttrs {
  float eps = 0.0f;
  int64_t group = 0;  // rms_norm: > 0 normalises each run of `group` columns (per-head QK-norm)
  float offset = 0;   // rms_norm: scales by gamma + offset (Gemma's 1 + w)
  // rms_norm_bwd, layer_norm_bwd: dx += the gradient, dx's prior value the node's last input and
  // dx aliasing it (fuse.h's fuse_gradient_sums)
  bool accumulate = false;
};
struct RopeAttrs {  // x [N, heads*D] seen as [B, T, heads, D]
  int batch = 0, seq = 0, heads = 0, head_dim = 0;
  bool local = false;  // rotate with the table's local companion (Gemma 3's sliding layers)
};
struct AttentionAttrs {  // q [N, heads*D], k and v [N, kv_heads*D], as [B, T, heads, D]
  int batch = 0, seq = 0, heads = 0, kv_heads = 0, head_dim = 0;
  int64_t sliding_window = 0;  // 0: full causal
  bool sinks = false;          // the last input is the sinks [heads] f32 (ops/attention.h)
  float scale = 0;             // of q·k; 0: 1 / sqrt(head_dim)
  float logits_soft_cap = 0;   // s = cap * tanh(s / cap) before the softmax (Gemma 2); 0: off
};
struct ActivationAttrs {  // glu and activation
  int activation = 0;     // ops::Activation as int
  float limit = 0;        // glu: GPT-OSS's clamps (ops::GluOptions); 0: none
  float up_offset = 0;
};
// The vocab-parallel forms hold ids [vocab_offset, vocab_offset + rows) of the V in their shard.
struct EmbeddingAttrs {
  DType dtype = DType::kF32;  // of the looked-up rows (the compute dtype)
  int64_t vocab_offset = 0, vocab = 0;
};
struct CrossEntropyAttrs {
  float z_loss = 0.0f;
  int64_t vocab_offset = 0, vocab = 0;
};
// MoE: the routing (k of X experts), the load-balance loss over `batch` sequences, and how the
// dispatch fills its rows (ops::MoeDispatch: dropless, capacity per sequence of `seq`, or dense).
struct MoeAttrs {
  int64_t experts = 0, k = 0;
  int64_t batch = 0, seq = 0;
  int64_t capacity = 0;
  bool dense = false;
  double lb_weight = 0;  // load_balance_loss_weight
};
struct ScalarAttrs {  // scale, soft_cap
  float value = 0;
};
struct GroupedMatmulAttrs {  // c = a·op(b[g]) per group, or the per-group weight gradient
  bool trans_b = false, weight_grad = false, accumulate = false;
  int64_t useful_rows = 0;  // rows the FLOP count charges: N * k (the dense path computes N * X)
  // The rows are expert parallelism's receive buffer (sharding_expert.h), of which about
  // useful_rows are filled: the byte count charges those, not the buffer.
  bool ragged_buffer = false;
};
// The expert-axis exchange (kMoeToExperts and kin): X experts over `ranks` expert ranks of which
// this is `rank` (each holds X / ranks consecutive experts), a receive buffer of `buffer_rows`
// rows, and what an overflow message names (ragged_buffer_factor, the layer).
struct MoeExchangeAttrs {
  int64_t experts = 0, ranks = 1, rank = 0;
  int64_t rows = 0;         // R: the rows this rank dispatches (N * k)
  int64_t buffer_rows = 0;  // Rb
  double buffer_factor = -1;
  // The node only starts its all-to-all; the kMoeExchangeWait node reading its outputs ends it.
  bool deferred = false;
};
using NodeAttrs = std::variant<std::monostate, MatmulAttrs, NormAttrs, RopeAttrs, AttentionAttrs,
                               ActivationAttrs, EmbeddingAttrs, CrossEntropyAttrs, MoeAttrs,
                               GroupedMatmulAttrs, ScalarAttrs, MoeExchangeAttrs>;

struct Node {
  OpKind op;
  std::vector<ValueId> in{};
  std::vector<ValueId> out{};
  NodeAttrs attrs{};
  std::string name{};       // e.g. "layers.3.attention.query_proj"
  std::string ckpt_name{};  // MaxText's checkpoint name of the main output ("query_proj", "mlpwo", ...)
  Phase phase = Phase::kForward;
  int layer = -1;
  // The node's attributes as its family's type (an internal error for another family's node).
  template <class A>
  const A& attr() const;
  template <class A>
  A& attr();
};

[[noreturn]] void fail_attr_type(const Node& n);
template <class A>
const A& Node::attr() const {
  if (const A* a = std::get_if<A>(&attrs)) return *a;
  fail_attr_type(*this);
}
template <class A>
A& Node::attr() {
  if (A* a = std::get_if<A>(&attrs)) return *a;
  fail_attr_type(*this);
}

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
  // RMSNorm over each row of x [N, C], or with `group` > 0 over each run of `group` columns (a
  // head's D: QK-norm), gamma [C] or [group].
  // The norm scales by gamma + offset (Gemma: 1).
  ValueId rms_norm(ValueId x, ValueId gamma, float eps, const std::string& name, int64_t group = 0,
                   float offset = 0);
  ValueId matmul(ValueId a, ValueId b, const std::string& name, const std::string& ckpt = "",
                 bool trans_b = false);
  // `local`: the executor's local RoPE table (ops::RopeTable::local()), Gemma 3's sliding layers.
  ValueId rope(ValueId x, ValueId positions, int batch, int seq, int heads, int head_dim,
               const std::string& name, bool local = false);
  // A decoding graph's KV cache [S, T, K, D] (kCache), in the compute dtype.
  ValueId cache(const std::string& name, Shape shape, DType dtype);
  // Decoding attention (kCachedAttention): stores each row's k and v in its slot's cache at its
  // position, then attends its query to the slot's positions up to its own (causal, the sliding
  // window of shape.sliding_window, sinks). shape.batch = 1, shape.seq = M. A row of slot -1 is
  // padding: it writes nothing and its output is zero.
  ValueId cached_attention(ValueId q, ValueId k, ValueId v, ValueId k_cache, ValueId v_cache,
                           ValueId positions, ValueId slots, const AttentionAttrs& shape,
                           const std::string& name, ValueId sinks = kNoValue);
  // `sinks` (kNoValue: none) is an f32 parameter [heads]; shape.sinks is set from it.
  ValueId attention(ValueId q, ValueId k, ValueId v, ValueId segment_ids, const AttentionAttrs& shape,
                    const std::string& name, ValueId sinks = kNoValue);
  // act(gate) * up; with limit > 0, GPT-OSS's act(min(gate, limit)) * (clamp(up, ±limit) + up_offset).
  ValueId glu(int activation, ValueId gate, ValueId up, const std::string& name, const std::string& ckpt,
              float limit = 0, float up_offset = 0);
  // y = act(x), the plain (non-gated) MLP's activation.
  ValueId activation(int activation, ValueId x, const std::string& name, const std::string& ckpt);
  // y = a * x (Gemma's embedding scaled by sqrt(E)); any shape.
  ValueId scale(ValueId x, float a, const std::string& name);
  // y = cap * tanh(x / cap) (Gemma 2's final logits); any shape, cap > 0.
  ValueId soft_cap(ValueId x, float cap, const std::string& name);
  // LayerNorm with a bias (beta) over the rows of x [N, C].
  ValueId layer_norm(ValueId x, ValueId gamma, ValueId beta, float eps, const std::string& name);
  // y = x + bias over the rows of x [N, C]; bias an f32 parameter [C].
  ValueId bias_add(ValueId x, ValueId bias, const std::string& name);
  ValueId add(ValueId a, ValueId b, const std::string& name);
  // Returns the per-token loss [N]; the lse is the node's second output.
  ValueId cross_entropy(ValueId logits, ValueId targets, float z_loss, const std::string& name);
  // Mixture of experts (ops/moe.h): route each token to k experts, dispatch the tokens into rows
  // grouped by expert, multiply the rows by the expert weights w [X, in, out] (grouped_matmul) and
  // combine the expert outputs back into [N, E].
  struct MoeRouting {
    ValueId weights, experts;  // [N, k] f32, [N, k] int32
  };
  MoeRouting moe_route(ValueId logits, const MoeAttrs& a, const std::string& name);
  // The load-balance loss [1] of the routing, registered as an aux loss (below).
  ValueId moe_load_balance(ValueId logits, ValueId experts, const MoeAttrs& a, const std::string& name);
  struct MoeRows {
    ValueId xs, rows, group_sizes;  // [R, E], [N * k] int32, [X] int32
  };
  MoeRows moe_dispatch(ValueId x, ValueId experts, const MoeAttrs& a, const std::string& name);
  ValueId grouped_matmul(ValueId xs, ValueId w, ValueId group_sizes, int64_t useful_rows,
                         const std::string& name, const std::string& ckpt = "");
  ValueId moe_combine(ValueId ys, ValueId weights, ValueId rows, const MoeAttrs& a, const std::string& name);
  // xs [R, C] + the bias [X, C] (an f32 parameter) of each row's expert (GPT-OSS's expert biases).
  ValueId grouped_bias_add(ValueId xs, ValueId bias, ValueId group_sizes, const std::string& name);

  // --- tensor parallelism (see the file comment). Records the tensor mesh axis the graph is to be
  // sharded for; size 1 (the default) is the one-device graph. sharding.h's pass reads it.
  void set_tensor_parallel(TensorParallel tp);
  const TensorParallel& tensor_parallel() const { return tp_; }
  bool sharded() const { return sharded_; }
  void mark_sharded() { sharded_ = true; }

  // Marks the start of decoder layer `layer` (-1 ends the layered region): nodes added from now on
  // carry it; remat and the memory report group by it.
  void set_layer(int layer) { layer_ = layer; }
  void set_phase(Phase p) { phase_ = p; }
  int layer() const { return layer_; }
  Phase phase() const { return phase_; }

  // Appends a node as is (autodiff, remat, sharding and the optimizer use this).
  int add_node(Node n);
  // Replaces the node list with a rewritten one (remat, the exchange overlap); activations'
  // producers then index the new list.
  void set_nodes(std::vector<Node> nodes);
  // Appends a node of the current phase and layer whose outputs its op infers (op_table.h);
  // returns its main output. The op methods above are this with their family's attributes.
  ValueId add_op(OpKind op, std::vector<ValueId> in, NodeAttrs attrs, const std::string& name,
                 const std::string& ckpt = "");

  const Value& value(ValueId id) const { return values_[id]; }
  Value& value(ValueId id) { return values_[id]; }
  const std::vector<Value>& values() const { return values_; }
  const std::vector<Node>& nodes() const { return nodes_; }
  std::vector<Node>& nodes() { return nodes_; }
  std::vector<ValueId> params() const;  // kParam values in creation order

  ValueId loss() const { return loss_; }
  void set_loss(ValueId v) { loss_ = v; }
  // An inference graph (decoding): no loss, no backward and no optimizer; its parameters have no
  // gradients; the host reads its outputs after a pass. Set before the first parameter.
  void set_inference();
  bool inference() const { return inference_; }
  const std::vector<ValueId>& outputs() const { return outputs_; }
  void add_output(ValueId v) { outputs_.push_back(v); }
  // Scalar losses [1] f32 added to the objective beside the token loss (MoE load balance): autodiff
  // seeds each with the `daux` input, and the executor reports their sum (aux_loss_sum).
  const std::vector<ValueId>& aux_losses() const { return aux_losses_; }
  void add_aux_loss(ValueId v) { aux_losses_.push_back(v); }
  std::vector<ValueId>& aux_losses() { return aux_losses_; }

 private:
  ValueId add_value(Value v);
  std::vector<Value> values_;
  TensorParallel tp_;
  bool sharded_ = false;
  std::vector<Node> nodes_;
  int layer_ = -1;
  Phase phase_ = Phase::kForward;
  ValueId loss_ = kNoValue;
  std::vector<ValueId> aux_losses_;
  bool inference_ = false;
  std::vector<ValueId> outputs_;
};

}  // namespace tessera::graph
