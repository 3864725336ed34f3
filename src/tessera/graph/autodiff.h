// Reverse-mode autodiff over a forward graph, then rematerialisation and the optimizer update.
//
// append_backward walks the forward nodes in reverse and appends each op's backward rule (its
// op_table.h entry, which builds through GradBuilder below). Activation gradients are new values;
// gradients reaching one value from several consumers are summed with add nodes; parameter
// gradients are accumulated straight into their kGrad value.
//
// apply_remat then decides which forward activations stay alive until the backward reads them
// and which are recomputed just before their layer's backward, following MaxText's remat_policy
// names (each policy is a list of checkpoint names saved; values that cross a layer boundary —
// decoder_layer_input — and everything outside the decoder layers are always saved):
//   none                              everything saved
//   minimal                           every projection saved, attention output (context) recomputed
//   minimal_with_context              every projection and context saved
//   save_dot_with_context_except_mlp  query/key/value/out projections and context
//   save_dot_except_mlpwi             query/key/value/out projections and mlpwo
//   save_dot_except_mlp               query/key/value/out projections
//   save_qkv_proj                     query/key/value projections
//   save_out_proj                     out projection
//   full                              nothing inside a layer: the layer is recomputed from its input
#pragma once

#include <map>
#include <string>
#include <vector>

#include "tessera/graph/graph.h"

namespace tessera::graph {

// What a backward rule builds with: the graph, which values need a gradient, and the bookkeeping
// of the contributions each activation's gradient collects.
class GradBuilder {
 public:
  explicit GradBuilder(Graph& g);
  Graph& graph() { return g_; }
  // v is an activation whose gradient the loss needs.
  bool needs(ValueId v) const;
  // v is a parameter or a parameter's compute copy (its gradient is the master's kGrad).
  bool is_param(ValueId v) const;
  ValueId param_grad(ValueId v) const;
  // A new gradient value for `of` (its shape, dtype and shard) in the current rule's layer.
  ValueId grad_value(ValueId of);
  // Adds `grad` to the contributions to v's gradient (ignored unless needs(v)).
  void contribute(ValueId v, ValueId grad);
  // A backward node of the current forward node: its attributes, name + suffix, its layer.
  Node node(OpKind op, std::vector<ValueId> in, std::vector<ValueId> out, const std::string& suffix) const;
  void add(Node n) { g_.add_node(std::move(n)); }

 private:
  friend ValueId append_backward(Graph& g, ValueId* daux);
  ValueId total_grad(ValueId v, int layer);  // sums v's contributions into one value
  Graph& g_;
  std::map<ValueId, std::vector<ValueId>> parts_;
  std::vector<bool> requires_grad_;
  const Node* fwd_ = nullptr;  // the forward node whose rule is running
};

// The remat policies apply_remat implements (its error for any other names them).
const std::vector<std::string>& remat_policy_names();

// Appends backward nodes for graph.loss() and the aux losses; returns the id of the dloss input [N]
// (f32), which the trainer fills (1 per token: the optimizer divides by the tokens counted). When
// the graph has aux losses, *daux (if given) is set to the input [1] that seeds all of them
// (kNoValue otherwise). The loss's cross_entropy node and its backward come out as one node
// (kCrossEntropyGrad) where fuse_loss_gradient allows, so dloss must be filled before the forward
// pass runs.
ValueId append_backward(Graph& g, ValueId* daux = nullptr);

// Rewrites the node list so that backward nodes read recomputed copies of the activations the
// policy does not save. Throws kConfig for an unknown policy.
void apply_remat(Graph& g, const std::string& policy);

enum class OptimizerKind { kAdamW, kSgd };

// Appends one update node per parameter (after the global-norm clip, which the executor performs
// when it reaches the first optimizer node). AdamW creates the m and v moments.
void append_optimizer(Graph& g, OptimizerKind kind);

}  // namespace tessera::graph
