// Embedding: the lookup is exact (a copy, or one rounding to bf16) for every table/out dtype pair;
// the scatter-add against the double reference and bit for bit against a serial f32 loop for 1, 2
// and 3 threads; the reference gradient against finite differences; errors for bad ids.
#include "tessera/ops/embedding.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>
#include <random>
#include <vector>

#include "tessera/core/error.h"
#include "testing/op_test_util.h"

namespace tessera {
namespace {

using testing::OwnedTensor;

// Ids drawn from a skewed distribution: half the tokens hit id 0 (padding-like), the rest uniform.
std::vector<int32_t> make_ids(const Tensor& t, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(t.numel()));
  for (auto& id : ids) id = rng() % 2 ? 0 : static_cast<int32_t>(rng() % vocab);
  std::memcpy(t.data(), ids.data(), ids.size() * sizeof(int32_t));
  return ids;
}

double round_to(DType d, double v) {
  return d == DType::kBF16 ? round_to_bf16(static_cast<float>(v)) : v;
}

TEST(Embedding, ForwardIsExactForEveryDtypePair) {
  struct Size {
    int64_t n, c, vocab;
  };
  for (Size s : {Size{1, 1, 1}, Size{7, 3, 5}, Size{67, 130, 4099}, Size{67, 4099, 5}})
    for (DType td : {DType::kF32, DType::kBF16})
      for (DType od : {DType::kF32, DType::kBF16}) {
        SCOPED_TRACE(::testing::Message() << "N=" << s.n << " C=" << s.c << " V=" << s.vocab << " table "
                                          << dtype_name(td) << " out " << dtype_name(od));
        OwnedTensor table(Shape{s.vocab, s.c}, td), ids(Shape{s.n}, DType::kI32), out(Shape{s.n, s.c}, od);
        const auto tv = testing::fill_uniform(table, 3 * s.c + s.n, -4, 4);
        const auto iv = make_ids(ids, s.vocab, s.n);
        std::vector<double> want;
        ops::embedding_forward_ref(tv, iv, s.c, want);
        for (auto& w : want) w = round_to(od, w);  // f32 -> bf16 rounds once, to nearest even
        testing::for_each_isa([&] {
          ops::embedding_forward(table, ids, out);
          EXPECT_TRUE(testing::all_close(testing::to_vector(out), want, 0, 0));
        });
      }
}

// f32 -> bf16 conversion of special values: bit for bit core's f32_to_bf16 (NaN stays NaN even when
// its payload would round into the sign bit, infinities, signed zero, overflow, ties to even).
TEST(Embedding, ForwardConvertsSpecialValuesLikeCore) {
  const std::vector<uint32_t> bits = {0x7fffffffu, 0x7f800001u, 0x7f800000u, 0xff800000u, 0x80000000u,
                                      0x7f7fffffu, 0x3f808000u, 0x3f818000u, 0x00010000u};
  const int64_t c = static_cast<int64_t>(bits.size());
  OwnedTensor table(Shape{1, c}, DType::kF32), ids(Shape{2}, DType::kI32), out(Shape{2, c}, DType::kBF16);
  std::memcpy(table.t.data(), bits.data(), bits.size() * 4);
  std::memset(ids.t.data(), 0, 8);
  testing::for_each_isa([&] {
    ops::embedding_forward(table, ids, out);
    for (int64_t i = 0; i < 2 * c; ++i)
      EXPECT_EQ(out.t.ptr<uint16_t>()[i], f32_to_bf16(table.t.ptr<float>()[i % c])) << "at " << i;
  });
}

// dtable starts non-zero (the op accumulates). Each element is a sum of k terms in f32, in token
// order: error <= k * 2^-24 * (|dtable0| + sum |terms|) <= N * 2^-24 * (1 + N) with inputs in [-1, 1].
TEST(Embedding, BackwardMatchesReference) {
  for (DType dd : {DType::kF32, DType::kBF16}) {
    const int64_t n = 67, c = 130, vocab = 5;
    OwnedTensor dout(Shape{n, c}, dd), ids(Shape{n}, DType::kI32), dtable(Shape{vocab, c}, DType::kF32);
    const auto g = testing::fill_uniform(dout, 9);
    const auto iv = make_ids(ids, vocab, 10);
    testing::for_each_isa([&] {
      auto want = testing::fill_uniform(dtable, 11);
      ops::embedding_backward_ref(g, iv, c, want);
      ops::embedding_backward(dout, ids, dtable);
      EXPECT_TRUE(testing::all_close(testing::to_vector(dtable), want, 0, n * 0x1p-24 * (1 + n)));
    });
  }
}

// The scatter-add is bitwise a serial f32 loop in token order, whatever the thread count (the
// partition of dtable into tiles depends on it). Sizes pass the kernel's threading threshold.
TEST(Embedding, BackwardIsBitwiseDeterministicAcrossThreadCounts) {
  const int saved = omp_get_max_threads();
  for (DType dd : {DType::kF32, DType::kBF16}) {
    const int64_t n = 517, c = 771, vocab = 97;
    OwnedTensor dout(Shape{n, c}, dd), ids(Shape{n}, DType::kI32), dtable(Shape{vocab, c}, DType::kF32);
    testing::fill_uniform(dout, 21);
    const auto iv = make_ids(ids, vocab, 22);
    testing::fill_uniform(dtable, 23);
    std::vector<float> serial(dtable.t.ptr<float>(), dtable.t.ptr<float>() + vocab * c);
    for (int64_t t = 0; t < n; ++t)
      for (int64_t i = 0; i < c; ++i)
        serial[iv[t] * c + i] += static_cast<float>(testing::get(dout, t * c + i));
    testing::for_each_isa([&] {
      for (int threads : {1, 2, 3}) {
        SCOPED_TRACE(::testing::Message() << dtype_name(dd) << " threads=" << threads);
        omp_set_num_threads(threads);
        testing::fill_uniform(dtable, 23);
        ops::embedding_backward(dout, ids, dtable);
        EXPECT_EQ(std::memcmp(dtable.t.data(), serial.data(), serial.size() * sizeof(float)), 0);
      }
    });
  }
  omp_set_num_threads(saved);
}

// L = sum dout * out(table) is linear in the table: the reference's gradient against central
// differences of the reference forward (exact up to rounding of O(1e-16 / h)).
TEST(Embedding, ReferenceGradientMatchesFiniteDifferences) {
  const int64_t c = 3, vocab = 4;
  const std::vector<int32_t> ids = {2, 0, 2, 3, 2};
  std::vector<double> table(vocab * c), g(ids.size() * c);
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> u(-1, 1);
  for (auto& e : table) e = u(rng);
  for (auto& e : g) e = u(rng);
  std::vector<double> dtable(vocab * c, 0.0), out, fd(vocab * c);
  ops::embedding_backward_ref(g, ids, c, dtable);
  const double h = 1e-4;
  for (size_t j = 0; j < table.size(); ++j) {
    double f[2];
    for (int s = 0; s < 2; ++s) {
      auto tp = table;
      tp[j] += s ? -h : h;
      ops::embedding_forward_ref(tp, ids, c, out);
      f[s] = 0;
      for (size_t k = 0; k < out.size(); ++k) f[s] += g[k] * out[k];
    }
    fd[j] = (f[0] - f[1]) / (2 * h);
  }
  EXPECT_TRUE(testing::all_close(dtable, fd, 1e-9, 1e-10));
}

// No tokens, or rows of width 0: nothing to do, and nothing may crash.
TEST(Embedding, EmptyShapes) {
  OwnedTensor table(Shape{5, 0}, DType::kF32), ids(Shape{3}, DType::kI32), out(Shape{3, 0}, DType::kBF16);
  const int32_t iv[3] = {0, 4, 2};
  std::memcpy(ids.t.data(), iv, sizeof iv);
  ops::embedding_forward(table, ids, out);
  ops::embedding_backward(out, ids, table);
  OwnedTensor table2(Shape{5, 3}, DType::kF32), none(Shape{0}, DType::kI32), out2(Shape{0, 3}, DType::kF32);
  ops::embedding_forward(table2, none, out2);
  ops::embedding_backward(out2, none, table2);
}

TEST(Embedding, OutOfRangeIdNamesIdPositionAndVocabulary) {
  OwnedTensor table(Shape{5, 3}, DType::kF32), ids(Shape{4}, DType::kI32), out(Shape{4, 3}, DType::kF32);
  testing::fill_uniform(table, 1);
  for (int32_t bad : {5, -1}) {
    const int32_t iv[4] = {0, 4, bad, 1};
    std::memcpy(ids.t.data(), iv, sizeof iv);
    const std::string want = "ids[2] = " + std::to_string(bad) + " is out of range for a vocabulary of 5";
    try {
      ops::embedding_forward(table, ids, out);
      ADD_FAILURE() << "forward accepted id " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kShape);
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
    try {
      ops::embedding_backward(out, ids, table);
      ADD_FAILURE() << "backward accepted id " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
  OwnedTensor wide(Shape{4, 4}, DType::kF32), bf(Shape{5, 3}, DType::kBF16);
  const int32_t ok[4] = {0, 1, 2, 3};
  std::memcpy(ids.t.data(), ok, sizeof ok);
  EXPECT_THROW(ops::embedding_forward(table, ids, wide), Error);  // C differs
  EXPECT_THROW(ops::embedding_backward(out, ids, bf), Error);     // dtable must be f32
}

}  // namespace
}  // namespace tessera
