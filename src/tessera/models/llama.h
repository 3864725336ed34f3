// The Llama family (Llama 2/3/3.1, Mistral) as MaxText configures it:
//   x = embed(tokens)                                   [N, E]
//   repeat L times:
//     h = rms_norm(x) ; q,k,v = h·Wq, h·Wk, h·Wv ; q,k = rope(q), rope(k)
//     x = x + attention(q, k, v)·Wo                     (GQA, causal, optional sliding window)
//     h = rms_norm(x) ; x = x + (silu(h·Wi0) * (h·Wi1))·Wo_mlp
//   logits = rms_norm(x)·W_unembed  (or ·Embᵀ when logits_via_embedding)
//   loss = cross_entropy(logits, targets)
// Weights are stored [in, out] with MaxText's logical axis names; the parameter names follow
// MaxText's tree (decoder.layers_<l>.self_attention.query.kernel, ...).
// Tensor parallelism (spec.tp_size > 1, models/tensor_parallel.h) does not change this code: the
// graph keeps this rank's heads, MLP columns and vocabulary rows of each parameter and inserts
// Megatron's collectives itself (graph.h); the builder only reads the local head counts back.
#pragma once

#include "tessera/graph/graph.h"
#include "tessera/models/model_spec.h"

namespace tessera::models {

struct DecoderInputs {
  graph::ValueId tokens, targets, positions, segment_ids;
};

// Builds the forward graph of one micro-step and sets its loss. Throws kConfig for a
// decoder_block this file does not build.
DecoderInputs build_llama(graph::Graph& g, const ModelSpec& spec);

}  // namespace tessera::models
