// Vocabulary-parallel embedding and cross-entropy, one process, the shards simulated: the table and
// the logits are cut into 2 equal and 3 unequal shards, each shard runs the ops, and the all-reduces
// between the steps are done here (max and sum over the shards, what the tensor axis's communicator
// does). The combined results must equal the unsplit double references (embedding_forward_ref,
// cross_entropy_forward_ref and cross_entropy_backward_ref) on f32 and bf16, with ignored targets
// and z-loss; each shard's entries match its own double reference; the references' gradient matches
// central finite differences of the unsplit loss; argument errors name the op.
#include "tessera/ops/vocab_parallel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/ops/cross_entropy.h"
#include "tessera/ops/embedding.h"
#include "testing/op_test_util.h"

namespace tessera {
namespace {

using testing::OwnedTensor;

constexpr double kEpsF32 = 0x1p-24;     // f32 unit roundoff
constexpr double kEpsBf16 = 0x1p-8;     // bf16 unit roundoff
constexpr double kExpMaxRelErr = 1e-7;  // the vector exp's bound (cross_entropy_kernels.h)

// Shard boundaries of a vocabulary of V over `parts` ranks: as equal as possible, the first
// V % parts shards one larger (so 3 shards of 131 are 44, 44, 43).
std::vector<int64_t> shard_starts(int64_t vocab, int parts) {
  std::vector<int64_t> starts = {0};
  for (int p = 0; p < parts; ++p)
    starts.push_back(starts.back() + vocab / parts + (p < vocab % parts ? 1 : 0));
  return starts;
}

// Columns [c0, c1) of a row-major [n, cols] matrix.
std::vector<double> columns(const std::vector<double>& m, int64_t n, int64_t cols, int64_t c0, int64_t c1) {
  std::vector<double> out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), m.begin() + i * cols + c0, m.begin() + i * cols + c1);
  return out;
}

std::vector<int32_t> random_ids(int64_t n, int64_t vocab, uint64_t seed, bool with_ignored) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    ids[i] = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
    if (with_ignored && i % 5 == 3) ids[i] = i % 2 ? -1 : -100;
  }
  return ids;
}

void copy_ids(const std::vector<int32_t>& ids, const Tensor& t) {
  std::copy(ids.begin(), ids.end(), t.ptr<int32_t>());
}

struct EmbCase {
  int64_t n, c, vocab;
  DType table_dtype, out_dtype;
};

class VocabEmbedding : public ::testing::TestWithParam<EmbCase> {};

