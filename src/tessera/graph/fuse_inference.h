// Rewrites of an inference graph (Graph::inference(): decoding) that a training graph cannot take,
// because its backward reads the values they remove.
#pragma once

#include "tessera/graph/graph.h"

namespace tessera::graph {

// A residual sum z = x + y whose y is a product's output and read only by the sum becomes that
// product accumulating into x's buffer (MatmulAttrs::accumulate; z aliases x, and x joins the
// product's inputs, after the two operands). The decoder's residual stream then takes no
// separate pass per sum. It applies where x is written before
// the product and read by no node from the product on except the sum, and z aliases nothing else.
// In float32 the sum is the same; in bfloat16 it is rounded once instead of twice (the product's
// f32 result plus x, then to bf16).
void fuse_residual_products(Graph& g);

}  // namespace tessera::graph
