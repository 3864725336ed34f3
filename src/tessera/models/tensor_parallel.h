// Tensor parallelism (Megatron-LM) as the model builders take it from the config: which parameter
// axes the tensor mesh axis splits, read from logical_axis_rules, and the refusal of layouts
// Tessera does not build. graph.h's file comment says how the graph then splits the parameters
// and inserts the collectives.
//
// Megatron splits the parameter axes heads, q_heads and kv_heads (the query/key/value columns and
// the out-projection rows: whole heads per rank), mlp (wi_0/wi_1 columns, wo rows) and vocab
// (embedding rows, unembedding columns). For each of them the first rule naming it decides, as in
// MaxText: the axis is split over `tensor` when that rule's mesh axes include it (so the default
// rules split all five, and a rule such as [mlp, []] placed first keeps the MLP whole on every
// tensor rank).
//
// Not taken from the rules: `norm` and the activation_* axes. MaxText's default rules also put
// norm and activation_embed on tensor, which is MaxText's layout with the residual stream sharded
// along embed between layers; Tessera builds Megatron's, where the residual stream and the norm
// scales are whole on every tensor rank (their gradients come out equal on every rank).
// Refused (kConfig): `embed` split over tensor (the sharded residual stream), a rule that splits
// one of the five axes over tensor together with another mesh axis of size > 1 (e.g. mlp over
// fsdp_transpose x tensor), and tensor parallelism together with the sequence, context,
// pipeline (stage), fsdp_transpose or tensor_transpose axes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/config/config.h"
#include "tessera/models/model_spec.h"

namespace tessera::models {

// The parameter logical axes the tensor axis splits under cfg's rules and derived mesh sizes
// (empty when the tensor axis has size 1).
std::vector<std::string> tensor_parallel_axes(const Config& cfg);

// Fills spec.tp_size (the tensor axis's size, ici x dcn), spec.tp_rank and spec.tp_axes.
void set_tensor_parallel(ModelSpec& spec, const Config& cfg, int64_t tensor_rank);

}  // namespace tessera::models
