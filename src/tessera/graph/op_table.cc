// The op table (op_table.h): the families' entries gathered into one array indexed by OpKind, and
// the defaults for what an entry leaves out.
#include "tessera/graph/op_table.h"

#include <array>

#include "tessera/core/error.h"
#include "tessera/graph/op_families.h"
#include "tessera/graph/workspace.h"

namespace tessera::graph {

namespace {

std::array<OpDef, kNumOpKinds> gather() {
  std::array<OpDef, kNumOpKinds> table{};
  std::array<bool, kNumOpKinds> seen{};
  for (auto family : {dense_op_defs, attention_op_defs, vocab_op_defs, collective_op_defs, moe_op_defs,
                      update_op_defs, expert_op_defs})
    for (const OpDef& d : family()) {
      const int i = static_cast<int>(d.kind);
      TESSERA_ASSERT(i >= 0 && i < kNumOpKinds && !seen[i] && d.name != nullptr && d.run != nullptr);
      table[i] = d;
      seen[i] = true;
    }
  for (int i = 0; i < kNumOpKinds; ++i)
    TESSERA_CHECK(seen[i], ErrorKind::kInternal, "the op table has no entry for OpKind {}", i);
  return table;
}

}  // namespace

const OpDef& op_def(OpKind op) {
  static const std::array<OpDef, kNumOpKinds> table = gather();
  const int i = static_cast<int>(op);
  TESSERA_ASSERT(i >= 0 && i < kNumOpKinds);
  return table[i];
}

const char* op_name(OpKind op) {
  return op_def(op).name;
}

const Tensor& RunContext::in(const Node& n, size_t i) const {
  return ws->view(n.in[i]);
}
const Tensor& RunContext::out(const Node& n, size_t i) const {
  return ws->view(n.out[i]);
}

double value_bytes(const Graph& g, ValueId v) {
  const Value& val = g.value(v);
  return static_cast<double>(val.shape.numel()) * static_cast<double>(dtype_size(val.dtype));
}

double rows_bytes(const Graph& g, const Node& n, int64_t buffer_rows, int64_t used_rows) {
  const double share =
      buffer_rows > 0 ? static_cast<double>(used_rows) / static_cast<double>(buffer_rows) : 1;
  double b = 0;
  for (const auto* list : {&n.in, &n.out})
    for (ValueId v : *list) {
      const Shape& s = g.value(v).shape;
      b += value_bytes(g, v) * (s.rank() > 0 && s[0] == buffer_rows ? share : 1.0);
    }
  return b;
}

Tensor heads_view(const Tensor& t, int batch, int seq, int heads, int head_dim) {
  return t.reshape(Shape{batch, seq, heads, head_dim});
}

double node_flops(const Graph& g, const Node& n) {
  const OpDef& d = op_def(n.op);
  return d.flops ? d.flops(g, n) : 0.0;
}

double node_bytes(const Graph& g, const Node& n) {
  const OpDef& d = op_def(n.op);
  if (d.bytes) return d.bytes(g, n);
  double b = 0;
  for (ValueId v : n.in) b += value_bytes(g, v);
  for (ValueId v : n.out) b += value_bytes(g, v);
  return b;
}

NodeTraffic node_traffic(const Graph& g, const Node& n) {
  const OpDef& d = op_def(n.op);
  return d.traffic ? d.traffic(g, n) : NodeTraffic{};
}

}  // namespace tessera::graph