TEST_P(VocabEmbedding, ShardsSumToTheLookupAndScatterTheirRows) {
  const EmbCase k = GetParam();
  for (int parts : {2, 3}) {
    SCOPED_TRACE(::testing::Message() << parts << " shards");
    const auto starts = shard_starts(k.vocab, parts);
    std::vector<int32_t> id_v = random_ids(k.n, k.vocab, 7 + k.n, false);
    if (k.n > 2) id_v[1] = id_v[2] = id_v[0];  // repeated ids accumulate in token order
    OwnedTensor ids(Shape{k.n}, DType::kI32);
    copy_ids(id_v, ids);
    OwnedTensor table(Shape{k.vocab, k.c}, k.table_dtype);
    const std::vector<double> table_v = testing::fill_uniform(table, 11);
    std::vector<double> want;
    ops::embedding_forward_ref(table_v, id_v, k.c, want);
    OwnedTensor dout(Shape{k.n, k.c}, k.out_dtype);
    const std::vector<double> dout_v = testing::fill_uniform(dout, 13);
    std::vector<double> want_dtable(static_cast<size_t>(k.vocab * k.c), 0.0);
    ops::embedding_backward_ref(dout_v, id_v, k.c, want_dtable);

    testing::for_each_isa([&] {
      std::vector<double> sum(static_cast<size_t>(k.n * k.c), 0.0), dtable_all;
      for (int p = 0; p < parts; ++p) {
        const int64_t off = starts[p], vl = starts[p + 1] - starts[p];
        const ops::VocabShardRange r{.offset = off, .vocab = k.vocab};
        const Tensor shard = table.t.slice0(off, off + vl);  // rows of a row-major table are contiguous
        OwnedTensor out(Shape{k.n, k.c}, k.out_dtype);
        ops::vocab_embedding_forward(shard, ids, r, out);
        std::vector<double> got = testing::to_vector(out), ref;
        ops::vocab_embedding_forward_ref(testing::to_vector(shard), id_v, k.c, off, vl, ref);
        // A row is copied or converted once: exact in f32, one bf16 rounding otherwise.
        if (k.out_dtype == DType::kBF16)
          for (double& x : ref) x = round_to_bf16(static_cast<float>(x));
        EXPECT_TRUE(testing::all_close(got, ref, 0, 0));
        for (size_t i = 0; i < sum.size(); ++i) sum[i] += got[i];
        OwnedTensor dtable(Shape{vl, k.c}, DType::kF32);
        std::fill(dtable.t.ptr<float>(), dtable.t.ptr<float>() + dtable.t.numel(), 0.5f);  // accumulated into
        ops::vocab_embedding_backward(dout, ids, r, dtable);
        std::vector<double> dref(static_cast<size_t>(vl * k.c), 0.5);
        ops::vocab_embedding_backward_ref(dout_v, id_v, k.c, off, vl, dref);
        // f32 sums of at most n terms in token order.
        EXPECT_TRUE(
            testing::all_close(testing::to_vector(dtable), dref, 4 * k.n * kEpsF32, 4 * k.n * kEpsF32));
        for (double x : testing::to_vector(dtable)) dtable_all.push_back(x - 0.5);
      }
      // The all-reduce of the shards' outputs is the lookup of the whole table (one term is
      // non-zero per element, so the sum is exact), rounded as the lookup rounds.
      std::vector<double> want_rounded = want;
      if (k.out_dtype == DType::kBF16)
        for (double& x : want_rounded) x = round_to_bf16(static_cast<float>(x));
      EXPECT_TRUE(testing::all_close(sum, want_rounded, 0, 0));
      EXPECT_TRUE(testing::all_close(dtable_all, want_dtable, 4 * k.n * kEpsF32, 4 * k.n * kEpsF32 + 1e-7));
    });
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, VocabEmbedding,
                         ::testing::Values(EmbCase{1, 3, 5, DType::kF32, DType::kF32},
                                           EmbCase{7, 130, 131, DType::kF32, DType::kBF16},
                                           EmbCase{67, 1, 13, DType::kF32, DType::kF32},
                                           EmbCase{67, 257, 131, DType::kBF16, DType::kF32},
                                           EmbCase{300, 260, 997, DType::kF32, DType::kF32}));

struct CeCase {
  int64_t n, vocab;
  DType dtype;
  float z_loss;
};

// Runs the three forward steps on every shard with the all-reduces done in between (max, then sum
// over the shards), then each shard's backward; returns the per-shard loss, lse and dlogits.
struct ShardedCe {
  std::vector<std::vector<double>> loss, lse, dlogits;
};

ShardedCe run_sharded(const Tensor& logits_full, const Tensor& targets, const std::vector<int64_t>& starts,
                      int64_t vocab, float z_loss, const Tensor& dloss, bool in_place) {
  const int64_t n = logits_full.dim(0);
  const int parts = static_cast<int>(starts.size()) - 1;
  std::vector<OwnedTensor> logits, lse, stats, loss;
  for (int p = 0; p < parts; ++p) {
    const int64_t vl = starts[p + 1] - starts[p];
    logits.emplace_back(Shape{n, vl}, logits_full.dtype());
    const size_t es = dtype_size(logits_full.dtype());
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(static_cast<char*>(logits[p].t.data()) + i * vl * es,
                  static_cast<const char*>(logits_full.data()) + (i * vocab + starts[p]) * es,
                  static_cast<size_t>(vl) * es);
    lse.emplace_back(Shape{n}, DType::kF32);
    stats.emplace_back(Shape{2, n}, DType::kF32);
    loss.emplace_back(Shape{n}, DType::kF32);
  }
  auto range = [&](int p) { return ops::VocabShardRange{.offset = starts[p], .vocab = vocab}; };
  for (int p = 0; p < parts; ++p)
    ops::vocab_cross_entropy_partials(logits[p], targets, range(p), lse[p], stats[p]);
  for (int64_t i = 0; i < n; ++i) {  // all-reduce max of lse
    float m = lse[0].t.ptr<float>()[i];
    for (int p = 1; p < parts; ++p) m = std::max(m, lse[p].t.ptr<float>()[i]);
    for (int p = 0; p < parts; ++p) lse[p].t.ptr<float>()[i] = m;
  }
  for (int p = 0; p < parts; ++p) ops::vocab_cross_entropy_rescale(lse[p], stats[p]);
  for (int64_t i = 0; i < 2 * n; ++i) {  // all-reduce sum of stats, in rank order
    float s = 0;
    for (int p = 0; p < parts; ++p) s += stats[p].t.ptr<float>()[i];
    for (int p = 0; p < parts; ++p) stats[p].t.ptr<float>()[i] = s;
  }
  ShardedCe out;
  for (int p = 0; p < parts; ++p) {
    ops::vocab_cross_entropy_finish(targets, stats[p], z_loss, lse[p], loss[p]);
    OwnedTensor separate(logits[p].t.shape(), logits[p].t.dtype());
    const Tensor& dl = in_place ? logits[p].t : separate.t;
    ops::vocab_cross_entropy_backward(logits[p], targets, range(p), lse[p], dloss, dl, z_loss);
    out.loss.push_back(testing::to_vector(loss[p]));
    out.lse.push_back(testing::to_vector(lse[p]));
    out.dlogits.push_back(testing::to_vector(dl));
  }
  return out;
}

class VocabCrossEntropy : public ::testing::TestWithParam<CeCase> {};

TEST_P(VocabCrossEntropy, ShardsCombineToTheUnsplitLossAndGradient) {
  const CeCase k = GetParam();
  OwnedTensor logits(Shape{k.n, k.vocab}, k.dtype);
  const std::vector<double> x = testing::fill_uniform(logits, 21 + k.vocab, -4, 4);
  const std::vector<int32_t> t_v = random_ids(k.n, k.vocab, 5 + k.n, true);
  OwnedTensor targets(Shape{k.n}, DType::kI32), dloss(Shape{k.n}, DType::kF32);
  copy_ids(t_v, targets);
  const std::vector<double> dloss_v = testing::fill_uniform(dloss, 3, 0.1, 1.0);
  std::vector<double> want_loss, want_lse, want_dx;
  ops::cross_entropy_forward_ref(x, t_v, k.vocab, k.z_loss, want_loss, want_lse);
  ops::cross_entropy_backward_ref(x, t_v, k.vocab, k.z_loss, dloss_v, want_dx);
  // lse: the shard's lse carries the kernel's error (exp 1e-7 relative, f32 chunk sums of at most
  // 256 terms per lane: 256 eps) and one f32 rounding; combining the shards adds the f32 rounding
  // of exp(lse_s - m) and of the sum (a few eps) and the final rounding of lse (eps |lse|). The loss
  // subtracts an exact logit and adds z lse^2, whose error is 2 z |lse| times lse's.
  std::vector<double> lse_tol(k.n), loss_tol(k.n);
  for (int64_t i = 0; i < k.n; ++i) {
    lse_tol[i] =
        kExpMaxRelErr + (std::min<int64_t>(k.vocab, 256) + 8) * kEpsF32 + 2 * kEpsF32 * std::abs(want_lse[i]);
    loss_tol[i] =
        lse_tol[i] * (1 + 2 * k.z_loss * std::abs(want_lse[i])) + 2 * kEpsF32 * std::abs(want_loss[i]);
  }
  // dlogits = a exp(x - lse) - onehot: exp's error, lse's error (as a relative error of the
  // exp), the f32 products; then one rounding to the logits' dtype.
  const double out_eps = k.dtype == DType::kBF16 ? kEpsBf16 : kEpsF32;
  for (int parts : {2, 3}) {
    SCOPED_TRACE(::testing::Message() << parts << " shards");
    const auto starts = shard_starts(k.vocab, parts);
    testing::for_each_isa([&] {
      for (bool in_place : {false, true}) {
        const ShardedCe got = run_sharded(logits, targets, starts, k.vocab, k.z_loss, dloss, in_place);
        for (int p = 0; p < parts; ++p) {
          EXPECT_TRUE(testing::within(got.lse[p], want_lse, lse_tol)) << "shard " << p;
          EXPECT_TRUE(testing::within(got.loss[p], want_loss, loss_tol)) << "shard " << p;
          EXPECT_EQ(got.loss[p], got.loss[0]) << "every shard ends with the same loss";
          const std::vector<double> want_cols = columns(want_dx, k.n, k.vocab, starts[p], starts[p + 1]);
          const int64_t vl = starts[p + 1] - starts[p];
          std::vector<double> tol(want_cols.size());
          for (int64_t i = 0; i < k.n; ++i)
            for (int64_t v = 0; v < vl; ++v) {
              const double w = std::abs(want_cols[i * vl + v]);
              const double scale = dloss_v[i] * (1 + 2 * k.z_loss * std::abs(want_lse[i]));
              tol[i * vl + v] =
                  (kExpMaxRelErr + lse_tol[i] + 4 * kEpsF32) * (w + scale) + out_eps * w + 1e-30;
            }
          EXPECT_TRUE(testing::within(got.dlogits[p], want_cols, tol)) << "shard " << p;
        }
      }
    });
  }
}

// The combined loss is the one-process kernel's too, to within f32 roundings of lse.
TEST_P(VocabCrossEntropy, MatchesTheOneProcessKernel) {
  const CeCase k = GetParam();
  OwnedTensor logits(Shape{k.n, k.vocab}, k.dtype), targets(Shape{k.n}, DType::kI32);
  testing::fill_uniform(logits, 41, -3, 3);
  copy_ids(random_ids(k.n, k.vocab, 43, true), targets);
  OwnedTensor loss(Shape{k.n}, DType::kF32), lse(Shape{k.n}, DType::kF32), dloss(Shape{k.n}, DType::kF32);
  ops::cross_entropy_forward(logits, targets, loss, lse, k.z_loss);
  std::fill(dloss.t.ptr<float>(), dloss.t.ptr<float>() + k.n, 1.0f);
  const ShardedCe got =
      run_sharded(logits, targets, shard_starts(k.vocab, 2), k.vocab, k.z_loss, dloss, false);
  const std::vector<double> one = testing::to_vector(loss);
  const double tol = 2 * (kExpMaxRelErr + (std::min<int64_t>(k.vocab, 256) + 8) * kEpsF32) + 16 * kEpsF32;
  EXPECT_TRUE(testing::all_close(got.loss[0], one, 4 * kEpsF32 * (1 + 2 * k.z_loss * 16), tol));
}

INSTANTIATE_TEST_SUITE_P(Cases, VocabCrossEntropy,
                         ::testing::Values(CeCase{1, 3, DType::kF32, 0.0f}, CeCase{7, 5, DType::kF32, 0.0f},
                                           CeCase{67, 131, DType::kF32, 1e-4f},
                                           CeCase{67, 131, DType::kBF16, 0.0f},
                                           CeCase{13, 4099, DType::kF32, 0.0f},
                                           CeCase{5, 4099, DType::kBF16, 1e-4f}));

// The shard references' gradient against central finite differences of the unsplit loss
// (sum_n dloss[n] * loss[n]), in double: checks the one-hot placement by offset and the z-loss term.
TEST(VocabCrossEntropy, ReferenceGradientMatchesFiniteDifferences) {
  const int64_t n = 4, vocab = 7;
  const double z = 0.01;
  std::mt19937_64 rng(9);
  std::uniform_real_distribution<double> u(-2, 2);
  std::vector<double> x(n * vocab);
  for (double& v : x) v = u(rng);
  const std::vector<int32_t> t = {3, -1, 6, 0};
  const std::vector<double> dloss = {0.5, 1.0, 0.25, 2.0};
  auto objective = [&](const std::vector<double>& xs) {
    std::vector<double> loss, lse;
    ops::cross_entropy_forward_ref(xs, t, vocab, z, loss, lse);
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += dloss[i] * loss[i];
    return s;
  };
  std::vector<double> loss, lse;
  ops::cross_entropy_forward_ref(x, t, vocab, z, loss, lse);
  for (int parts : {2, 3}) {
    const auto starts = shard_starts(vocab, parts);
    for (int p = 0; p < parts; ++p) {
      const int64_t vl = starts[p + 1] - starts[p];
      const std::vector<double> xs = columns(x, n, vocab, starts[p], starts[p + 1]);
      std::vector<double> d;
      ops::vocab_cross_entropy_backward_ref(xs, t, starts[p], vl, z, lse, dloss, d);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t v = 0; v < vl; ++v) {
          const double h = 1e-5;
          std::vector<double> xp = x, xm = x;
          xp[i * vocab + starts[p] + v] += h;
          xm[i * vocab + starts[p] + v] -= h;
          const double fd = (objective(xp) - objective(xm)) / (2 * h);
          EXPECT_NEAR(d[i * vl + v], fd, 1e-8) << "shard " << p << " row " << i << " column " << v;
        }
      // The shard's partials combine, in double, to the unsplit lse.
      std::vector<double> lse_s, xt;
      ops::vocab_cross_entropy_partials_ref(xs, t, starts[p], vl, lse_s, xt);
      for (int64_t i = 0; i < n; ++i)
        if (t[i] >= starts[p] && t[i] < starts[p + 1]) {
          EXPECT_EQ(xt[i], x[i * vocab + t[i]]);
        }
    }
  }
}

