// Inference-graph rewrites (fuse_inference.h).
#include "tessera/graph/fuse_inference.h"

#include "tessera/core/error.h"

namespace tessera::graph {

void fuse_residual_products(Graph& g) {
  TESSERA_ASSERT(g.inference());
  std::vector<Node> nodes = g.nodes();
  const size_t nv = g.values().size();
  std::vector<std::vector<int>> readers(nv);
  for (int i = 0; i < static_cast<int>(nodes.size()); ++i)
    for (ValueId v : nodes[static_cast<size_t>(i)].in) readers[v].push_back(i);
  std::vector<char> pinned(nv, 0);  // outputs, and values another aliases
  for (ValueId o : g.outputs()) pinned[o] = 1;
  for (const Value& v : g.values())
    if (v.alias_of != kNoValue) pinned[v.alias_of] = 1;
  std::vector<char> fused(nv, 0);  // sums this pass turned into aliases (a chain may continue them)
  std::vector<char> drop(nodes.size(), 0);
  for (size_t i = 0; i < nodes.size(); ++i) {
    Node& sum = nodes[i];
    if (sum.op != OpKind::kAdd) continue;
    for (int side = 0; side < 2; ++side) {
      const ValueId y = sum.in[static_cast<size_t>(side)], x = sum.in[static_cast<size_t>(1 - side)];
      const Value &yv = g.value(y), &xv = g.value(x);
      if (yv.kind != ValueKind::kActivation || yv.producer < 0 || readers[y].size() != 1 || pinned[y])
        continue;
      Node& product = nodes[static_cast<size_t>(yv.producer)];
      if (product.op != OpKind::kMatmul || product.in.size() != 2 || product.out.size() != 1) continue;
      const MatmulAttrs& a = product.attr<MatmulAttrs>();
      if (a.trans_a || a.accumulate) continue;
      if (xv.kind != ValueKind::kActivation || xv.producer < 0 || xv.producer >= yv.producer || pinned[x] ||
          (xv.alias_of != kNoValue && !fused[x]) || xv.shape != yv.shape || xv.dtype != yv.dtype)
        continue;
      bool read_later = false;  // by the product itself or a node after it, other than the sum
      for (int r : readers[x])
        if (r != static_cast<int>(i) && r >= yv.producer) read_later = true;
      if (read_later) continue;
      const ValueId z = sum.out[0];
      product.in.push_back(x);
      product.attr<MatmulAttrs>().accumulate = true;
      product.out[0] = z;
      g.value(z).alias_of = x;
      pinned[x] = 1;
      fused[z] = 1;
      drop[i] = 1;
      break;
    }
  }
  std::vector<Node> out;
  out.reserve(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i)
    if (!drop[i]) out.push_back(std::move(nodes[i]));
  g.set_nodes(std::move(out));
}

}  // namespace tessera::graph
