// One graph node in isolation: a tiny graph::Graph with the node under test between parameters
// and a cross-entropy loss, planned, differentiated by graph autodiff (append_backward, inside
// Plan) and run by the Executor; its parameter gradients are compared with central finite
// differences of the same composite computed in double from the ops' references.
//
// The graph's gradients exist only for parameters (kGrad values), and rules such as rms_norm's need
// an activation input, so each activation operand is a parameter table looked up by an identity
// embedding (ids 0..N-1): x = table exactly, and dx arrives in the table's gradient. The loss must
// be a cross_entropy node (the executor reads its targets to count tokens); the node's output
// serves as the logits. The loss is the mean over counted tokens (dloss = 1 / count).
//
// All use of graph::Plan and graph::Executor is in run_one_node_graph, so a change to how plans
// are built touches that one function.
#pragma once

#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tessera/graph/executor.h"
#include "tessera/graph/graph.h"
#include "tessera/graph/plan.h"
#include "tessera/ops/cross_entropy.h"
#include "tessera/ops/rope.h"
#include "testing/op_registry.h"

namespace tessera::testing {

struct GraphFeed {
  std::map<std::string, std::vector<double>> params;   // f32 parameters by name
  std::map<std::string, std::vector<int32_t>> inputs;  // int32 inputs by name ("targets" required)
};

// Plans the forward graph `g` (loss set), fills parameters and inputs by name, runs one forward and
// backward pass and returns every parameter's gradient by the parameter's name. `rope`: the table
// config for rope nodes, or null.
inline std::map<std::string, std::vector<double>> run_one_node_graph(graph::Graph g, const GraphFeed& feed,
                                                                     const ops::RopeConfig* rope = nullptr) {
  graph::Plan plan(std::move(g),
                   graph::PlanOptions{.remat_policy = "none", .optimizer = graph::OptimizerKind::kSgd});
  graph::Executor exec(plan, rope ? std::make_unique<ops::RopeTable>(*rope) : nullptr);
  const auto& values = plan.graph().values();
  for (size_t v = 0; v < values.size(); ++v) {
    const Tensor& t = plan.view(static_cast<graph::ValueId>(v));
    if (values[v].kind == graph::ValueKind::kParam) {
      const std::vector<double>& src = feed.params.at(values[v].name);
      EXPECT_EQ(static_cast<int64_t>(src.size()), t.numel()) << values[v].name;
      for (int64_t i = 0; i < t.numel(); ++i) t.ptr<float>()[i] = static_cast<float>(src[i]);
    } else if (auto it = feed.inputs.find(values[v].name); it != feed.inputs.end()) {
      EXPECT_EQ(static_cast<int64_t>(it->second.size()), t.numel()) << values[v].name;
      std::memcpy(t.data(), it->second.data(), it->second.size() * sizeof(int32_t));
    }
  }
  int64_t count = 0;
  for (int32_t t : feed.inputs.at("targets")) count += t >= 0;
  const Tensor& dloss = plan.view(plan.dloss());
  for (int64_t i = 0; i < dloss.numel(); ++i) dloss.ptr<float>()[i] = 1.0f / static_cast<float>(count);
  exec.zero_grads();
  exec.forward_backward();
  std::map<std::string, std::vector<double>> grads;
  for (size_t v = 0; v < values.size(); ++v)
    if (values[v].kind == graph::ValueKind::kParam)
      grads[values[v].name] = to_vector(plan.view(values[v].grad));
  return grads;
}

// Mean cross-entropy over the counted tokens, in double (the graph's loss).
inline double cross_entropy_mean_ref(const std::vector<double>& logits, const std::vector<int32_t>& targets,
                                     int64_t vocab, double z_loss = 0) {
  std::vector<double> loss, lse;
  ops::cross_entropy_forward_ref(logits, targets, vocab, z_loss, loss, lse);
  double sum = 0;
  int64_t count = 0;
  for (size_t n = 0; n < targets.size(); ++n)
    if (targets[n] >= 0) sum += loss[n], ++count;
  return sum / static_cast<double>(count);
}

// Builds the graph around one node: parameters (with seeded values), identity-embedded
// activations, inputs and the loss.
struct OneNodeGraph {
  graph::Graph g;
  GraphFeed feed;
  graph::ValueId ids = graph::kNoValue;
  int64_t n = 0;
  uint64_t seed = 1;

  explicit OneNodeGraph(int64_t tokens) : n(tokens) {
    ids = g.input("ids", Shape{n}, DType::kI32);
    auto& v = feed.inputs["ids"];
    for (int64_t i = 0; i < n; ++i) v.push_back(static_cast<int32_t>(i));
  }
  graph::ValueId param(const std::string& name, Shape s, double lo = -1, double hi = 1) {
    std::vector<std::string> axes(static_cast<size_t>(s.rank()), "");
    for (size_t d = 0; d < axes.size(); ++d) axes[d] = "axis" + std::to_string(d);
    graph::ValueId p = g.param(name, s, axes);
    feed.params[name] = uniform(s.numel(), seed++, DType::kF32, lo, hi);
    return p;
  }
  // An activation [n, c] equal to the parameter `name` (identity lookup).
  graph::ValueId source(const std::string& name, int64_t c, double lo = -1, double hi = 1) {
    return g.embedding(param(name, Shape{n, c}, lo, hi), ids, DType::kF32, name + ".act");
  }
  graph::ValueId int_input(const std::string& name, Shape s, std::vector<int32_t> values) {
    feed.inputs[name] = std::move(values);
    return g.input(name, s, DType::kI32);
  }
  // loss = mean cross_entropy(logits [n, V], targets), the last target ignored (when n > 1).
  void loss(graph::ValueId logits, int64_t vocab, float z_loss = 0) {
    std::vector<int32_t> t = uniform_ints(n, seed++, 0, static_cast<int32_t>(vocab - 1));
    if (n > 1) t.back() = -1;
    graph::ValueId targets = int_input("targets", Shape{n}, t);
    g.set_loss(g.cross_entropy(logits, targets, z_loss, "loss"));
  }
};

// Runs the graph and checks each parameter's gradient against central differences of
// loss_ref(params), the same loss in double. Tolerance: the file comment of op_registry.h with
// s_i = |g_i| + mean |g| over the parameter, R the longest reduction of the node and its loss,
// plus 1e-6 s_i for the finite differences' own error (op_registry.h).
inline void expect_graph_gradients(OneNodeGraph& b, const std::function<double(const GraphFeed&)>& loss_ref,
                                   double k, int64_t reduction, const ops::RopeConfig* rope = nullptr) {
  GraphFeed feed = b.feed;
  const auto grads = run_one_node_graph(std::move(b.g), feed, rope);
  for (auto& [name, x] : feed.params) {
    const std::vector<double> fd = finite_difference(x, [&] { return loss_ref(feed); });
    Arrays a;
    a.f["g"] = fd;
    std::vector<double> tol = scale_of(a, "g");
    for (double& t : tol) t *= k * kUnitF32 * std::sqrt(static_cast<double>(reduction)) + 1e-6;
    EXPECT_TRUE(within(grads.at(name), fd, tol)) << "graph gradient of " << name;
  }
}

}  // namespace tessera::testing