TEST(VocabParallel, ArgumentErrorsNameTheOp) {
  OwnedTensor table(Shape{4, 3}, DType::kF32), ids(Shape{2}, DType::kI32), out(Shape{2, 3}, DType::kF32);
  ids.t.ptr<int32_t>()[0] = 1;
  ids.t.ptr<int32_t>()[1] = 9;  // >= V = 8
  auto msg = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(msg([&] {
              ops::vocab_embedding_forward(table, ids, {.offset = 4, .vocab = 8}, out);
            }).find("vocab_embedding_forward: ids[1] = 9 is out of range"),
            std::string::npos);
  ids.t.ptr<int32_t>()[1] = 2;
  EXPECT_NE(msg([&] {
              ops::vocab_embedding_forward(table, ids, {.offset = 6, .vocab = 8}, out);
            }).find("the shard [6, 10) does not lie in a vocabulary of 8"),
            std::string::npos);
  OwnedTensor lse(Shape{2}, DType::kF32), stats(Shape{3, 2}, DType::kF32);
  EXPECT_NE(msg([&] {
              ops::vocab_cross_entropy_partials(out, ids, {.offset = 0, .vocab = 8}, lse, stats);
            }).find("vocab_cross_entropy_partials: stats must be a contiguous float32[2, 2]"),
            std::string::npos);
}

}  // namespace
}  // namespace tessera
