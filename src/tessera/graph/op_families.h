// The op table's entries by family (op_table.h); op_table.cc gathers them. Internal to graph/.
#pragma once

#include <vector>

#include "tessera/graph/op_table.h"

namespace tessera::graph {

std::vector<OpDef> dense_op_defs();       // op_dense.cc: matmul, add, glu, rms_norm
std::vector<OpDef> attention_op_defs();   // op_attention.cc: rope, attention
std::vector<OpDef> vocab_op_defs();       // op_vocab.cc: embedding, cross_entropy, vocab-parallel forms
std::vector<OpDef> collective_op_defs();  // op_collective.cc: tp_copy, tp_all_reduce
std::vector<OpDef> moe_op_defs();     // op_moe.cc: routing, load balance, dispatch, grouped matmul, combine
std::vector<OpDef> update_op_defs();  // op_update.cc: adamw, sgd
std::vector<OpDef> expert_op_defs();  // op_expert.cc: moe_to_experts, moe_from_experts

}  // namespace tessera::graph
