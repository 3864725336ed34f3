// Reverse-mode autodiff over a forward graph, then rematerialisation and the optimizer update.
//
// append_backward walks the forward nodes in reverse and appends each op's backward rule (the
// rules sit side by side in autodiff.cc, one case per OpKind). Activation gradients are new
// values; gradients reaching one value from several consumers are summed with add nodes;
// parameter gradients are accumulated straight into their kGrad value.
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

#include <string>
#include <vector>

#include "tessera/graph/graph.h"

namespace tessera::graph {

// The remat policies apply_remat implements (its error for any other names them).
const std::vector<std::string>& remat_policy_names();

// Appends backward nodes for graph.loss(); returns the id of the dloss input [N] (f32), which the
// executor fills with 1 / (number of counted tokens in the global batch).
ValueId append_backward(Graph& g);

// Rewrites the node list so that backward nodes read recomputed copies of the activations the
// policy does not save. Throws kConfig for an unknown policy.
void apply_remat(Graph& g, const std::string& policy);

enum class OptimizerKind { kAdamW, kSgd };

// Appends one update node per parameter (after the global-norm clip, which the executor performs
// when it reaches the first optimizer node). AdamW creates the m and v moments.
void append_optimizer(Graph& g, OptimizerKind kind);

}  // namespace tessera::graph
