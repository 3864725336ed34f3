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

#include "tessera/core/error.h"
#include "testing/op_test_util.h"

namespace tessera {
namespace {

using testing::OwnedTensor;

struct Case {
  int64_t m, n, k;
};

void check_case(const Case& c, DType in, DType out, bool accumulate, uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "M " << c.m << " N " << c.n << " K " << c.k << " " << dtype_name(in)
                                    << " -> " << dtype_name(out) << (accumulate ? " accumulate" : ""));
  OwnedTensor x(Shape{c.m, c.k}, in), w(Shape{c.n, c.k}, in), y(Shape{c.m, c.n}, out);
  const std::vector<double> xv = testing::fill_uniform(x, seed), wv = testing::fill_uniform(w, seed + 1);
  std::vector<double> yv = testing::fill_uniform(y, seed + 2);
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
  ops::gemv(x, w, y, {.accumulate = accumulate});
  EXPECT_TRUE(testing::within(testing::to_vector(y), yv, tol));
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
}

}  // namespace
}  // namespace tessera
