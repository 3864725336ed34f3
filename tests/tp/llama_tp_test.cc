// Tensor-parallel Llama in one process: the tensor ranks are threads of this test joined by an
// in-process communicator (each collective sums in rank order on every rank, as a deterministic
// all-reduce does), each with its own graph, plan and executor built from the same ModelSpec but
// its own tp_rank. Against the one-device run with the same batch:
//   - the initial parameters are exactly the slices of the one-device ones;
//   - the losses of 3 steps (SGD or AdamW) agree, so do the first step's gradients and, with SGD,
//     the gathered parameters after the 3 steps (float32, within the reordering of sums that the
//     split brings; tolerances below);
//   - the norm scales' gradients come out bitwise equal on every tensor rank (the residual stream
//     is whole everywhere), and the global gradient norm that the clip uses is the one-device one
//     (split parameters' squares summed over the tensor ranks, replicated ones counted once);
//   - per layer the step issues Megatron's 2 forward and 2 backward all-reduces of [N, E].
// Cases cover 2 and 3 ranks, tied embeddings, z-loss, bf16 compute, the remat policies that
// recompute across the inserted collectives, and the gpt3 block (biases split with the columns of
// their projections, LayerNorm, learned positions). Also: refusals of splits that do not divide.
#include <gtest/gtest.h>
#include <omp.h>

#include <barrier>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <thread>

#include "tessera/core/error.h"
#include "tessera/dist/communicator.h"
#include "tessera/dist/mesh.h"
#include "tessera/graph/executor.h"
#include "tessera/models/decoder.h"
#include "tessera/models/init.h"
#include "testing/op_test_util.h"

namespace tessera {
namespace {

// ---- an in-process tensor group: one thread per rank -------------------------------------------

struct Rendezvous {
  explicit Rendezvous(int n) : size(n), sync(n), slots(static_cast<size_t>(n)) {}
  int size;
  std::barrier<> sync;
  std::vector<const void*> slots;
};

class ThreadCommunicator final : public dist::Communicator {
 public:
  ThreadCommunicator(std::shared_ptr<Rendezvous> r, int rank) : r_(std::move(r)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return r_->size; }

  void all_reduce(void* data, size_t count, DType dtype, dist::ReduceOp op) override {
    TESSERA_ASSERT(dtype == DType::kF32);
    reduce(static_cast<float*>(data), count, op);
    traffic_.all_reduce += count * sizeof(float);
  }
  void all_reduce_f64(double* data, size_t count, dist::ReduceOp op) override { reduce(data, count, op); }
  void all_gather(const void* send, void* recv, size_t count, DType dtype) override {
    const size_t bytes = count * dtype_size(dtype);
    publish(send);
    for (int p = 0; p < r_->size; ++p) std::memcpy(static_cast<char*>(recv) + p * bytes, r_->slots[p], bytes);
    r_->sync.arrive_and_wait();
  }
  void reduce_scatter(const void*, void*, size_t, DType) override { unused("reduce_scatter"); }
  void broadcast(void* data, size_t count, DType dtype, int root) override {
    publish(data);
    if (rank_ != root) std::memcpy(data, r_->slots[root], count * dtype_size(dtype));
    r_->sync.arrive_and_wait();
  }
  void barrier() override { r_->sync.arrive_and_wait(); }
  std::unique_ptr<Request> all_gather_async(const void*, void*, size_t, DType) override {
    unused("all_gather_async");
  }
  std::unique_ptr<Request> reduce_scatter_async(const void*, void*, size_t, DType, bool) override {
    unused("reduce_scatter_async");
  }
  std::unique_ptr<Request> all_reduce_async(void*, size_t, DType) override { unused("all_reduce_async"); }
  std::unique_ptr<Communicator> split(int, int) override { unused("split"); }

