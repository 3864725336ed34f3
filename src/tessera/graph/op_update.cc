// The optimizer updates of the op table (op_table.h): AdamW and SGD over this rank's pieces of a
// parameter (the workspace's opt views: the whole tensors on one device), writing the compute copy
// when there is one. The executor sets the step's hyperparameters and gradient scale first.
#include "tessera/graph/op_families.h"
#include "tessera/graph/workspace.h"
#include "tessera/ops/optimizer.h"

namespace tessera::graph {

namespace {

// in: param grad m v; out: [compute copy]
void adamw_run(const RunContext& c, const Node& n) {
  ops::AdamWHyperparams hp = c.adamw;
  if (!c.graph->value(n.in[0]).weight_decay) hp.weight_decay = 0;
  hp.grad_scale = c.grad_scale;
  const Workspace& w = *c.ws;
  ops::adamw_update(w.opt_view(n.in[0]), w.opt_view(n.in[1]), w.opt_view(n.in[2]), w.opt_view(n.in[3]), hp,
                    n.out.empty() ? Tensor() : w.opt_view(n.out[0]));
}

// in: param grad; out: [compute copy]
void sgd_run(const RunContext& c, const Node& n) {
  const ops::SgdHyperparams hp{.lr = c.sgd_lr, .grad_scale = c.grad_scale};
  const Workspace& w = *c.ws;
  ops::sgd_update(w.opt_view(n.in[0]), w.opt_view(n.in[1]), hp,
                  n.out.empty() ? Tensor() : w.opt_view(n.out[0]));
}

}  // namespace

std::vector<OpDef> update_op_defs() {
  return {
      {.kind = OpKind::kAdamW, .name = "adamw", .run = adamw_run},
      {.kind = OpKind::kSgd, .name = "sgd", .run = sgd_run},
  };
}

}  // namespace tessera::graph
