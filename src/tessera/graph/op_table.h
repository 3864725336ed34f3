// The op table: every op family of the step graph (graph.h's OpKind) defined once. An entry says
// what the family's nodes read and write, how they are sharded over the tensor axis
// (sharding.h), their backward rule (autodiff.h), how they run (the kernel call on the workspace's
// tensors), their FLOPs and the bytes they move. graph.cc's op methods, autodiff, the sharding pass,
// the executor and the plan's reports all read this table; none of them switches over OpKind.
//
// The entries live beside each other by family: op_dense.cc (matmul, add, glu, rms_norm),
// op_attention.cc (rope, attention), op_vocab.cc (embedding, cross-entropy and their
// vocab-parallel forms), op_collective.cc (tensor-parallel f and g), op_moe.cc (routing, load
// balance, dispatch, grouped matmul, combine), op_update.cc (AdamW, SGD).
// docs/architecture.md "Adding an op" walks through adding one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/graph/graph.h"
#include "tessera/ops/optimizer.h"

namespace tessera {
namespace backends {
class Backend;
}
namespace dist {
class Communicator;
}
namespace ops {
class RopeTable;
}
}  // namespace tessera

namespace tessera::graph {

class GradBuilder;        // autodiff.h
class ShardBuilder;       // sharding.h
class Workspace;          // workspace.h
struct PendingExchanges;  // sharding_expert.h

// What a node's kernel call needs besides the node: the tensors (the workspace's views), the
// device's backend, the RoPE table, the tensor and expert axes' communicators and the optimizer step's
// hyperparameters (set by the executor before the optimizer nodes run).
struct RunContext {
  const Graph* graph = nullptr;
  const Workspace* ws = nullptr;
  backends::Backend* backend = nullptr;
  const ops::RopeTable* rope = nullptr;
  dist::Communicator* tensor = nullptr;  // the tensor axis's group (one process on one device)
  dist::Communicator* expert = nullptr;  // the expert axis's group (sharding_expert.h)
  PendingExchanges* pending = nullptr;   // all-to-alls started by deferred exchange nodes
  int64_t step = -1;                     // the training step, for error messages (-1: unknown)
  bool forward_only = false;             // a pass without backward (evaluation): no gradients needed
  ops::AdamWHyperparams adamw;
  double sgd_lr = 0;
  double grad_scale = 1;  // the clip scale over the gradient divisor
  const Tensor& in(const Node& n, size_t i) const;
  const Tensor& out(const Node& n, size_t i) const;
};

// Tensor-axis collectives a node runs, as communicator.h counts them (f32 bytes).
struct NodeTraffic {
  double bytes = 0;
  int64_t calls = 0;
};

// One output of a node, as its op infers it from the inputs and attributes.
struct OutputSpec {
  std::string suffix;  // appended to the node's name ("" for the main output)
  Shape shape;
  DType dtype = DType::kF32;
};

struct OpDef {
  OpKind kind;
  const char* name;
  // The outputs of a node from its inputs' (local) shapes and its attributes, checking that the
  // inputs fit; nullptr for ops that autodiff, the sharding pass or the optimizer build directly.
  std::vector<OutputSpec> (*infer)(const Graph& g, const Node& n) = nullptr;
  // Appends the backward of forward node `f` given the gradient dy of its main output; nullptr for
  // ops that only appear in the backward or optimizer phase (autodiff reports them).
  void (*backward)(GradBuilder& b, const Node& f, ValueId dy) = nullptr;
  // Rewrites the node for this tensor rank (sharding.h): sets its outputs' shards and local shapes
  // and emits it, with any collectives around it. nullptr: every input must be whole, and the
  // outputs are whole.
  void (*shard)(ShardBuilder& b, Node n) = nullptr;
  // Runs the node on the context's tensors.
  void (*run)(const RunContext& c, const Node& n) = nullptr;
  // Floating-point operations of one run (0: not counted, as MaxText counts only matmuls and
  // attention); nullptr counts 0.
  double (*flops)(const Graph& g, const Node& n) = nullptr;
  // Bytes read and written by one run; nullptr: every input and output once.
  double (*bytes)(const Graph& g, const Node& n) = nullptr;
  // Tensor-axis collectives of one run; nullptr: none.
  NodeTraffic (*traffic)(const Graph& g, const Node& n) = nullptr;
};

// The entry of `op` (every OpKind has one; the table checks that when first read).
const OpDef& op_def(OpKind op);

double node_flops(const Graph& g, const Node& n);
double node_bytes(const Graph& g, const Node& n);
NodeTraffic node_traffic(const Graph& g, const Node& n);

// Helpers the entries share.
double value_bytes(const Graph& g, ValueId v);
// Every operand of `n` once, those whose first dimension is `buffer_rows` (a buffer of rows) as
// if it had `used_rows`: for kernels that touch only the filled rows of a ragged buffer.
double rows_bytes(const Graph& g, const Node& n, int64_t buffer_rows, int64_t used_rows);
// [N, heads*D] activations seen as [B, T, heads, D].
Tensor heads_view(const Tensor& t, int batch, int seq, int heads, int head_dim);

}  // namespace tessera::graph
