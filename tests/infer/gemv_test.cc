// ops::gemv against its double reference on awkward sizes, in f32 and bf16, on both ISA builds.
//
// Tolerance, per element: the kernel sums K products in f32 as kW-lane partial sums (each lane a
// chain of at most ceil(K / 8) + 1 additions, 8 being the narrowest vector) reduced by a tree of
// 4 levels, then adds y once with accumulate. Each addition errs by at most u = 2^-24 relative, so
// |got - ref| <= (ceil(K / 8) + 6) u (sum_k |x_k w_k| + |y|). Products of bf16 values are exact in
// f32, so the same bound holds with bf16 inputs (the reference sees the same rounded inputs). A
// bf16 y adds one rounding to nearest even, at most 2^-8 |ref| (8 significant bits).
#include "tessera/ops/gemv.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tessera/backends/cpu/onednn_matmul.h"
#include "tessera/backends/kernels.h"
#include "tessera/core/arena.h"
#include "tessera/core/error.h"
#include "testing/op_test_util.h"

namespace tessera {
namespace {

using testing::OwnedTensor;

struct Case {
  int64_t m, n, k;
};

// The reference y (in double) of x [M, K]·wᵀ (+ y) and its tolerance per element.
struct Expected {
  std::vector<double> y, tol;
};
Expected expected(const Case& c, const std::vector<double>& xv, const std::vector<double>& wv,
                  std::vector<double> yv, DType out, bool accumulate) {
  std::vector<double> tol(yv.size());
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t r = 0; r < c.n; ++r) {
      double mag = accumulate ? std::abs(yv[i * c.n + r]) : 0;
      for (int64_t j = 0; j < c.k; ++j) mag += std::abs(xv[i * c.k + j] * wv[r * c.k + j]);
      tol[i * c.n + r] = static_cast<double>((c.k + 7) / 8 + 6) * 0x1.0p-24 * mag;
    }
  ops::gemv_ref(xv.data(), wv.data(), yv.data(), c.m, c.n, c.k, {.accumulate = accumulate});
  if (out == DType::kBF16)
    for (size_t i = 0; i < yv.size(); ++i) tol[i] += 0x1.0p-8 * std::abs(yv[i]);
  return {std::move(yv), std::move(tol)};
}

void check_case(const Case& c, DType in, DType out, bool accumulate, uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "M " << c.m << " N " << c.n << " K " << c.k << " " << dtype_name(in)
                                    << " -> " << dtype_name(out) << (accumulate ? " accumulate" : ""));
  OwnedTensor x(Shape{c.m, c.k}, in), w(Shape{c.n, c.k}, in), y(Shape{c.m, c.n}, out);
  const std::vector<double> xv = testing::fill_uniform(x, seed), wv = testing::fill_uniform(w, seed + 1);
  const Expected e = expected(c, xv, wv, testing::fill_uniform(y, seed + 2), out, accumulate);
  ops::gemv(x, w, y, {.accumulate = accumulate});
  EXPECT_TRUE(testing::within(testing::to_vector(y), e.y, e.tol));
}

// Products of one x [M, K] with weights of `ns` rows, as one call: each y against its reference.
void check_products(int64_t m, const std::vector<int64_t>& ns, int64_t k, DType in, DType out,
                    bool accumulate, uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "M " << m << ", " << ns.size() << " products, K " << k << " "
                                    << dtype_name(in) << " -> " << dtype_name(out)
                                    << (accumulate ? " accumulate" : ""));
  OwnedTensor x(Shape{m, k}, in);
  const std::vector<double> xv = testing::fill_uniform(x, seed);
  std::vector<OwnedTensor> ws, ys;
  std::vector<Expected> want;
  for (int64_t n : ns) {
    ws.emplace_back(Shape{n, k}, in);
    ys.emplace_back(Shape{m, n}, out);
    const std::vector<double> wv = testing::fill_uniform(ws.back(), seed += 2);
    want.push_back(expected({m, n, k}, xv, wv, testing::fill_uniform(ys.back(), seed + 1), out, accumulate));
  }
  std::vector<Tensor> w, y;
  for (size_t p = 0; p < ns.size(); ++p) w.push_back(ws[p].t), y.push_back(ys[p].t);
  ops::gemv(x, w, y, {.accumulate = accumulate});
  for (size_t p = 0; p < ns.size(); ++p)
    EXPECT_TRUE(testing::within(testing::to_vector(ys[p]), want[p].y, want[p].tol)) << "product " << p;
}

TEST(Gemv, MatchesReferenceOnAwkwardSizes) {
  const std::vector<Case> cases = {{1, 1, 1},
                                   {1, 3, 17},
                                   {1, 67, 130},
                                   {1, 9, 4099},
                                   {2, 5, 33},
                                   {3, 67, 31},
                                   {5, 13, 130},
                                   {7, 9, 64},
                                   {7, 67, 1},
                                   {13, 7, 257},
                                   {32, 17, 96},
                                   {33, 5, 45},
                                   {1, 1030, 64},
                                   {4, 515, 48},
                                   // M = 1 with rows of up to and just over 4 KiB of bf16 (AVX2 reads
                                   // such rows one at a time, the tail zero-padded)
                                   {1, 40, 1000},
                                   {1, 67, 2048},
                                   {1, 5, 2049}};
  testing::for_each_isa([&] {
    uint64_t seed = 1;
    for (const Case& c : cases)
      for (bool acc : {false, true}) {
        check_case(c, DType::kF32, DType::kF32, acc, seed += 3);
        check_case(c, DType::kBF16, DType::kF32, acc, seed += 3);
        check_case(c, DType::kBF16, DType::kBF16, acc, seed += 3);
      }
  });
}

