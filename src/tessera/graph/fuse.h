// Graph rewrites that fuse nodes. Two apply to an inference graph (Graph::inference(): decoding)
// only, because a training graph's backward reads the values they remove; fuse_gradient_sums
// applies the first one's rule to a training graph's backward.
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

// The same rule on a training graph's backward: a gradient that collects several contributions
// (autodiff.h's add nodes), of which a later one is a product's (a layer's q, k and v projections
// all read the normed input, so its gradient sums their three dx products; gate and up likewise,
// and the experts' gate and up grouped products)
// or a norm backward's dx (the residual stream's gradient: the gradient passing by plus the one
// through the layer's norm; NormAttrs::accumulate), becomes that node accumulating into the sum so
// far. Run after apply_remat, whose node order the rule reads. The forward's sums are left as they
// are: the backward reads their inputs.
void fuse_gradient_sums(Graph& g);

// Products that read one input and may each run on the small-M kernel (a kMatmul of fewer than
// kGemvRows rows with a weight stored [out, in], not accumulating: a layer's q, k and v
// projections, or its gate and up) become one kSharedInputMatmuls node, up to
// ops::kMaxGemvProducts products each, at the first one's place. Decoding then hands off between
// threads once per group instead of once per product (where ops::gemv_is_faster holds; elsewhere
// the node runs the products one by one). Results are bit for bit the same.
void fuse_shared_input_products(Graph& g);

}  // namespace tessera::graph