 private:
  [[noreturn]] static void unused(const char* what) {
    fail(ErrorKind::kInternal, "the test communicator has no {}", what);
  }
  void publish(const void* p) {
    r_->slots[rank_] = p;
    r_->sync.arrive_and_wait();
  }
  // Every rank reads all ranks' buffers, reduces in rank order (so all get the same bits), waits
  // until every rank has read, then writes its own buffer.
  template <typename T>
  void reduce(T* data, size_t count, dist::ReduceOp op) {
    publish(data);
    std::vector<T> out(count);
    for (size_t i = 0; i < count; ++i) {
      T acc = static_cast<const T*>(r_->slots[0])[i];
      for (int p = 1; p < r_->size; ++p) {
        const T x = static_cast<const T*>(r_->slots[p])[i];
        acc = op == dist::ReduceOp::kSum ? acc + x : std::max(acc, x);
      }
      out[i] = acc;
    }
    r_->sync.arrive_and_wait();
    std::copy(out.begin(), out.end(), data);
  }
  std::shared_ptr<Rendezvous> r_;
  int rank_;
};

// A mesh whose only axis of size > 1 is tensor.
class TensorOnlyMesh final : public dist::Mesh {
 public:
  TensorOnlyMesh(std::shared_ptr<Rendezvous> r, int rank)
      : tensor_(std::move(r), rank), one_(dist::make_single_process_communicator()) {}
  int64_t size(MeshAxis a) const override { return a == MeshAxis::kTensor ? tensor_.size() : 1; }
  int64_t coord(MeshAxis a) const override { return a == MeshAxis::kTensor ? tensor_.rank() : 0; }
  dist::Communicator& world() override { return tensor_; }
  dist::Communicator& axis(MeshAxis a) override { return a == MeshAxis::kTensor ? tensor_ : *one_; }
  dist::Communicator& axes(std::initializer_list<MeshAxis> list) override {
    for (MeshAxis a : list)
      if (a == MeshAxis::kTensor) return tensor_;
    return *one_;
  }
  std::string describe() const override { return "tensor=" + std::to_string(tensor_.size()); }
  int64_t position() const override { return tensor_.rank(); }
  int64_t num_devices() const override { return tensor_.size(); }
  dist::TrafficCounters traffic() const override { return tensor_.traffic(); }
  size_t scratch_bytes() const override { return 0; }
  ThreadCommunicator& tensor() { return tensor_; }

