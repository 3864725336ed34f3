// The registry-driven op tests: every OpCase in testing/op_registry.h becomes one parameterised
// test per check ("OpCases/OpCase.Check/<op>_<check>"), and this file registers the entries of the
// elementwise and normalisation families (rmsnorm, layernorm, rope, activations, glu);
// op_cases_more_test.cc registers the rest. Adding an op adds one entry; see docs/architecture.md
// "Testing an op". The hand-written tests beside this file keep their specific regression cases.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "tessera/ops/activation.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/norm.h"
#include "tessera/ops/rope.h"
#include "testing/one_node_graph.h"
#include "testing/op_registry.h"

namespace tessera {
namespace {

using testing::Arrays;
using testing::Buffers;
using testing::Check;
using testing::Dims;
using testing::OpCase;
using testing::to_vector;
using testing::uniform;

// ---- the checks ---------------------------------------------------------------------------------

struct CaseCheck {
  const OpCase* c;
  Check check;
};

const char* check_name(Check c) {
  switch (c) {
    case Check::kForwardF32:
      return "forward_f32";
    case Check::kForwardBf16:
      return "forward_bf16";
    case Check::kBackward:
      return "backward";
    case Check::kReferenceGradient:
      return "reference_gradient";
    case Check::kIsaAgreement:
      return "isa_agreement";
    case Check::kGraph:
      return "graph";
  }
  return "?";
}

// How gtest prints a failing test's parameter.
void PrintTo(const CaseCheck& p, std::ostream* os) {
  *os << p.c->name << " " << check_name(p.check);
}

std::vector<CaseCheck> all_case_checks() {
  std::vector<CaseCheck> out;
  for (const OpCase& c : testing::op_registry())
    for (Check k : {Check::kForwardF32, Check::kForwardBf16, Check::kBackward, Check::kReferenceGradient,
                    Check::kIsaAgreement, Check::kGraph})
      if (c.has(k)) out.push_back({&c, k});
  return out;
}

std::string shape_trace(const OpCase& c, const Dims& d, DType dt) {
  std::string s = c.name + " " + c.dims_doc + "=";
  for (size_t i = 0; i < d.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(d[i]);
  }
  s += ' ';
  s += dtype_name(dt);
  return s;
}

void check_forward(const OpCase& c, DType dt) {
  for (const Dims& d : c.shapes) {
    SCOPED_TRACE(shape_trace(c, d, dt));
    const Arrays in = c.inputs(d, dt, 17);
    const Arrays ref = c.reference(d, in);
    testing::for_each_isa([&] { testing::expect_outputs_close(c, d, dt, c.run(d, dt, in), ref, "forward"); });
  }
}

void check_backward(const OpCase& c) {
  for (const Dims& d : c.shapes) {
    SCOPED_TRACE(shape_trace(c, d, DType::kF32));
    const Arrays in = c.inputs(d, DType::kF32, 23);
    const Arrays ref = c.reference_backward(d, in);
    testing::for_each_isa([&] {
      testing::expect_outputs_close(c, d, DType::kF32, c.run_backward(d, DType::kF32, in), ref, "backward");
    });
  }
}

// Every ISA for_each_isa runs against the first one it runs, within the reference tolerance
// (each is within it of the reference), forward and backward.
void expect_same_as(const OpCase& c, const Dims& d, const Arrays& got, const Arrays& first, const Arrays& ref,
                    const char* what) {
  for (const auto& [name, v] : ref.f) {
    if (name.starts_with("scale:")) continue;
    EXPECT_TRUE(
        testing::within(got.f.at(name), first.f.at(name), testing::tolerance(c, d, DType::kF32, ref, name)))
        << what << " output " << name << " against the first ISA's";
  }
}

void check_isa_agreement(const OpCase& c) {
  for (const Dims& d : c.shapes) {
    SCOPED_TRACE(shape_trace(c, d, DType::kF32));
    const Arrays in = c.inputs(d, DType::kF32, 29);
    const Arrays ref = c.reference(d, in);
    const Arrays gref = c.run_backward ? c.reference_backward(d, in) : Arrays{};
    std::optional<Arrays> first, first_grad;
    testing::for_each_isa([&] {
      const Arrays out = c.run(d, DType::kF32, in);
      if (!first) first = out;
      expect_same_as(c, d, out, *first, ref, "forward");
      if (!c.run_backward) return;
      const Arrays grad = c.run_backward(d, DType::kF32, in);
      if (!first_grad) first_grad = grad;
      expect_same_as(c, d, grad, *first_grad, gref, "backward");
    });
  }
}

class OpCaseTest : public ::testing::TestWithParam<CaseCheck> {};

TEST_P(OpCaseTest, Check) {
  const OpCase& c = *GetParam().c;
  switch (GetParam().check) {
    case Check::kForwardF32:
      return check_forward(c, DType::kF32);
    case Check::kForwardBf16:
      return check_forward(c, DType::kBF16);
    case Check::kBackward:
      return check_backward(c);
    case Check::kReferenceGradient:
      for (const Dims& d : c.shapes) {
        SCOPED_TRACE(shape_trace(c, d, DType::kF32));
        testing::expect_reference_gradient(c, d, c.inputs(d, DType::kF32, 31));
      }
      return;
    case Check::kIsaAgreement:
      return check_isa_agreement(c);
    case Check::kGraph:
      for (const Dims& d : c.graph_shapes) {
        SCOPED_TRACE(shape_trace(c, d, DType::kF32));
        c.graph(d);
      }
      return;
  }
}

INSTANTIATE_TEST_SUITE_P(OpCases, OpCaseTest, ::testing::ValuesIn(all_case_checks()),
                         [](const ::testing::TestParamInfo<CaseCheck>& p) {
                           return p.param.c->name + "_" + check_name(p.param.check);
                         });

// ---- entries ----------------------------------------------------------------------------------

const std::vector<double>& at(const Arrays& a, const char* k) {
  return a.f.at(k);
}

constexpr double kNormEps = 1e-5;

// The terms a norm's dx cancels (its error is relative to them, not to the small result): with
// g = dy * gamma and xhat the normalised x, dx = rstd (g [- mean g] - xhat mean(g xhat)), so the
// scale is rstd (|g| [+ mean |g|] + |xhat| mean |g xhat|). At C = 1 the exact dx is ~0 (or 0).
std::vector<double> norm_dx_terms(const Dims& d, const Arrays& in, bool centred) {
  const std::vector<double>&x = at(in, "x"), &gamma = at(in, "gamma"), &dy = at(in, "dy");
  std::vector<double> s(x.size());
  for (int64_t r = 0; r < d[0]; ++r) {
    const double* xr = &x[r * d[1]];
    double mean = 0, var = 0, mean_g = 0, mean_gx = 0;
    if (centred)
      for (int64_t j = 0; j < d[1]; ++j) mean += xr[j] / d[1];
    for (int64_t j = 0; j < d[1]; ++j) var += (xr[j] - mean) * (xr[j] - mean) / d[1];
    const double rstd = 1 / std::sqrt(var + kNormEps);
    for (int64_t j = 0; j < d[1]; ++j) {
      const double g = std::abs(dy[r * d[1] + j] * gamma[j]);
      mean_g += g / d[1];
      mean_gx += g * std::abs(xr[j] - mean) * rstd / d[1];
    }
    for (int64_t j = 0; j < d[1]; ++j)
      s[r * d[1] + j] = rstd * (std::abs(dy[r * d[1] + j] * gamma[j]) + (centred ? mean_g : 0) +
                                std::abs(xr[j] - mean) * rstd * mean_gx);
  }
  return s;
}

// RMSNorm over [N, C]. k = 8: a row's sum of squares (R = C terms), rstd's rsqrt and the two
// products of y; dgamma sums over N rows, so R = max(N, C).
OpCase rmsnorm_case() {
  OpCase c{.name = "rmsnorm", .dims_doc = "N,C", .shapes = {{1, 1}, {3, 7}, {4, 33}, {2, 257}}, .bf16 = true};
  c.reduction = [](const Dims& d) { return std::max(d[0], d[1]); };
  c.f32_outputs = {"rstd", "dgamma"};
  c.inputs = [](const Dims& d, DType dt, uint64_t s) {
    Arrays a;
    a.f["x"] = uniform(d[0] * d[1], s, dt, -2, 2);
    a.f["gamma"] = uniform(d[1], s + 1, DType::kF32, 0.5, 1.5);
    a.f["dy"] = uniform(d[0] * d[1], s + 2, dt);
    return a;
  };
  c.reference = [](const Dims& d, const Arrays& in) {
    Arrays o;
    o.f["y"].resize(d[0] * d[1]);
    o.f["rstd"].resize(d[0]);
    ops::rmsnorm_fwd_ref(at(in, "x").data(), at(in, "gamma").data(), kNormEps, d[0], d[1], o.f["y"].data(),
                         o.f["rstd"].data());
    return o;
  };
  c.run = [](const Dims& d, DType dt, const Arrays& in) {
    Buffers b;
    const Tensor &y = b.make(Shape{d[0], d[1]}, dt), &rstd = b.make(Shape{d[0]}, DType::kF32);
    ops::rmsnorm_fwd(b.from(at(in, "x"), Shape{d[0], d[1]}, dt),
                     b.from(at(in, "gamma"), Shape{d[1]}, DType::kF32), static_cast<float>(kNormEps), y,
                     rstd);
    return Arrays{.f = {{"y", to_vector(y)}, {"rstd", to_vector(rstd)}}};
  };
  c.reference_backward = [](const Dims& d, const Arrays& in) {
    Arrays o;
    o.f["dx"].resize(d[0] * d[1]);
    o.f["dgamma"].resize(d[1]);
    ops::rmsnorm_bwd_ref(at(in, "x").data(), at(in, "gamma").data(), kNormEps, at(in, "dy").data(), d[0],
                         d[1], o.f["dx"].data(), o.f["dgamma"].data());
    o.f["scale:dx"] = norm_dx_terms(d, in, false);
    return o;
  };
  c.run_backward = [](const Dims& d, DType dt, const Arrays& in) {
    Buffers b;
    const Shape s{d[0], d[1]};
    const Tensor &x = b.from(at(in, "x"), s, dt), &gamma = b.from(at(in, "gamma"), Shape{d[1]}, DType::kF32);
    const Tensor &y = b.make(s, dt), &rstd = b.make(Shape{d[0]}, DType::kF32), &dx = b.make(s, dt);
    const Tensor& dgamma = b.zeros(Shape{d[1]}, DType::kF32);
    ops::rmsnorm_fwd(x, gamma, static_cast<float>(kNormEps), y, rstd);
    ops::rmsnorm_bwd(x, gamma, rstd, b.from(at(in, "dy"), s, dt), dx, dgamma);
    return Arrays{.f = {{"dx", to_vector(dx)}, {"dgamma", to_vector(dgamma)}}};
  };
  c.grad_inputs = {"x", "gamma"};
  // x -> rms_norm(x, gamma) -> cross-entropy over the C columns.
  c.graph_shapes = {{5, 7}, {3, 33}};
  c.graph = [](const Dims& d) {
    testing::OneNodeGraph b(d[0]);
    graph::ValueId x = b.source("x", d[1], -2, 2);
    graph::ValueId gamma = b.param("gamma", Shape{d[1]}, 0.5, 1.5);
    b.loss(b.g.rms_norm(x, gamma, static_cast<float>(kNormEps), "norm"), d[1]);
    const std::vector<int32_t> targets = b.feed.inputs.at("targets");
    auto loss = [&](const testing::GraphFeed& f) {
      std::vector<double> y(d[0] * d[1]), rstd(d[0]);
      ops::rmsnorm_fwd_ref(f.params.at("x").data(), f.params.at("gamma").data(), kNormEps, d[0], d[1],
                           y.data(), rstd.data());
      return testing::cross_entropy_mean_ref(y, targets, d[1]);
    };
    testing::expect_graph_gradients(b, loss, 16, std::max(d[0], d[1]));
  };
  return c;
}

// LayerNorm with bias over [N, C], x in [-1, 3] (mean ~1, so the centring matters). k = 16: the
// mean and the variance are two sums of C terms and the variance sees the mean's error.
OpCase layernorm_case() {
  OpCase c{
      .name = "layernorm", .dims_doc = "N,C", .shapes = {{1, 1}, {3, 7}, {4, 33}, {2, 257}}, .bf16 = true};
  c.k = 16;
  c.reduction = [](const Dims& d) { return std::max(d[0], d[1]); };
  c.f32_outputs = {"mean", "rstd", "dgamma", "dbeta"};
  c.inputs = [](const Dims& d, DType dt, uint64_t s) {
    Arrays a;
    a.f["x"] = uniform(d[0] * d[1], s, dt, -1, 3);
    a.f["gamma"] = uniform(d[1], s + 1, DType::kF32, 0.5, 1.5);
    a.f["beta"] = uniform(d[1], s + 2, DType::kF32, -0.5, 0.5);
    a.f["dy"] = uniform(d[0] * d[1], s + 3, dt);
    return a;
  };
  c.reference = [](const Dims& d, const Arrays& in) {
    Arrays o;
    o.f["y"].resize(d[0] * d[1]);
    o.f["mean"].resize(d[0]);
    o.f["rstd"].resize(d[0]);
    ops::layernorm_fwd_ref(at(in, "x").data(), at(in, "gamma").data(), at(in, "beta").data(), kNormEps, d[0],
                           d[1], o.f["y"].data(), o.f["mean"].data(), o.f["rstd"].data());
    return o;
  };
  c.run = [](const Dims& d, DType dt, const Arrays& in) {
    Buffers b;
    const Shape s{d[0], d[1]}, row{d[0]}, col{d[1]};
    const Tensor &y = b.make(s, dt), &mean = b.make(row, DType::kF32), &rstd = b.make(row, DType::kF32);
    ops::layernorm_fwd(b.from(at(in, "x"), s, dt), b.from(at(in, "gamma"), col, DType::kF32),
                       b.from(at(in, "beta"), col, DType::kF32), static_cast<float>(kNormEps), y, mean, rstd);
    return Arrays{.f = {{"y", to_vector(y)}, {"mean", to_vector(mean)}, {"rstd", to_vector(rstd)}}};
  };
  c.reference_backward = [](const Dims& d, const Arrays& in) {
    Arrays o;
    o.f["dx"].resize(d[0] * d[1]);
    o.f["dgamma"].resize(d[1]);
    o.f["dbeta"].resize(d[1]);
    ops::layernorm_bwd_ref(at(in, "x").data(), at(in, "gamma").data(), kNormEps, at(in, "dy").data(), d[0],
                           d[1], o.f["dx"].data(), o.f["dgamma"].data(), o.f["dbeta"].data());
    o.f["scale:dx"] = norm_dx_terms(d, in, true);
    return o;
  };
  c.run_backward = [](const Dims& d, DType dt, const Arrays& in) {
    Buffers b;
    const Shape s{d[0], d[1]}, row{d[0]}, col{d[1]};
    const Tensor &x = b.from(at(in, "x"), s, dt), &gamma = b.from(at(in, "gamma"), col, DType::kF32);
    const Tensor &y = b.make(s, dt), &mean = b.make(row, DType::kF32), &rstd = b.make(row, DType::kF32);
    const Tensor &dx = b.make(s, dt), &dgamma = b.zeros(col, DType::kF32), &dbeta = b.zeros(col, DType::kF32);
    ops::layernorm_fwd(x, gamma, b.from(at(in, "beta"), col, DType::kF32), static_cast<float>(kNormEps), y,
                       mean, rstd);
    ops::layernorm_bwd(x, gamma, mean, rstd, b.from(at(in, "dy"), s, dt), dx, dgamma, dbeta);
    return Arrays{.f = {{"dx", to_vector(dx)}, {"dgamma", to_vector(dgamma)}, {"dbeta", to_vector(dbeta)}}};
  };
  c.grad_inputs = {"x", "gamma", "beta"};
  // x -> layer_norm(x, gamma, beta) -> cross-entropy over the C columns.
  c.graph_shapes = {{5, 7}, {3, 33}};
  c.graph = [](const Dims& d) {
    testing::OneNodeGraph b(d[0]);
    graph::ValueId x = b.source("x", d[1], -1, 3);
    graph::ValueId gamma = b.param("gamma", Shape{d[1]}, 0.5, 1.5);
    graph::ValueId beta = b.param("beta", Shape{d[1]}, -0.5, 0.5);
    b.loss(b.g.layer_norm(x, gamma, beta, static_cast<float>(kNormEps), "norm"), d[1]);
    const std::vector<int32_t> targets = b.feed.inputs.at("targets");
    auto loss = [&](const testing::GraphFeed& f) {
      std::vector<double> y(d[0] * d[1]), mean(d[0]), rstd(d[0]);
      ops::layernorm_fwd_ref(f.params.at("x").data(), f.params.at("gamma").data(), f.params.at("beta").data(),
                             kNormEps, d[0], d[1], y.data(), mean.data(), rstd.data());
      return testing::cross_entropy_mean_ref(y, targets, d[1]);
    };
    testing::expect_graph_gradients(b, loss, 16, std::max(d[0], d[1]));
  };
  return c;
}

// y = x + bias over [N, C]: the forward is one add (R = 1); dbias sums N rows (R = N), in double.
OpCase bias_case() {
  OpCase c{
      .name = "bias_add", .dims_doc = "N,C", .shapes = {{1, 1}, {3, 7}, {4, 33}, {9, 257}}, .bf16 = true};
  c.reduction = [](const Dims& d) { return d[0]; };
  c.f32_outputs = {"dbias"};
  c.inputs = [](const Dims& d, DType dt, uint64_t s) {
    Arrays a;
    a.f["x"] = uniform(d[0] * d[1], s, dt);
    a.f["bias"] = uniform(d[1], s + 1, DType::kF32);
    a.f["dy"] = uniform(d[0] * d[1], s + 2, dt);
    return a;
  };
  c.reference = [](const Dims& d, const Arrays& in) {
    Arrays o;
    o.f["y"].resize(d[0] * d[1]);
    ops::bias_add_ref(at(in, "x").data(), at(in, "bias").data(), o.f["y"].data(), d[0], d[1]);
    return o;
  };
  c.run = [](const Dims& d, DType dt, const Arrays& in) {
    Buffers b;
    const Tensor& y = b.make(Shape{d[0], d[1]}, dt);
    ops::bias_add(b.from(at(in, "x"), Shape{d[0], d[1]}, dt),
                  b.from(at(in, "bias"), Shape{d[1]}, DType::kF32), y);
    return Arrays{.f = {{"y", to_vector(y)}}};
  };
  c.reference_backward = [](const Dims& d, const Arrays& in) {
    Arrays o;
    o.f["dbias"].assign(d[1], 0.0);
    ops::bias_grad_ref(at(in, "dy").data(), o.f["dbias"].data(), d[0], d[1]);
    return o;
  };
  c.run_backward = [](const Dims& d, DType dt, const Arrays& in) {
    Buffers b;
    const Tensor& dbias = b.zeros(Shape{d[1]}, DType::kF32);
    ops::bias_grad(b.from(at(in, "dy"), Shape{d[0], d[1]}, dt), dbias);
    return Arrays{.f = {{"dbias", to_vector(dbias)}}};
  };
  c.grad_inputs = {"bias"};
  // x -> bias_add(x, bias) -> cross-entropy over the C columns.
  c.graph_shapes = {{5, 7}, {3, 33}};
  c.graph = [](const Dims& d) {
    testing::OneNodeGraph b(d[0]);
    graph::ValueId x = b.source("x", d[1]);
    graph::ValueId bias = b.param("bias", Shape{d[1]});
    b.loss(b.g.bias_add(x, bias, "bias"), d[1]);
    const std::vector<int32_t> targets = b.feed.inputs.at("targets");
    auto loss = [&](const testing::GraphFeed& f) {
      std::vector<double> y(d[0] * d[1]);
      ops::bias_add_ref(f.params.at("x").data(), f.params.at("bias").data(), y.data(), d[0], d[1]);
      return testing::cross_entropy_mean_ref(y, targets, d[1]);
    };
    testing::expect_graph_gradients(b, loss, 16, std::max(d[0], d[1]));
  };
  return c;
}

// RoPE over [B, T, H, D] with random positions in a 64-row table. R = 1, k = 8: each output is
// x_a cos - x_b sin from correctly rounded table entries (two products and a sum).
OpCase rope_case(ops::RopeLayout layout, const char* name) {
  OpCase c{.name = name,
           .dims_doc = "B,T,H,D",
           .shapes = {{1, 1, 1, 2}, {2, 3, 2, 14}, {1, 5, 3, 66}, {1, 2, 1, 514}},
           .bf16 = true};
  const auto config = [](const Dims& d) {
    return ops::RopeConfig{.max_timescale = 10000.0, .head_dim = d[3], .max_positions = 64};
  };
  c.inputs = [](const Dims& d, DType dt, uint64_t s) {
    Arrays a;
    const int64_t n = d[0] * d[1] * d[2] * d[3];
    a.f["x"] = uniform(n, s, dt);
    a.f["dy"] = uniform(n, s + 1, dt);
    a.i["positions"] = testing::uniform_ints(d[0] * d[1], s + 2, 0, 63);
    return a;
  };
  const auto ref = [config, layout](const Dims& d, const std::vector<double>& x,
                                    const std::vector<int32_t>& pos, bool inverse) {
    std::vector<double> y(x.size());
    ops::rope_ref(config(d), layout, inverse, x.data(), pos.data(), d[0] * d[1], d[2], y.data());
    return y;
  };
  const auto run = [config, layout](const Dims& d, DType dt, const std::vector<double>& x,
                                    const std::vector<int32_t>& pos, bool inverse) {
    Buffers b;
    const Shape s{d[0], d[1], d[2], d[3]};
    const ops::RopeTable table(config(d));
    const Tensor &in = b.from(x, s, dt), &p = b.ints(pos, Shape{d[0], d[1]}), &out = b.make(s, dt);
    if (inverse)
      ops::rope_bwd(in, p, table, layout, out);
    else
      ops::rope_fwd(in, p, table, layout, out);
    return to_vector(out);
  };
  c.reference = [ref](const Dims& d, const Arrays& in) {
    return Arrays{.f = {{"y", ref(d, at(in, "x"), in.i.at("positions"), false)}}};
  };
  c.run = [run](const Dims& d, DType dt, const Arrays& in) {
    return Arrays{.f = {{"y", run(d, dt, at(in, "x"), in.i.at("positions"), false)}}};
  };
  c.reference_backward = [ref](const Dims& d, const Arrays& in) {
    return Arrays{.f = {{"dx", ref(d, at(in, "dy"), in.i.at("positions"), true)}}};
  };
  c.run_backward = [run](const Dims& d, DType dt, const Arrays& in) {
    return Arrays{.f = {{"dx", run(d, dt, at(in, "dy"), in.i.at("positions"), true)}}};
  };
  c.grad_inputs = {"x"};
  if (layout != ops::RopeLayout::kRotateHalf) return c;  // the graph's rope node rotates halves
  // x [B*T, H*D] -> rope -> cross-entropy over the H*D columns.
  c.graph_shapes = {{2, 3, 2, 6}};
  c.graph = [config, ref](const Dims& d) {
    const int64_t n = d[0] * d[1], w = d[2] * d[3];
    testing::OneNodeGraph b(n);
    graph::ValueId x = b.source("x", w);
    const std::vector<int32_t> pos = testing::uniform_ints(n, 5, 0, 63);
    graph::ValueId p = b.int_input("positions", Shape{d[0], d[1]}, pos);
    const auto i = [](int64_t v) { return static_cast<int>(v); };
    b.loss(b.g.rope(x, p, i(d[0]), i(d[1]), i(d[2]), i(d[3]), "rope"), w);
    const std::vector<int32_t> targets = b.feed.inputs.at("targets");
    auto loss = [&](const testing::GraphFeed& f) {
      return testing::cross_entropy_mean_ref(ref(d, f.params.at("x"), pos, false), targets, w);
    };
    const ops::RopeConfig rc = config(d);
    testing::expect_graph_gradients(b, loss, 16, w, &rc);
  };
  return c;
}

// act(x) over [N, F], x in [-4, 4]. R = 1, k = 16: the exp/tanh/erf approximations are good to a
// few f32 ulps, which the rounding of their argument (|x| <= 4 through exp) amplifies about 4x.
OpCase act_case(ops::Activation act) {
  OpCase c{.name = "act_" + std::string(ops::activation_name(act)),
           .dims_doc = "N,F",
           .shapes = {{1, 1}, {3, 7}, {2, 33}, {1, 257}},
           .bf16 = true,
           .k = 16};
  c.inputs = [](const Dims& d, DType dt, uint64_t s) {
    return Arrays{.f = {{"x", uniform(d[0] * d[1], s, dt, -4, 4)}, {"dy", uniform(d[0] * d[1], s + 1, dt)}}};
  };
  c.reference = [act](const Dims&, const Arrays& in) {
    std::vector<double> y(at(in, "x").size());
    ops::act_fwd_ref(act, at(in, "x").data(), y.data(), static_cast<int64_t>(y.size()));
    return Arrays{.f = {{"y", y}}};
  };
  c.run = [act](const Dims& d, DType dt, const Arrays& in) {
    Buffers b;
    const Tensor& y = b.make(Shape{d[0], d[1]}, dt);
    ops::act_fwd(act, b.from(at(in, "x"), Shape{d[0], d[1]}, dt), y);
    return Arrays{.f = {{"y", to_vector(y)}}};
  };
  c.reference_backward = [act](const Dims&, const Arrays& in) {
    std::vector<double> dx(at(in, "x").size());
    ops::act_bwd_ref(act, at(in, "x").data(), at(in, "dy").data(), dx.data(),
                     static_cast<int64_t>(dx.size()));
    return Arrays{.f = {{"dx", dx}}};
  };
  c.run_backward = [act](const Dims& d, DType dt, const Arrays& in) {
    Buffers b;
    const Shape s{d[0], d[1]};
    const Tensor& dx = b.make(s, dt);
    ops::act_bwd(act, b.from(at(in, "x"), s, dt), b.from(at(in, "dy"), s, dt), dx);
    return Arrays{.f = {{"dx", to_vector(dx)}}};
  };
  c.grad_inputs = {"x"};
  // x -> activation(x) -> cross-entropy over the F columns.
  c.graph_shapes = {{4, 9}};
  c.graph = [act](const Dims& d) {
    testing::OneNodeGraph b(d[0]);
    graph::ValueId x = b.source("x", d[1], -4, 4);
    b.loss(b.g.activation(static_cast<int>(act), x, "act", "mlpwi"), d[1]);
    const std::vector<int32_t> targets = b.feed.inputs.at("targets");
    auto loss = [&](const testing::GraphFeed& f) {
      std::vector<double> y(d[0] * d[1]);
      ops::act_fwd_ref(act, f.params.at("x").data(), y.data(), d[0] * d[1]);
      return testing::cross_entropy_mean_ref(y, targets, d[1]);
    };
    testing::expect_graph_gradients(b, loss, 16, d[1]);
  };
  return c;
}

// act(gate) * up over [N, F]; tolerances as act_case (one more product).
OpCase glu_case(ops::Activation act) {
  OpCase c = act_case(act);
  c.name = "glu_" + std::string(ops::activation_name(act));
  c.inputs = [](const Dims& d, DType dt, uint64_t s) {
    const int64_t n = d[0] * d[1];
    return Arrays{.f = {{"gate", uniform(n, s, dt, -4, 4)},
                        {"up", uniform(n, s + 1, dt, -2, 2)},
                        {"dout", uniform(n, s + 2, dt)}}};
  };
  const auto ref = [act](const std::vector<double>& gate, const std::vector<double>& up) {
    std::vector<double> out(gate.size());
    ops::glu_fwd_ref(act, gate.data(), up.data(), out.data(), static_cast<int64_t>(out.size()));
    return out;
  };
  c.reference = [ref](const Dims&, const Arrays& in) {
    return Arrays{.f = {{"out", ref(at(in, "gate"), at(in, "up"))}}};
  };
  c.run = [act](const Dims& d, DType dt, const Arrays& in) {
    Buffers b;
    const Shape s{d[0], d[1]};
    const Tensor& out = b.make(s, dt);
    ops::glu_fwd(act, b.from(at(in, "gate"), s, dt), b.from(at(in, "up"), s, dt), out);
    return Arrays{.f = {{"out", to_vector(out)}}};
  };
  c.reference_backward = [act](const Dims&, const Arrays& in) {
    const size_t n = at(in, "gate").size();
    std::vector<double> dgate(n), dup(n);
    ops::glu_bwd_ref(act, at(in, "gate").data(), at(in, "up").data(), at(in, "dout").data(), dgate.data(),
                     dup.data(), static_cast<int64_t>(n));
    return Arrays{.f = {{"dgate", dgate}, {"dup", dup}}};
  };
  c.run_backward = [act](const Dims& d, DType dt, const Arrays& in) {
    Buffers b;
    const Shape s{d[0], d[1]};
    const Tensor &dgate = b.make(s, dt), &dup = b.make(s, dt);
    ops::glu_bwd(act, b.from(at(in, "gate"), s, dt), b.from(at(in, "up"), s, dt),
                 b.from(at(in, "dout"), s, dt), dgate, dup);
    return Arrays{.f = {{"dgate", to_vector(dgate)}, {"dup", to_vector(dup)}}};
  };
  c.grad_inputs = {"gate", "up"};
  // gate, up [N, F] -> glu -> cross-entropy over the F columns.
  c.graph_shapes = {{4, 9}};
  c.graph = [act, ref](const Dims& d) {
    testing::OneNodeGraph b(d[0]);
    graph::ValueId gate = b.source("gate", d[1], -4, 4), up = b.source("up", d[1], -2, 2);
    b.loss(b.g.glu(static_cast<int>(act), gate, up, "glu", "mlpwi"), d[1]);
    const std::vector<int32_t> targets = b.feed.inputs.at("targets");
    auto loss = [&](const testing::GraphFeed& f) {
      return testing::cross_entropy_mean_ref(ref(f.params.at("gate"), f.params.at("up")), targets, d[1]);
    };
    testing::expect_graph_gradients(b, loss, 16, d[1]);
  };
  return c;
}

const testing::OpCaseRegistrar kRmsNorm(rmsnorm_case());
const testing::OpCaseRegistrar kLayerNorm(layernorm_case());
const testing::OpCaseRegistrar kBiasAdd(bias_case());
const testing::OpCaseRegistrar kRopeHalf(rope_case(ops::RopeLayout::kRotateHalf, "rope_rotate_half"));
const testing::OpCaseRegistrar kRopeInterleaved(rope_case(ops::RopeLayout::kInterleaved, "rope_interleaved"));
const testing::OpCaseRegistrar kActSilu(act_case(ops::Activation::kSilu));
const testing::OpCaseRegistrar kActGelu(act_case(ops::Activation::kGeluTanh));
const testing::OpCaseRegistrar kActGeluErf(act_case(ops::Activation::kGeluErf));
const testing::OpCaseRegistrar kActLinear(act_case(ops::Activation::kLinear));
const testing::OpCaseRegistrar kGluSilu(glu_case(ops::Activation::kSilu));
const testing::OpCaseRegistrar kGluGelu(glu_case(ops::Activation::kGeluTanh));
const testing::OpCaseRegistrar kGluGeluErf(glu_case(ops::Activation::kGeluErf));

}  // namespace
}  // namespace tessera
