// The Engine (engine.h) that decodes with the model definition itself: every family of
// models/decoder.h, through inference plans of the same graph builder the trainer uses
// (ModelSpec::decode), with the KV cache as graph values (graph.h's cached_attention).
//
// Plans: one per step size, sharing one arena of parameters and KV caches and one of activations
// (graph/workspace.h's SharedArenas), as only one runs at a time:
//   prefill  chunks of 1, 2, 4, ... rows up to max_prefill_length, logits of the last row only: a
//            prompt of P tokens runs as the chunks of P's binary digits, largest first (each row
//            attends to its slot's cache, so a chunk sees the chunks before it);
//   decode   1, 2, 4, ... rows up to the smallest power of two >= max_slots, logits of every row;
//            a step of M slots runs the smallest plan of at least M rows, the rest padding (slot -1:
//            no cache write, zero output).
// Parameters are read into the plans' f32 masters and converted to the compute dtype once.
// Logits come out of the graph in the compute dtype and are widened to f32.
//
// Left out: the Llama engine's decoding-specific layouts (fused QKV and gate/up products, gemv for
// small M; llama_engine.h is faster on the Llama family and make_engine picks it there), a
// warm-up at construction, tensor parallelism.
#pragma once

#include <memory>

#include "tessera/infer/llama_engine.h"

namespace tessera::infer {

// The graph engine for any family; options as make_engine's (llama_engine.h). Throws kConfig for
// options or a spec it does not build, kShape for a parameter of the wrong shape or dtype.
std::unique_ptr<Engine> make_graph_engine(const models::ModelSpec& spec, const EngineOptions& options,
                                          const ParameterSource& params);

}  // namespace tessera::infer