 private:
  ThreadCommunicator tensor_;
  std::unique_ptr<dist::Communicator> one_;
};

// ---- one rank's training run -------------------------------------------------------------------

struct Case {
  const char* name;
  int tp;
  int64_t heads, kv_heads, mlp, vocab;
  bool tied;
  DType dtype;
  const char* remat;
  float z_loss;
  graph::OptimizerKind opt;
  const char* block = "llama2";  // or "gpt3": LayerNorm, biases (split with their columns), learned positions
};

models::ModelSpec spec_for(const Case& c, int rank) {
  models::ModelSpec s;
  s.emb_dim = 24;
  s.num_query_heads = c.heads;
  s.num_kv_heads = c.kv_heads;
  s.head_dim = 4;
  s.mlp_dim = c.mlp;
  s.num_decoder_layers = 2;
  s.vocab_size = c.vocab;
  s.logits_via_embedding = c.tied;
  s.dtype = c.dtype;
  s.z_loss = c.z_loss;
  s.batch = 2;
  s.seq = 8;
  if (std::string(c.block) == "gpt3") {
    s.decoder_block = "gpt3";
    s.norm = models::NormKind::kLayer;
    s.gated_mlp = false;
    s.mlp_activation = "gelu";
    s.attention_bias = s.attention_out_bias = s.mlp_bias = true;
    s.rope = false;
    s.trainable_position_size = s.seq;
  }
  if (rank >= 0) {
    s.tp_size = c.tp;
    s.tp_rank = rank;
    s.tp_axes = {"heads", "q_heads", "kv_heads", "mlp", "vocab"};
  }
  return s;
}

constexpr int kSteps = 3;
// SGD's update is linear in the gradient, so the parameters after 3 steps bound the gradients'
// agreement directly; AdamW normalises each element's update, which magnifies the relative error
// of a gradient that is a near-cancelling sum without bound, so AdamW runs are judged by their
// losses, gradients and norms.
double lr_for(const Case& c) {
  return c.opt == graph::OptimizerKind::kSgd ? 0.1 : 1e-2;
}

struct RankRun {
  std::vector<double> losses;
  std::map<std::string, std::vector<float>> params;  // after the steps, this rank's shards
  std::map<std::string, std::vector<float>> init;    // before the first step
  std::map<std::string, std::vector<float>> grads;   // of the first step
  std::map<std::string, graph::TensorShard> shards;
  std::vector<double> grad_norms;  // the executor's, per step
  uint64_t all_reduce_bytes = 0;   // of the first step
};

std::map<std::string, std::vector<float>> snapshot(const graph::Plan& plan, bool grads) {
  std::map<std::string, std::vector<float>> out;
  for (graph::ValueId p : plan.graph().params()) {
    const graph::Value& v = plan.graph().value(p);
    const Tensor& t = plan.view(grads ? v.grad : p);
    out[v.name].assign(t.ptr<float>(), t.ptr<float>() + t.numel());
  }
  return out;
}

// Deterministic batch: the same on every rank; every fifth target ignored.
void feed(const graph::Plan& plan, const models::DecoderInputs& in, const models::ModelSpec& s) {
  const int64_t T = s.seq;
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const int64_t i = b * T + t;
      plan.view(in.tokens).ptr<int32_t>()[i] = static_cast<int32_t>((i * 37 + 11) % s.vocab_size);
      plan.view(in.targets).ptr<int32_t>()[i] =
          i % 5 == 4 ? -1 : static_cast<int32_t>((i * 53 + 3) % s.vocab_size);
      plan.view(in.positions).ptr<int32_t>()[i] = static_cast<int32_t>(t);
      plan.view(in.segment_ids).ptr<int32_t>()[i] = 1;
    }
}

RankRun train(const Case& c, int rank, TensorOnlyMesh* mesh) {
  const models::ModelSpec s = spec_for(c, mesh ? rank : -1);
  graph::Graph g;
  const models::DecoderInputs in = models::build_decoder(g, s);
  graph::Plan plan(std::move(g), graph::PlanOptions{.remat_policy = c.remat, .optimizer = c.opt});
  ops::RopeConfig rc{.max_timescale = 10000, .head_dim = s.head_dim, .max_positions = s.seq};
  graph::Executor exec(plan, std::make_unique<ops::RopeTable>(rc), mesh);
  models::init_params(plan, 17);
  RankRun r;
  r.init = snapshot(plan, false);
  for (graph::ValueId p : plan.graph().params())
    r.shards[plan.graph().value(p).name] = plan.graph().value(p).tp;
  const Tensor& dloss = plan.view(plan.dloss());
  std::fill(dloss.ptr<float>(), dloss.ptr<float>() + dloss.numel(), 1.0f);
  feed(plan, in, s);
  for (int step = 0; step < kSteps; ++step) {
    exec.zero_grads();
    if (mesh) mesh->tensor().reset_traffic();
    const double loss_sum = exec.forward_backward();
    int64_t counted = 0;
    for (int64_t i = 0; i < s.batch * s.seq; ++i) counted += plan.view(in.targets).ptr<int32_t>()[i] >= 0;
    r.losses.push_back(loss_sum / static_cast<double>(counted));
    if (step == 0) {
      r.grads = snapshot(plan, true);
      if (mesh) r.all_reduce_bytes = mesh->tensor().traffic().all_reduce;
    }
    graph::OptimizerStep os;
    os.adamw = {.lr = lr_for(c), .b1 = 0.9, .b2 = 0.95, .eps = 1e-8, .weight_decay = 0.1, .step = step + 1};
    os.sgd_lr = lr_for(c);
    os.grad_divisor = static_cast<double>(counted);
    os.clip_threshold = 1.0;  // clips: the global norm must count every shard once
    r.grad_norms.push_back(exec.apply_optimizer(os).grad_norm);
  }
  r.params = snapshot(plan, false);
  return r;
}

using Snapshot = std::map<std::string, std::vector<float>> RankRun::*;

// The tensor ranks' shards of `name` (from the snapshot `what`) placed into the whole tensor
// (row-major, global shape).
std::vector<float> gather(const std::vector<RankRun>& ranks, Snapshot what, const std::string& name,
                          size_t whole_size) {
  const graph::TensorShard& sh = ranks[0].shards.at(name);
  if (!sh.split()) return (ranks[0].*what).at(name);
  std::vector<float> out(whole_size, NAN);
  for (const RankRun& r : ranks) {
    const graph::TensorShard& s = r.shards.at(name);
    const std::vector<float>& v = (r.*what).at(name);
    const int64_t local = s.global / static_cast<int64_t>(ranks.size());
    const int64_t inner = static_cast<int64_t>(whole_size) / s.global;  // dim 0: elements per row
    for (size_t i = 0; i < v.size(); ++i) {
      const auto li = static_cast<int64_t>(i);
      // 2-D parameters: rows [offset, offset + local) of dim 0, or those columns of dim 1.
      const int64_t gi = s.dim == 0 ? s.offset * inner + li : (li / local) * s.global + s.offset + li % local;
      out[static_cast<size_t>(gi)] = v[i];
    }
  }
  return out;
}

std::vector<RankRun> train_tp(const Case& c) {
  auto rv = std::make_shared<Rendezvous>(c.tp);
  std::vector<RankRun> runs(static_cast<size_t>(c.tp));
  std::vector<std::string> errors(static_cast<size_t>(c.tp));
  std::vector<std::thread> threads;
  for (int r = 0; r < c.tp; ++r)
    threads.emplace_back([&, r] {
      omp_set_num_threads(1);  // per thread (see OneOmpThread)
      TensorOnlyMesh mesh(rv, r);
      try {
        runs[r] = train(c, r, &mesh);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < c.tp; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  return runs;
}

// The models are tiny: one OpenMP thread in these tests, so that the rank threads do not compete
// with an idle team spinning on the test's cores.
class OneOmpThread : public ::testing::Test {
 protected:
  void SetUp() override {
    saved_ = omp_get_max_threads();
    omp_set_num_threads(1);
  }
  void TearDown() override { omp_set_num_threads(saved_); }

 private:
  int saved_ = 1;
};

class LlamaTensorParallel : public OneOmpThread, public ::testing::WithParamInterface<Case> {};
using LlamaTensorParallelPlan = OneOmpThread;

TEST_P(LlamaTensorParallel, MatchesOneDeviceOverThreeSteps) {
  const Case c = GetParam();
  const RankRun one = train(c, 0, nullptr);
  const std::vector<RankRun> tp = train_tp(c);
  ASSERT_EQ(tp.size(), static_cast<size_t>(c.tp));
  // f32: the split changes only the order of sums (partial products reduced across ranks, the
  // loss's log-sum-exp combined per shard): a few f32 roundings, 1e-6 relative allows ~16 eps.
  // bf16 compute rounds each rank's partial sums to bf16 before the all-reduce: one more rounding
  // (2^-8 relative) of terms about half the sum's size, so the loss moves by ~1e-3 (1e-2 allowed).
  const bool bf16 = c.dtype == DType::kBF16;
  for (int step = 0; step < kSteps; ++step)
    for (const RankRun& r : tp)
      EXPECT_NEAR(r.losses[step], one.losses[step], (bf16 ? 1e-2 : 1e-6) * std::abs(one.losses[step]))
          << "step " << step;
  // Initial shards are exactly the one-device slices.
  for (auto& [name, whole] : one.init)
    EXPECT_EQ(gather(tp, &RankRun::init, name, whole.size()), whole) << name;
  // First-step gradients, relative to the tensor's largest: f32 to 1e-5 (sums of up to N E terms
  // reordered); bf16 to 2^-8 x 8 (a few bf16 roundings of the activations feeding them).
  // The key projection's bias has a gradient of exactly zero (it adds q·b to every score of a
  // query's row, which the softmax cancels): both runs leave only rounding there, judged against the
  // model's largest gradient.
  double model_scale = 0;
  for (auto& [name, whole] : one.grads)
    for (float w : whole) model_scale = std::max(model_scale, static_cast<double>(std::abs(w)));
  for (auto& [name, whole] : one.grads) {
    std::vector<double> got, want(whole.begin(), whole.end());
    for (float x : gather(tp, &RankRun::grads, name, whole.size())) got.push_back(x);
    double scale = 0;
    for (double w : want) scale = std::max(scale, std::abs(w));
    if (name.ends_with("key.bias")) scale = model_scale;
    EXPECT_TRUE(testing::all_close(got, want, 0, (bf16 ? 8 * 0x1p-8 : 1e-5) * scale)) << name;
  }
  // Parameters after 3 SGD steps (f32): the clip keeps each step's gradient norm <= 1, so an
  // element's gradients differ by at most 1e-5 (above) plus 1e-5 of itself through the clip's
  // scale: 2e-5 lr per step, 6e-5 lr over the three (later gradients see the same parameters to
  // that order, which adds nothing at this precision).
  if (!bf16 && c.opt == graph::OptimizerKind::kSgd)
    for (auto& [name, whole] : one.params) {
      std::vector<double> got, want(whole.begin(), whole.end());
      for (float x : gather(tp, &RankRun::params, name, whole.size())) got.push_back(x);
      EXPECT_TRUE(testing::all_close(got, want, 0, kSteps * 2e-5 * lr_for(c))) << name;
    }
  // Replicated parameters (the norm scales) get bitwise equal gradients on every rank.
  for (auto& [name, g0] : tp[0].grads) {
    if (tp[0].shards.at(name).split()) continue;
    for (const RankRun& r : tp) EXPECT_EQ(r.grads.at(name), g0) << name;
  }
  // The global gradient norm (which the clip uses): split parameters' squares summed over the
  // ranks, replicated ones counted once; to the gradients' tolerance above.
  for (int step = 0; step < kSteps; ++step)
    for (const RankRun& r : tp)
      EXPECT_NEAR(r.grad_norms[step], one.grad_norms[step], (bf16 ? 8 * 0x1p-8 : 1e-5) * one.grad_norms[step])
          << "step " << step;
}

INSTANTIATE_TEST_SUITE_P(Cases, LlamaTensorParallel,
                         ::testing::Values(Case{"tp2", 2, 4, 2, 24, 30, false, DType::kF32, "full", 0.0f,
                                                graph::OptimizerKind::kSgd},
                                           Case{"tp2_tied_zloss", 2, 4, 2, 24, 30, true, DType::kF32,
                                                "minimal", 1e-4f, graph::OptimizerKind::kAdamW},
                                           Case{"tp3", 3, 6, 3, 24, 30, false, DType::kF32, "none", 0.0f,
                                                graph::OptimizerKind::kSgd},
                                           Case{"tp2_bf16", 2, 4, 2, 24, 30, false, DType::kBF16,
                                                "save_dot_except_mlp", 0.0f, graph::OptimizerKind::kAdamW},
                                           Case{"gpt3_tp2_tied", 2, 4, 4, 24, 30, true, DType::kF32, "full",
                                                0.0f, graph::OptimizerKind::kSgd, "gpt3"},
                                           Case{"gpt3_tp2_bf16", 2, 4, 4, 24, 30, true, DType::kBF16,
                                                "minimal", 0.0f, graph::OptimizerKind::kAdamW, "gpt3"}),
                         [](const auto& info) { return std::string(info.param.name); });

// Megatron's count: per layer 2 all-reduces of [N, E] forward (attention and MLP outputs) and 2
// backward (their inputs' gradients), recomputation adding its forward ones again; outside the
// layers the embedding's forward [N, E], the final norm's input gradient [N, E], and the loss's
// [N] max and [2, N] sums. Bytes are f32 whatever the compute dtype. remat full recomputes a
// layer's attention output (the MLP's norm reads the residual after it) but not its MLP output
// (that is the next layer's saved input): one more all-reduce per layer.
TEST_F(LlamaTensorParallelPlan, AllReducesPerStepAreMegatrons) {
  for (const char* remat : {"none", "full"}) {
    const Case c{"count", 2, 4, 2, 24, 30, false, DType::kF32, remat, 0.0f, graph::OptimizerKind::kSgd};
    const std::vector<RankRun> tp = train_tp(c);
    const double N = 16, E = 24, L = 2;
    const double per_layer = std::string(remat) == "full" ? 5 : 4;
    const double want = 4 * (L * per_layer * N * E + 2 * N * E + 3 * N);
    EXPECT_EQ(static_cast<double>(tp[0].all_reduce_bytes), want) << remat;
  }
}

TEST_F(LlamaTensorParallelPlan, RefusesSplitsThatDoNotDivide) {
  auto error = [](models::ModelSpec s) {
    graph::Graph g;
    try {
      models::build_decoder(g, s);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kConfig);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const Case base{"x", 2, 4, 2, 24, 30, false, DType::kF32, "none", 0.0f, graph::OptimizerKind::kSgd};
  models::ModelSpec s = spec_for(base, 0);
  s.num_kv_heads = 1;
  EXPECT_NE(error(s).find("num_kv_heads=1 is not divisible by 2"), std::string::npos) << error(s);
  s = spec_for(base, 0);
  s.vocab_size = 31;
  EXPECT_NE(error(s).find("vocab_size=31 is not divisible by 2"), std::string::npos) << error(s);
  s = spec_for(base, 0);
  s.mlp_dim = 25;
  EXPECT_NE(error(s).find("mlp_dim=25 is not divisible by 2"), std::string::npos) << error(s);
  s = spec_for(base, 0);
  s.tp_axes = {"heads", "kv_heads", "mlp", "vocab"};  // q_heads whole, out projection split
  EXPECT_NE(error(s).find("split heads, q_heads and kv_heads differently"), std::string::npos) << error(s);
}

}  // namespace
}  // namespace tessera
