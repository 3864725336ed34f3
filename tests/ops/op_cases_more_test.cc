// Registry entries (testing/op_registry.h) of the lookup, loss, attention, product and update
// families: embedding, cross-entropy, attention, matmul, AdamW and SGD, decode attention, gemv and the
// vocab-parallel embedding and cross-entropy. op_cases_test.cc holds the checks that run them.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tessera/ops/attention.h"
#include "tessera/ops/cross_entropy.h"
#include "tessera/ops/decode_attention.h"
#include "tessera/ops/embedding.h"
#include "tessera/ops/gemv.h"
#include "tessera/ops/matmul.h"
#include "tessera/ops/optimizer.h"
#include "tessera/ops/vocab_parallel.h"
#include "testing/one_node_graph.h"
#include "testing/op_registry.h"

namespace tessera {
namespace {

using testing::Arrays;
using testing::Buffers;
using testing::Dims;
using testing::OpCase;
using testing::to_vector;
using testing::uniform;
using testing::uniform_ints;

const std::vector<double>& at(const Arrays& a, const char* k) {
  return a.f.at(k);
}

// ---- embedding ----------------------------------------------------------------------------------

// table [V, C] looked up by N random ids (with repeats, so the backward's scatter-add sums). The
// forward copies (R = 1); dtable sums the repeats of an id (R = N), k = 8.
OpCase embedding_case() {
  OpCase c{.name = "embedding",
           .dims_doc = "V,N,C",
           .shapes = {{1, 1, 1}, {5, 7, 7}, {13, 16, 33}, {7, 9, 257}},
           .bf16 = true};
  c.reduction = [](const Dims& d) { return d[1]; };
  c.f32_outputs = {"dtable"};
  c.inputs = [](const Dims& d, DType dt, uint64_t s) {
    Arrays a;
    a.f["table"] = uniform(d[0] * d[2], s, dt);
    a.f["dout"] = uniform(d[1] * d[2], s + 1, dt);
    a.i["ids"] = uniform_ints(d[1], s + 2, 0, static_cast<int32_t>(d[0] - 1));
    return a;
  };
  c.reference = [](const Dims& d, const Arrays& in) {
    Arrays o;
    ops::embedding_forward_ref(at(in, "table"), in.i.at("ids"), d[2], o.f["out"]);
    return o;
  };
  c.run = [](const Dims& d, DType dt, const Arrays& in) {
    Buffers b;
    const Tensor& out = b.make(Shape{d[1], d[2]}, dt);
    ops::embedding_forward(b.from(at(in, "table"), Shape{d[0], d[2]}, dt),
                           b.ints(in.i.at("ids"), Shape{d[1]}), out);
    return Arrays{.f = {{"out", to_vector(out)}}};
  };
  c.reference_backward = [](const Dims& d, const Arrays& in) {
    Arrays o;
    o.f["dtable"].assign(d[0] * d[2], 0.0);
    ops::embedding_backward_ref(at(in, "dout"), in.i.at("ids"), d[2], o.f["dtable"]);
    return o;
  };
  c.run_backward = [](const Dims& d, DType dt, const Arrays& in) {
    Buffers b;
    const Tensor& dtable = b.zeros(Shape{d[0], d[2]}, DType::kF32);
    ops::embedding_backward(b.from(at(in, "dout"), Shape{d[1], d[2]}, dt),
                            b.ints(in.i.at("ids"), Shape{d[1]}), dtable);
    return Arrays{.f = {{"dtable", to_vector(dtable)}}};
  };
  c.grad_inputs = {"table"};
  // table [V, C] -> embedding(random ids) -> cross-entropy over the C columns.
  c.graph_shapes = {{5, 8, 6}};
  c.graph = [](const Dims& d) {
    testing::OneNodeGraph b(d[1]);
    const std::vector<int32_t> ids = uniform_ints(d[1], 3, 0, static_cast<int32_t>(d[0] - 1));
    b.feed.inputs["ids"] = ids;
    graph::ValueId table = b.param("table", Shape{d[0], d[2]});
    b.loss(b.g.embedding(table, b.ids, DType::kF32, "embed"), d[2]);
    const std::vector<int32_t> targets = b.feed.inputs.at("targets");
    auto loss = [&](const testing::GraphFeed& f) {
      std::vector<double> out;
      ops::embedding_forward_ref(f.params.at("table"), ids, d[2], out);
      return testing::cross_entropy_mean_ref(out, targets, d[2]);
    };
    testing::expect_graph_gradients(b, loss, 16, std::max(d[1], d[2]));
  };
  return c;
}

// ---- cross-entropy --------------------------------------------------------------------------------

// logits [N, V] in [-4, 4] with the last row's target ignored. lse sums V exps (R = V); k = 16 for
// the exp approximation's few ulps on top of the sum's roundings.
OpCase cross_entropy_case(float z_loss, const char* name) {
  OpCase c{.name = name,
           .dims_doc = "N,V",
           .shapes = {{1, 1}, {3, 7}, {4, 33}, {2, 257}, {2, 2053}},  // 2053: past one 2048-column chunk
           .bf16 = true,
           .k = 16};
  c.reduction = [](const Dims& d) { return d[1]; };
  c.f32_outputs = {"loss", "lse"};
  c.inputs = [](const Dims& d, DType dt, uint64_t s) {
    Arrays a;
    a.f["logits"] = uniform(d[0] * d[1], s, dt, -4, 4);
    a.f["dloss"] = uniform(d[0], s + 1, DType::kF32, 0.1, 1);
    std::vector<int32_t> t = uniform_ints(d[0], s + 2, 0, static_cast<int32_t>(d[1] - 1));
    if (d[0] > 1) t.back() = -1;
    a.i["targets"] = t;
    return a;
  };
  c.reference = [z_loss](const Dims& d, const Arrays& in) {
    Arrays o;
    ops::cross_entropy_forward_ref(at(in, "logits"), in.i.at("targets"), d[1], z_loss, o.f["loss"],
                                   o.f["lse"]);
    return o;
  };
  c.run = [z_loss](const Dims& d, DType dt, const Arrays& in) {
    Buffers b;
    const Tensor &loss = b.make(Shape{d[0]}, DType::kF32), &lse = b.make(Shape{d[0]}, DType::kF32);
    ops::cross_entropy_forward(b.from(at(in, "logits"), Shape{d[0], d[1]}, dt),
                               b.ints(in.i.at("targets"), Shape{d[0]}), loss, lse, z_loss);
    return Arrays{.f = {{"loss", to_vector(loss)}, {"lse", to_vector(lse)}}};
  };
  c.reference_backward = [z_loss](const Dims& d, const Arrays& in) {
    Arrays o;
    ops::cross_entropy_backward_ref(at(in, "logits"), in.i.at("targets"), d[1], z_loss, at(in, "dloss"),
                                    o.f["dlogits"]);
    return o;
  };
  c.run_backward = [z_loss](const Dims& d, DType dt, const Arrays& in) {
    Buffers b;
    const Shape s{d[0], d[1]}, row{d[0]};
    const Tensor &logits = b.from(at(in, "logits"), s, dt), &targets = b.ints(in.i.at("targets"), row);
    const Tensor &loss = b.make(row, DType::kF32), &lse = b.make(row, DType::kF32), &dlogits = b.make(s, dt);
    ops::cross_entropy_forward(logits, targets, loss, lse, z_loss);
    ops::cross_entropy_backward(logits, targets, lse, b.from(at(in, "dloss"), row, DType::kF32), dlogits,
                                z_loss);
    return Arrays{.f = {{"dlogits", to_vector(dlogits)}}};
  };
  c.grad_inputs = {"logits"};
  // logits [N, V] -> the cross-entropy node itself, as the loss.
  c.graph_shapes = {{4, 11}};
  c.graph = [z_loss](const Dims& d) {
    testing::OneNodeGraph b(d[0]);
    b.loss(b.source("logits", d[1], -4, 4), d[1], z_loss);
    const std::vector<int32_t> targets = b.feed.inputs.at("targets");
    auto loss = [&](const testing::GraphFeed& f) {
      return testing::cross_entropy_mean_ref(f.params.at("logits"), targets, d[1], z_loss);
    };
    testing::expect_graph_gradients(b, loss, 16, d[1]);
  };
  return c;
}

// ---- attention ----------------------------------------------------------------------------------

ops::AttentionDims attention_dims(const Dims& d) {
  return {.B = d[0], .T = d[1], .H = d[2], .Hkv = d[3], .D = d[4]};
}

// q [B*T, H*D], k, v [B*T, Hkv*D] -> causal attention -> cross-entropy over the H*D columns.
void attention_graph_check(const Dims& d) {
  const ops::AttentionOptions opt;
  const int64_t n = d[0] * d[1], wq = d[2] * d[4], wkv = d[3] * d[4];
  testing::OneNodeGraph b(n);
  graph::ValueId q = b.source("q", wq, -2, 2), k = b.source("k", wkv, -2, 2), v = b.source("v", wkv);
  const graph::AttentionAttrs shape{.batch = static_cast<int>(d[0]),
                                    .seq = static_cast<int>(d[1]),
                                    .heads = static_cast<int>(d[2]),
                                    .kv_heads = static_cast<int>(d[3]),
                                    .head_dim = static_cast<int>(d[4])};
  // o is the logits themselves: cross-entropy's backward must not write dlogits over o, which
  // attention's backward reads (autodiff.cc gives dlogits its own buffer here).
  b.loss(b.g.attention(q, k, v, graph::kNoValue, shape, "attention"), wq);
  const std::vector<int32_t> targets = b.feed.inputs.at("targets");
  auto loss = [&](const testing::GraphFeed& f) {
    std::vector<double> out, lse;
    ops::attention_ref(attention_dims(d), opt, f.params.at("q"), f.params.at("k"), f.params.at("v"), &out,
                       &lse);
    return testing::cross_entropy_mean_ref(out, targets, wq);
  };
  testing::expect_graph_gradients(b, loss, 16, d[1] + d[4] + wq);
}

// q [B, T, H, D], k, v [B, T, Hkv, D] (GQA where Hkv < H), optionally packed segments. Each
// output sums T probabilities times values after D-term dot products: R = T + D, k = 16 (the exp
// approximation and the online rescaling).
// A tolerance scale from the magnitudes of the terms an output sums, plus the output's mean size
// (as scale_of gives every output), so that elements that cancel to near zero keep the rounding of
// their terms.
std::vector<double> terms_plus_mean(const std::vector<double>& terms, const std::vector<double>& out) {
  double mean = 0;
  for (double x : out) mean += std::abs(x);
  mean /= std::max<size_t>(1, out.size());
  std::vector<double> s(terms.size());
  for (size_t i = 0; i < s.size(); ++i) s[i] = terms[i] + mean;
  return s;
}

OpCase attention_case(ops::AttentionOptions opt, const char* name, bool segmented = false) {
  OpCase c{.name = name,
           .dims_doc = "B,T,H,Hkv,D",
           .shapes = {{1, 1, 1, 1, 1}, {1, 7, 2, 1, 8}, {2, 5, 4, 2, 7}, {1, 33, 2, 2, 16}},
           .bf16 = true,
           .k = 16};
  c.reduction = [](const Dims& d) { return d[1] + d[4]; };
  c.f32_outputs = {"lse"};
  c.inputs = [segmented](const Dims& d, DType dt, uint64_t s) {
    const int64_t nq = d[0] * d[1] * d[2] * d[4], nkv = d[0] * d[1] * d[3] * d[4];
    Arrays a{.f = {{"q", uniform(nq, s, dt, -2, 2)},
                   {"k", uniform(nkv, s + 1, dt, -2, 2)},
                   {"v", uniform(nkv, s + 2, dt)},
                   {"dout", uniform(nq, s + 3, dt)}}};
    if (segmented)  // packed rows: three segments per row, ids b, b + 1, b + 2
      for (int64_t b = 0; b < d[0]; ++b)
        for (int64_t t = 0; t < d[1]; ++t)
          a.i["segment_ids"].push_back(static_cast<int32_t>(b + 3 * t / d[1]));
    return a;
  };
  // The case's options, with segment_ids viewing the inputs' ids when there are any.
  const auto options = [opt](const Dims& d, const Arrays& in) {
    ops::AttentionOptions o = opt;
    if (auto it = in.i.find("segment_ids"); it != in.i.end())
      o.segment_ids = Tensor(const_cast<int32_t*>(it->second.data()), Shape{d[0], d[1]}, DType::kI32);
    return o;
  };
  c.reference = [options](const Dims& d, const Arrays& in) {
    Arrays o;
    ops::attention_ref(attention_dims(d), options(d, in), at(in, "q"), at(in, "k"), at(in, "v"), &o.f["out"],
                       &o.f["lse"]);
    return o;
  };
  const auto run = [options](const Dims& d, DType dt, const Arrays& in, bool backward) {
    Buffers b;
    const Shape sq{d[0], d[1], d[2], d[4]}, skv{d[0], d[1], d[3], d[4]};
    const Tensor &q = b.from(at(in, "q"), sq, dt), &k = b.from(at(in, "k"), skv, dt),
                 &v = b.from(at(in, "v"), skv, dt);
    const Tensor &out = b.make(sq, dt), &lse = b.make(Shape{d[0], d[2], d[1]}, DType::kF32);
    const ops::AttentionOptions o = options(d, in);
    ops::attention_fwd(q, k, v, out, lse, o);
    if (!backward) return Arrays{.f = {{"out", to_vector(out)}, {"lse", to_vector(lse)}}};
    const Tensor &dq = b.make(sq, dt), &dk = b.make(skv, dt), &dv = b.make(skv, dt);
    ops::attention_bwd(b.from(at(in, "dout"), sq, dt), q, k, v, out, lse, dq, dk, dv, o);
    return Arrays{.f = {{"dq", to_vector(dq)}, {"dk", to_vector(dk)}, {"dv", to_vector(dv)}}};
  };
  c.run = [run](const Dims& d, DType dt, const Arrays& in) { return run(d, dt, in, false); };
  c.run_backward = [run](const Dims& d, DType dt, const Arrays& in) { return run(d, dt, in, true); };
  c.reference_backward = [options](const Dims& d, const Arrays& in) {
    Arrays o;
    // dq and dk cancel where a row's probability sits on few keys (short segments, windows): their
    // tolerances scale with the magnitudes of the summed terms, as the norms' dx do.
    std::vector<double> dq_terms, dk_terms;
    ops::attention_bwd_ref(attention_dims(d), options(d, in), at(in, "dout"), at(in, "q"), at(in, "k"),
                           at(in, "v"), &o.f["dq"], &o.f["dk"], &o.f["dv"], &dq_terms, &dk_terms);
    o.f["scale:dq"] = terms_plus_mean(dq_terms, o.f["dq"]);
    o.f["scale:dk"] = terms_plus_mean(dk_terms, o.f["dk"]);
    return o;
  };
  c.grad_inputs = {"q", "k", "v"};
  if (segmented || !opt.causal || opt.sliding_window || opt.logits_soft_cap > 0)
    return c;  // the graph node: causal
  c.graph_shapes = {{2, 3, 2, 1, 4}};
  c.graph = attention_graph_check;
  return c;
}

ops::AttentionOptions window_softcap_options() {
  ops::AttentionOptions o;
  o.causal = false;
  o.sliding_window = 3;
  o.logits_soft_cap = 5.0f;
  return o;
}

// ---- matmul -------------------------------------------------------------------------------------

// x [M, K] -> matmul(x, W [K, N]) -> cross-entropy over the N columns.
void matmul_graph_check(const Dims& d) {
  testing::OneNodeGraph b(d[0]);
  graph::ValueId x = b.source("x", d[2]), w = b.param("w", Shape{d[2], d[1]});
  b.loss(b.g.matmul(x, w, "proj"), d[1]);
  const std::vector<int32_t> targets = b.feed.inputs.at("targets");
  auto loss = [&](const testing::GraphFeed& f) {
    std::vector<double> out(d[0] * d[1]);
    ops::matmul_ref(f.params.at("x").data(), f.params.at("w").data(), out.data(), d[0], d[1], d[2]);
    return testing::cross_entropy_mean_ref(out, targets, d[1]);
  };
  testing::expect_graph_gradients(b, loss, 16, std::max({d[0], d[1], d[2]}));
}

// C [M, N] = op(A) op(B) on oneDNN; R = K forward, and the backward products sum over M or N:
// R = max(M, N, K); k = 8. The backward is the three products matmul.h lists for each layout.
OpCase matmul_case(bool trans_a, bool trans_b, const char* name) {
  OpCase c{.name = name,
           .dims_doc = "M,N,K",
           .shapes = {{1, 1, 1}, {7, 3, 5}, {33, 17, 9}, {5, 7, 257}},
           .bf16 = true};
  c.reduction = [](const Dims& d) { return std::max({d[0], d[1], d[2]}); };
  const ops::MatmulOptions fwd{.trans_a = trans_a, .trans_b = trans_b};
  c.inputs = [](const Dims& d, DType dt, uint64_t s) {
    return Arrays{.f = {{"a", uniform(d[0] * d[2], s, dt)},
                        {"b", uniform(d[2] * d[1], s + 1, dt)},
                        {"dc", uniform(d[0] * d[1], s + 2, dt)}}};
  };
  const auto sa = [trans_a](const Dims& d) { return trans_a ? Shape{d[2], d[0]} : Shape{d[0], d[2]}; };
  const auto sb = [trans_b](const Dims& d) { return trans_b ? Shape{d[1], d[2]} : Shape{d[2], d[1]}; };
  c.reference = [fwd](const Dims& d, const Arrays& in) {
    std::vector<double> out(d[0] * d[1]);
    ops::matmul_ref(at(in, "a").data(), at(in, "b").data(), out.data(), d[0], d[1], d[2], fwd);
    return Arrays{.f = {{"c", out}}};
  };
  c.run = [fwd, sa, sb](const Dims& d, DType dt, const Arrays& in) {
    Buffers b;
    const Tensor& out = b.make(Shape{d[0], d[1]}, dt);
    ops::matmul(b.from(at(in, "a"), sa(d), dt), b.from(at(in, "b"), sb(d), dt), out, fwd);
    return Arrays{.f = {{"c", to_vector(out)}}};
  };
  // Each gradient as a product (x, y, options, rows, cols, inner) of stored operands:
  //   plain    da = dc·bᵀ            db = aᵀ·dc
  //   trans_a  da = b·dcᵀ   [K, M]   db = a·dc
  //   trans_b  da = dc·b             db = dcᵀ·a    [N, K]
  struct Product {
    const char *x, *y;
    ops::MatmulOptions o;
    int rows, cols, inner;  // indices into Dims
  };
  const Product da = trans_a   ? Product{"b", "dc", {.trans_b = true}, 2, 0, 1}
                     : trans_b ? Product{"dc", "b", {}, 0, 2, 1}
                               : Product{"dc", "b", {.trans_b = true}, 0, 2, 1};
  const Product db = trans_a   ? Product{"a", "dc", {}, 2, 1, 0}
                     : trans_b ? Product{"dc", "a", {.trans_a = true}, 1, 2, 0}
                               : Product{"a", "dc", {.trans_a = true}, 2, 1, 0};
  c.reference_backward = [da, db](const Dims& d, const Arrays& in) {
    Arrays o;
    for (auto [name, p] : {std::pair{"da", da}, std::pair{"db", db}}) {
      std::vector<double>& out = o.f[name];
      out.assign(d[p.rows] * d[p.cols], 0.0);
      ops::matmul_ref(at(in, p.x).data(), at(in, p.y).data(), out.data(), d[p.rows], d[p.cols], d[p.inner],
                      p.o);
    }
    return o;
  };
  c.run_backward = [da, db, sa, sb](const Dims& d, DType dt, const Arrays& in) {
    Buffers b;
    std::map<std::string, Tensor> t = {{"a", b.from(at(in, "a"), sa(d), dt)},
                                       {"b", b.from(at(in, "b"), sb(d), dt)},
                                       {"dc", b.from(at(in, "dc"), Shape{d[0], d[1]}, dt)}};
    Arrays o;
    for (auto [name, p] : {std::pair{"da", da}, std::pair{"db", db}}) {
      const Tensor& out = b.zeros(Shape{d[p.rows], d[p.cols]}, dt);
      ops::MatmulOptions opt = p.o;
      opt.accumulate = name[1] == 'b';  // the weight gradient accumulates, as in training
      ops::matmul(t.at(p.x), t.at(p.y), out, opt);
      o.f[name] = to_vector(out);
    }
    return o;
  };
  c.grad_inputs = {"a", "b"};
  if (trans_a || trans_b) return c;
  c.graph_shapes = {{4, 9, 7}};
  c.graph = matmul_graph_check;
  return c;
}

// ---- AdamW --------------------------------------------------------------------------------------

// One step over n parameters at step 3 with weight decay and a gradient scale. R = 1, k = 16: about
// ten f32 operations per element (the bias corrections are formed in double).
OpCase adamw_case() {
  OpCase c{.name = "adamw", .dims_doc = "n", .shapes = {{1}, {7}, {33}, {257}}, .k = 16};
  const ops::AdamWHyperparams hp{.lr = 1e-2, .weight_decay = 0.1, .step = 3, .grad_scale = 0.5};
  c.inputs = [](const Dims& d, DType, uint64_t s) {
    return Arrays{.f = {{"param", uniform(d[0], s, DType::kF32)},
                        {"grad", uniform(d[0], s + 1, DType::kF32)},
                        {"m", uniform(d[0], s + 2, DType::kF32, -0.1, 0.1)},
                        {"v", uniform(d[0], s + 3, DType::kF32, 0, 0.01)}}};
  };
  c.reference = [hp](const Dims&, const Arrays& in) {
    Arrays o{.f = {{"param", at(in, "param")}, {"m", at(in, "m")}, {"v", at(in, "v")}}};
    ops::adamw_update_ref(o.f["param"], at(in, "grad"), o.f["m"], o.f["v"], hp);
    return o;
  };
  c.run = [hp](const Dims& d, DType, const Arrays& in) {
    Buffers b;
    const Shape s{d[0]};
    const Tensor &p = b.from(at(in, "param"), s, DType::kF32), &m = b.from(at(in, "m"), s, DType::kF32),
                 &v = b.from(at(in, "v"), s, DType::kF32);
    ops::adamw_update(p, b.from(at(in, "grad"), s, DType::kF32), m, v, hp);
    return Arrays{.f = {{"param", to_vector(p)}, {"m", to_vector(m)}, {"v", to_vector(v)}}};
  };
  return c;
}

// One SGD step: p - lr * grad_scale * g, R = 1, k = 4 (two products and a difference).
OpCase sgd_case() {
  OpCase c{.name = "sgd", .dims_doc = "n", .shapes = {{1}, {7}, {33}, {257}}, .k = 4};
  const ops::SgdHyperparams hp{.lr = 1e-2, .grad_scale = 0.5};
  c.inputs = [](const Dims& d, DType, uint64_t s) {
    return Arrays{
        .f = {{"param", uniform(d[0], s, DType::kF32)}, {"grad", uniform(d[0], s + 1, DType::kF32)}}};
  };
  c.reference = [hp](const Dims&, const Arrays& in) {
    Arrays o{.f = {{"param", at(in, "param")}}};
    ops::sgd_update_ref(o.f["param"], at(in, "grad"), hp);
    return o;
  };
  c.run = [hp](const Dims& d, DType, const Arrays& in) {
    Buffers b;
    const Tensor& p = b.from(at(in, "param"), Shape{d[0]}, DType::kF32);
    ops::sgd_update(p, b.from(at(in, "grad"), Shape{d[0]}, DType::kF32), hp);
    return Arrays{.f = {{"param", to_vector(p)}}};
  };
  return c;
}

// ---- decode attention ---------------------------------------------------------------------------

// M queries [M, H, D] against caches [S, T, Hkv, D] at random slots and lengths: R = T + D, k = 16
// as for attention.
OpCase decode_attention_case() {
  OpCase c{.name = "decode_attention",
           .dims_doc = "M,H,Hkv,D,S,T",
           .shapes = {{1, 1, 1, 1, 1, 1}, {3, 2, 1, 7, 2, 9}, {2, 4, 2, 33, 3, 17}},
           .bf16 = true,
           .k = 16};
  c.reduction = [](const Dims& d) { return d[5] + d[3]; };
  c.inputs = [](const Dims& d, DType dt, uint64_t s) {
    Arrays a;
    a.f["q"] = uniform(d[0] * d[1] * d[3], s, dt, -2, 2);
    a.f["k"] = uniform(d[4] * d[5] * d[2] * d[3], s + 1, dt, -2, 2);
    a.f["v"] = uniform(d[4] * d[5] * d[2] * d[3], s + 2, dt);
    a.i["slot"] = uniform_ints(d[0], s + 3, 0, static_cast<int32_t>(d[4] - 1));
    a.i["length"] = uniform_ints(d[0], s + 4, 1, static_cast<int32_t>(d[5]));
    return a;
  };
  c.reference = [](const Dims& d, const Arrays& in) {
    Arrays o;
    const ops::DecodeAttentionDims dims{.M = d[0], .H = d[1], .Hkv = d[2], .D = d[3], .S = d[4], .T = d[5]};
    ops::decode_attention_ref(dims, {}, at(in, "q"), at(in, "k"), at(in, "v"), in.i.at("slot"),
                              in.i.at("length"), &o.f["out"]);
    return o;
  };
  c.run = [](const Dims& d, DType dt, const Arrays& in) {
    Buffers b;
    const Shape sq{d[0], d[1], d[3]}, sc{d[4], d[5], d[2], d[3]};
    const Tensor& out = b.make(sq, dt);
    ops::decode_attention(b.from(at(in, "q"), sq, dt), b.from(at(in, "k"), sc, dt),
                          b.from(at(in, "v"), sc, dt), b.ints(in.i.at("slot"), Shape{d[0]}),
                          b.ints(in.i.at("length"), Shape{d[0]}), out);
    return Arrays{.f = {{"out", to_vector(out)}}};
  };
  return c;
}

// ---- gemv ---------------------------------------------------------------------------------------

// y [M, N] = x [M, K] · wᵀ, w [N, K]: R = K, k = 8.
OpCase gemv_case() {
  OpCase c{.name = "gemv",
           .dims_doc = "M,N,K",
           .shapes = {{1, 1, 1}, {3, 7, 33}, {2, 33, 257}, {5, 17, 7}},
           .bf16 = true};
  c.reduction = [](const Dims& d) { return d[2]; };
  c.inputs = [](const Dims& d, DType dt, uint64_t s) {
    return Arrays{.f = {{"x", uniform(d[0] * d[2], s, dt)}, {"w", uniform(d[1] * d[2], s + 1, dt)}}};
  };
  c.reference = [](const Dims& d, const Arrays& in) {
    std::vector<double> y(d[0] * d[1]);
    ops::gemv_ref(at(in, "x").data(), at(in, "w").data(), y.data(), d[0], d[1], d[2]);
    return Arrays{.f = {{"y", y}}};
  };
  c.run = [](const Dims& d, DType dt, const Arrays& in) {
    Buffers b;
    const Tensor& y = b.make(Shape{d[0], d[1]}, dt);
    ops::gemv(b.from(at(in, "x"), Shape{d[0], d[2]}, dt), b.from(at(in, "w"), Shape{d[1], d[2]}, dt), y);
    return Arrays{.f = {{"y", to_vector(y)}}};
  };
  return c;
}

// ---- vocab-parallel ------------------------------------------------------------------------------

// One shard [offset, offset + Vl) of a table of V rows, looked up by N ids over all of [0, V):
// the forward copies or writes 0 (R = 1), the backward sums an id's repeats (R = N), k = 8.
OpCase vocab_embedding_case() {
  OpCase c{.name = "vocab_embedding",
           .dims_doc = "V,offset,Vl,N,C",
           .shapes = {{1, 0, 1, 1, 1}, {13, 4, 5, 7, 7}, {20, 11, 9, 9, 33}, {6, 3, 3, 5, 257}},
           .bf16 = true};
  c.reduction = [](const Dims& d) { return d[3]; };
  c.f32_outputs = {"dtable"};
  c.inputs = [](const Dims& d, DType dt, uint64_t s) {
    Arrays a;
    a.f["table"] = uniform(d[2] * d[4], s, dt);
    a.f["dout"] = uniform(d[3] * d[4], s + 1, dt);
    a.i["ids"] = uniform_ints(d[3], s + 2, 0, static_cast<int32_t>(d[0] - 1));
    return a;
  };
  const auto range = [](const Dims& d) { return ops::VocabShardRange{.offset = d[1], .vocab = d[0]}; };
  c.reference = [](const Dims& d, const Arrays& in) {
    Arrays o;
    ops::vocab_embedding_forward_ref(at(in, "table"), in.i.at("ids"), d[4], d[1], d[2], o.f["out"]);
    return o;
  };
  c.run = [range](const Dims& d, DType dt, const Arrays& in) {
    Buffers b;
    const Tensor& out = b.make(Shape{d[3], d[4]}, dt);
    ops::vocab_embedding_forward(b.from(at(in, "table"), Shape{d[2], d[4]}, dt),
                                 b.ints(in.i.at("ids"), Shape{d[3]}), range(d), out);
    return Arrays{.f = {{"out", to_vector(out)}}};
  };
  c.reference_backward = [](const Dims& d, const Arrays& in) {
    Arrays o;
    o.f["dtable"].assign(d[2] * d[4], 0.0);
    ops::vocab_embedding_backward_ref(at(in, "dout"), in.i.at("ids"), d[4], d[1], d[2], o.f["dtable"]);
    return o;
  };
  c.run_backward = [range](const Dims& d, DType dt, const Arrays& in) {
    Buffers b;
    const Tensor& dtable = b.zeros(Shape{d[2], d[4]}, DType::kF32);
    ops::vocab_embedding_backward(b.from(at(in, "dout"), Shape{d[3], d[4]}, dt),
                                  b.ints(in.i.at("ids"), Shape{d[3]}), range(d), dtable);
    return Arrays{.f = {{"dtable", to_vector(dtable)}}};
  };
  c.grad_inputs = {"table"};
  return c;
}

// The vocab-parallel loss over P shards of the columns (the last one shorter), the all-reduces done
// here in f32 as the executor's communicator does, against cross_entropy's reference on the whole
// logits: vocab_parallel.h promises the same loss, lse and (per shard) dlogits. Tolerances as
// cross_entropy_case.
struct VocabShards {
  int64_t n, vocab, parts, width;  // width: columns per shard (the last may have fewer)
  explicit VocabShards(const Dims& d) : n(d[0]), vocab(d[1]), parts(d[2]), width((d[1] + d[2] - 1) / d[2]) {}
  int64_t offset(int64_t p) const { return p * width; }
  int64_t size(int64_t p) const { return std::min(width, vocab - offset(p)); }
  std::vector<double> columns(const std::vector<double>& x, int64_t p) const {
    std::vector<double> out;
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < size(p); ++j) out.push_back(x[r * vocab + offset(p) + j]);
    return out;
  }
};

// Runs the three forward steps (and with `backward`, each shard's backward); returns loss and lse,
// or dlogits.
Arrays vocab_cross_entropy_run(const Dims& d, DType dt, const Arrays& in, float z_loss, bool backward) {
  const VocabShards v(d);
  Buffers b;
  const Tensor& targets = b.ints(in.i.at("targets"), Shape{v.n});
  std::vector<const Tensor*> logits, lse, stats;
  for (int64_t p = 0; p < v.parts; ++p) {
    logits.push_back(&b.from(v.columns(at(in, "logits"), p), Shape{v.n, v.size(p)}, dt));
    lse.push_back(&b.make(Shape{v.n}, DType::kF32));
    stats.push_back(&b.make(Shape{2, v.n}, DType::kF32));
  }
  const auto all_reduce = [&](const std::vector<const Tensor*>& t, bool max) {
    for (int64_t i = 0; i < t[0]->numel(); ++i) {
      float acc = t[0]->ptr<float>()[i];
      for (size_t p = 1; p < t.size(); ++p)
        acc = max ? std::max(acc, t[p]->ptr<float>()[i]) : acc + t[p]->ptr<float>()[i];
      for (const Tensor* x : t) x->ptr<float>()[i] = acc;
    }
  };
  const auto range = [&](int64_t p) { return ops::VocabShardRange{.offset = v.offset(p), .vocab = v.vocab}; };
  for (int64_t p = 0; p < v.parts; ++p)
    ops::vocab_cross_entropy_partials(*logits[p], targets, range(p), *lse[p], *stats[p]);
  all_reduce(lse, true);
  for (int64_t p = 0; p < v.parts; ++p) ops::vocab_cross_entropy_rescale(*lse[p], *stats[p]);
  all_reduce(stats, false);
  const Tensor& loss = b.make(Shape{v.n}, DType::kF32);
  for (int64_t p = 0; p < v.parts; ++p)
    ops::vocab_cross_entropy_finish(targets, *stats[p], z_loss, *lse[p], loss);
  if (!backward) return Arrays{.f = {{"loss", to_vector(loss)}, {"lse", to_vector(*lse[0])}}};
  const Tensor& dloss = b.from(at(in, "dloss"), Shape{v.n}, DType::kF32);
  std::vector<double> dlogits(v.n * v.vocab);
  for (int64_t p = 0; p < v.parts; ++p) {
    const Tensor& dl = b.make(Shape{v.n, v.size(p)}, dt);
    ops::vocab_cross_entropy_backward(*logits[p], targets, range(p), *lse[p], dloss, dl, z_loss);
    for (int64_t r = 0; r < v.n; ++r)
      for (int64_t j = 0; j < v.size(p); ++j)
        dlogits[r * v.vocab + v.offset(p) + j] = testing::get(dl, r * v.size(p) + j);
  }
  return Arrays{.f = {{"dlogits", dlogits}}};
}

OpCase vocab_cross_entropy_case() {
  const float z_loss = 1e-2f;
  OpCase c = cross_entropy_case(z_loss, "vocab_cross_entropy");
  c.dims_doc = "N,V,shards";
  c.shapes = {{1, 1, 1}, {3, 7, 2}, {4, 33, 3}, {2, 257, 3}, {2, 2053, 2}};
  c.run = [z_loss](const Dims& d, DType dt, const Arrays& in) {
    return vocab_cross_entropy_run(d, dt, in, z_loss, false);
  };
  c.run_backward = [z_loss](const Dims& d, DType dt, const Arrays& in) {
    return vocab_cross_entropy_run(d, dt, in, z_loss, true);
  };
  c.graph = nullptr;  // the graph's vocab-parallel nodes need a tensor-parallel mesh (tests/tp/)
  c.graph_shapes.clear();
  return c;
}

const testing::OpCaseRegistrar kEmbedding(embedding_case());
const testing::OpCaseRegistrar kCrossEntropy(cross_entropy_case(0.0f, "cross_entropy"));
const testing::OpCaseRegistrar kCrossEntropyZ(cross_entropy_case(1e-2f, "cross_entropy_z_loss"));
const testing::OpCaseRegistrar kAttention(attention_case({}, "attention_causal"));
const testing::OpCaseRegistrar kAttentionWindow(attention_case(window_softcap_options(),
                                                               "attention_window_softcap"));
const testing::OpCaseRegistrar kAttentionSegments(attention_case({}, "attention_segments", true));
const testing::OpCaseRegistrar kMatmul(matmul_case(false, false, "matmul"));
const testing::OpCaseRegistrar kMatmulTa(matmul_case(true, false, "matmul_trans_a"));
const testing::OpCaseRegistrar kMatmulTb(matmul_case(false, true, "matmul_trans_b"));
const testing::OpCaseRegistrar kAdamW(adamw_case());
const testing::OpCaseRegistrar kSgd(sgd_case());
const testing::OpCaseRegistrar kDecodeAttention(decode_attention_case());
const testing::OpCaseRegistrar kGemv(gemv_case());
const testing::OpCaseRegistrar kVocabEmbedding(vocab_embedding_case());
const testing::OpCaseRegistrar kVocabCrossEntropy(vocab_cross_entropy_case());

}  // namespace
}  // namespace tessera