// Large enough that the rows of w are split over threads (256 KiB of w per thread at least).
TEST(Gemv, ThreadedSplitMatchesReference) {
  testing::for_each_isa([&] {
    check_case({1, 1031, 515}, DType::kF32, DType::kF32, false, 11);
    check_case({3, 2053, 300}, DType::kBF16, DType::kF32, true, 12);
    check_case({6, 1029, 600}, DType::kBF16, DType::kBF16, false, 13);
    check_case({1, 1031, 770}, DType::kBF16, DType::kBF16, true, 14);
  });
}

// Products sharing x, split over the threads as one sequence of rows: small ones on one thread,
// q/k/v- and gate/up-like ones over several, with row counts that leave partial blocks and an
// empty product, on both kernel paths of M = 1 (rows up to and over 4 KiB of bf16).
TEST(Gemv, ProductsSharingXMatchTheReference) {
  testing::for_each_isa([&] {
    uint64_t seed = 21;
    for (bool acc : {false, true}) {
      check_products(1, {3, 0, 17, 5}, 130, DType::kF32, DType::kF32, acc, seed += 10);
      check_products(1, {3, 0, 17, 5}, 130, DType::kBF16, DType::kBF16, acc, seed += 10);
      check_products(1, {769, 255, 257}, 768, DType::kBF16, DType::kBF16, acc, seed += 10);
      check_products(1, {1030, 1025}, 768, DType::kF32, DType::kF32, acc, seed += 10);
      check_products(1, {515, 300}, 2049, DType::kBF16, DType::kF32, acc, seed += 10);
      check_products(3, {515, 1027, 61}, 300, DType::kBF16, DType::kF32, acc, seed += 10);
      check_products(5, {700, 700}, 257, DType::kF32, DType::kF32, acc, seed += 10);
    }
  });
}

TEST(Gemv, RejectsBadArguments) {
  OwnedTensor x(Shape{2, 8}, DType::kF32), w(Shape{3, 8}, DType::kF32), y(Shape{2, 3}, DType::kF32);
  OwnedTensor wb(Shape{3, 8}, DType::kBF16), yb(Shape{2, 3}, DType::kBF16), w7(Shape{3, 7}, DType::kF32);
  auto kind_of = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return e.kind();
    }
    return ErrorKind::kInternal;
  };
  EXPECT_EQ(kind_of([&] { ops::gemv(x, wb, y); }), ErrorKind::kShape);  // mixed input dtypes
  EXPECT_EQ(kind_of([&] { ops::gemv(x, w, yb); }), ErrorKind::kShape);  // f32 inputs, bf16 y
  EXPECT_EQ(kind_of([&] { ops::gemv(x, w7, y); }), ErrorKind::kShape);  // K differs
  EXPECT_EQ(kind_of([&] {
              ops::gemv(x, w, Tensor(y.t.data(), Shape{3, 2}, DType::kF32));
            }),
            ErrorKind::kShape);
  EXPECT_EQ(kind_of([&] {
              ops::gemv(x, w, Tensor(x.t.data(), Shape{2, 3}, DType::kF32));
            }),
            ErrorKind::kShape);
  // Products sharing x: as many weights as outputs, one y dtype, no y overlapping another.
  OwnedTensor w2(Shape{4, 8}, DType::kF32), y2b(Shape{2, 4}, DType::kBF16);
  const std::vector<Tensor> two_w = {w.t, w2.t};
  EXPECT_EQ(kind_of([&] { ops::gemv(x, two_w, std::vector<Tensor>{y.t}); }), ErrorKind::kShape);
  EXPECT_EQ(kind_of([&] { ops::gemv(x, two_w, std::vector<Tensor>{y.t, y2b.t}); }), ErrorKind::kShape);
  EXPECT_EQ(kind_of([&] {
              ops::gemv(x, two_w, std::vector<Tensor>{y.t, Tensor(y.t.data(), Shape{2, 4}, DType::kF32)});
            }),
            ErrorKind::kShape);
  EXPECT_EQ(kind_of([&] { ops::gemv(x, std::vector<Tensor>(9, w.t), std::vector<Tensor>(9, y.t)); }),
            ErrorKind::kShape);
}

// Where the small-M kernel is the faster: fewer rows than the GEMM table's crossover for the
// dtype, which on the CPU is 16 for bf16 on oneDNN's AMX tiles, 32 or 64 for f32 (by ISA) and 64
// for bf16 elsewhere.
TEST(Gemv, IsFasterBelowTheGemmsCrossover) {
  Arena arena(size_t{1} << 20, "gemv-crossover");
  for (DType dt : {DType::kF32, DType::kBF16}) {
    const int64_t below = backends::kernels_for(Device::cpu()).gemm->gemv_rows_below(dt);
    if (dt == DType::kBF16)
      EXPECT_EQ(below, cpu::onednn_matmul_amx() ? 16 : 64);
    else
      EXPECT_TRUE(below == 32 || below == 64) << below;
    EXPECT_TRUE(ops::gemv_is_faster(arena.tensor(Shape{1, 8}, dt))) << dtype_name(dt);
    EXPECT_TRUE(ops::gemv_is_faster(arena.tensor(Shape{below - 1, 8}, dt))) << dtype_name(dt);
    EXPECT_FALSE(ops::gemv_is_faster(arena.tensor(Shape{below, 8}, dt))) << dtype_name(dt);
  }
}

}  // namespace
}  // namespace tessera
