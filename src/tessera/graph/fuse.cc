// Graph rewrites that fuse nodes (fuse.h).
#include "tessera/graph/fuse.h"

#include <algorithm>
#include <map>
#include <optional>
#include <utility>

#include "tessera/core/error.h"
#include "tessera/ops/gemv.h"

namespace tessera::graph {

namespace {

// Whether `product`, the writer of y, can instead add y to a prior value it reads last: a product
// or grouped (expert) product, neither a weight gradient's nor already accumulating, or a norm's
// backward writing y as its dx (the training graph's residual stream).
bool can_accumulate(const Node& product, ValueId y) {
  switch (product.op) {
    case OpKind::kMatmul: {
      const MatmulAttrs& a = product.attr<MatmulAttrs>();
      return product.in.size() == 2 && product.out.size() == 1 && !a.trans_a && !a.accumulate;
    }
    case OpKind::kGroupedMatmul: {  // an expert product's dx (the rows after the groups keep the prior)
      const GroupedMatmulAttrs& a = product.attr<GroupedMatmulAttrs>();
      return product.in.size() == 3 && product.out.size() == 1 && !a.weight_grad && !a.accumulate;
    }
    case OpKind::kRmsNormBwd:
    case OpKind::kLayerNormBwd:
      return product.out[0] == y && product.in.size() == (product.op == OpKind::kRmsNormBwd ? 4u : 5u) &&
             !product.attr<NormAttrs>().accumulate;
    default:
      return false;
  }
}

void set_accumulate(Node& product) {
  if (product.op == OpKind::kMatmul)
    product.attr<MatmulAttrs>().accumulate = true;
  else if (product.op == OpKind::kGroupedMatmul)
    product.attr<GroupedMatmulAttrs>().accumulate = true;
  else
    product.attr<NormAttrs>().accumulate = true;
}

// fuse_residual_products and fuse_gradient_sums: every sum (of `phase`, or any with nullopt) that
// the rule allows.
void fuse_sums_into_products(Graph& g, std::optional<Phase> phase) {
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
    if (sum.op != OpKind::kAdd || (phase && sum.phase != *phase)) continue;
    for (int side = 0; side < 2; ++side) {
      const ValueId y = sum.in[static_cast<size_t>(side)], x = sum.in[static_cast<size_t>(1 - side)];
      const Value &yv = g.value(y), &xv = g.value(x);
      if (yv.kind != ValueKind::kActivation || yv.producer < 0 || readers[y].size() != 1 || pinned[y])
        continue;
      Node& product = nodes[static_cast<size_t>(yv.producer)];
      if (!can_accumulate(product, y)) continue;
      if (xv.kind != ValueKind::kActivation || xv.producer < 0 || xv.producer >= yv.producer || pinned[x] ||
          (xv.alias_of != kNoValue && !fused[x]) || xv.shape != yv.shape || xv.dtype != yv.dtype)
        continue;
      bool read_later = false;  // by the product itself or a node after it, other than the sum
      for (int r : readers[x])
        if (r != static_cast<int>(i) && r >= yv.producer) read_later = true;
      if (read_later) continue;
      const ValueId z = sum.out[0];
      product.in.push_back(x);
      set_accumulate(product);
      product.out[0] = z;
      g.value(z).alias_of = x;
      g.value(z).producer = yv.producer;  // a later sum in a chain compares it with its own product
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

}  // namespace

void fuse_residual_products(Graph& g) {
  TESSERA_ASSERT(g.inference());
  fuse_sums_into_products(g, std::nullopt);
}

void fuse_gradient_sums(Graph& g) {
  TESSERA_ASSERT(!g.inference());
  fuse_sums_into_products(g, Phase::kBackward);
}

void fuse_shared_input_products(Graph& g) {
  TESSERA_ASSERT(g.inference());
  std::vector<Node> nodes = g.nodes();
  // Candidates by (input, output dtype), in node order.
  std::map<std::pair<ValueId, DType>, std::vector<size_t>> groups;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    if (n.op != OpKind::kMatmul || n.in.size() != 2 || n.out.size() != 1) continue;
    const MatmulAttrs& a = n.attr<MatmulAttrs>();
    const Value &x = g.value(n.in[0]), &w = g.value(n.in[1]);
    if (a.trans_a || !a.trans_b || a.accumulate || x.shape[0] >= kGemvRows) continue;
    if ((w.kind != ValueKind::kParam && w.kind != ValueKind::kParamCompute) || w.producer >= 0) continue;
    groups[{n.in[0], g.value(n.out[0]).dtype}].push_back(i);
  }
  std::vector<char> drop(nodes.size(), 0);
  for (const auto& [key, members] : groups)
    for (size_t b = 0; b + 1 < members.size(); b += ops::kMaxGemvProducts) {
      const size_t e = std::min(members.size(), b + ops::kMaxGemvProducts);
      if (e - b < 2) break;
      Node& first = nodes[members[b]];
      Node group{.op = OpKind::kSharedInputMatmuls,
                 .in = {key.first},
                 .name = first.name,
                 .ckpt_name = first.ckpt_name,
                 .phase = first.phase,
                 .layer = first.layer};
      for (size_t m = b; m < e; ++m) {
        const Node& p = nodes[members[m]];
        group.in.push_back(p.in[1]);
        group.out.push_back(p.out[0]);
        if (m > b) {
          group.name += "+" + p.name;
          drop[members[m]] = 1;
        }
      }
      first = std::move(group);
    }
  std::vector<Node> out;
  out.reserve(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i)
    if (!drop[i]) out.push_back(std::move(nodes[i]));
  g.set_nodes(std::move(out));
}

}  // namespace tessera::graph
