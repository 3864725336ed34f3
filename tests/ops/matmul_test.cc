// matmul against its double reference: awkward sizes, all four transpose combinations,
// accumulate, f32 and bf16 inputs, f32 and bf16 outputs, empty sizes, the linear-layer backward
// against central finite differences, the primitive cache, and the shape errors.
//
// Tolerances (elementwise, derived rather than tuned). Each C[i,j] is a sum of K products plus,
// with accumulate, the old C[i,j]: n = K + 1 terms at most. Whatever the order oneDNN sums them in
// (blocked, split over threads, fused multiply-add), f32 arithmetic with unit roundoff u = 2^-24
// gives |computed - exact| <= gamma_n * S, gamma_n = n·u / (1 - n·u), where
// S = sum_k |a_ik|·|b_kj| + |c_ij| is the reference run on absolute values. bf16 inputs change
// nothing: the inputs are exact bf16 values, their products are exact in f32 (8 + 8 significant
// bits <= 24), and accumulation is f32, so the same bound holds against the double reference of the
// same inputs. A bf16 output adds one rounding to nearest with unit roundoff 2^-8:
// |bf16(y) - exact| <= 2^-8·|y| + e <= 2^-8·(|exact| + e) + e, where e is the f32 bound.
// The dtypes do not depend on Tessera's active ISA (oneDNN picks its own kernels), so these tests do
// not loop over for_each_isa.
#include "tessera/ops/matmul.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "tessera/backends/cpu/onednn_matmul.h"
#include "tessera/core/cpu_features.h"
#include "tessera/core/error.h"
#include "testing/op_test_util.h"

namespace tessera {
namespace {

using ops::MatmulOptions;
using testing::OwnedTensor;

constexpr double kF32Unit = 0x1p-24;
constexpr double kBf16Unit = 0x1p-8;

// Every element satisfies |got - want| <= bound[i]; reports the worst offender.
::testing::AssertionResult within_bounds(const std::vector<double>& got, const std::vector<double>& want,
                                         const std::vector<double>& bound) {
  size_t worst = got.size();
  double worst_ratio = 1;
  for (size_t i = 0; i < got.size(); ++i) {
    double ratio = std::abs(got[i] - want[i]) / bound[i];
    if (!(ratio <= worst_ratio)) {  // also catches NaN
      worst = i;
      worst_ratio = std::isnan(ratio) ? INFINITY : ratio;
    }
  }
  if (worst == got.size()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "element " << worst << ": got " << got[worst] << ", want " << want[worst] << ", allowed error "
         << bound[worst] << " (exceeded " << worst_ratio << "x)";
}

struct Case {
  int64_t m, n, k;
  MatmulOptions opts;
  DType ab = DType::kF32;
  DType c = DType::kF32;
};

std::string describe(const Case& t) {
  return cpu::gemm_shape_str({.m = t.m,
                              .n = t.n,
                              .k = t.k,
                              .trans_a = t.opts.trans_a,
                              .trans_b = t.opts.trans_b,
                              .ab_dtype = t.ab,
                              .c_dtype = t.c,
                              .accumulate = t.opts.accumulate});
}

// Runs one case against matmul_ref with the bound described at the top of the file.
void check_case(const Case& t, uint64_t seed) {
  SCOPED_TRACE(describe(t));
  const auto& o = t.opts;
  OwnedTensor a(o.trans_a ? Shape{t.k, t.m} : Shape{t.m, t.k}, t.ab);
  OwnedTensor b(o.trans_b ? Shape{t.n, t.k} : Shape{t.k, t.n}, t.ab);
  OwnedTensor c(Shape{t.m, t.n}, t.c);
  std::vector<double> av = testing::fill_uniform(a, seed), bv = testing::fill_uniform(b, seed + 1);
  std::vector<double> cv(static_cast<size_t>(t.m * t.n), 0.0);
  if (o.accumulate) {
    cv = testing::fill_uniform(c, seed + 2);
  } else {
    // Overwrite must not read C: start from NaN, which would poison any sum it entered.
    for (int64_t i = 0; i < c.t.numel(); ++i) {
      if (t.c == DType::kF32)
        c.t.ptr<float>()[i] = NAN;
      else
        c.t.ptr<uint16_t>()[i] = 0x7fc0;
    }
  }
  std::vector<double> want = cv;
  ops::matmul_ref(av.data(), bv.data(), want.data(), t.m, t.n, t.k, o);
  // S = |a|·|b| (+ |c|): the reference on absolute values.
  auto abs_of = [](std::vector<double> v) {
    for (double& x : v) x = std::abs(x);
    return v;
  };
  std::vector<double> aa = abs_of(av), ba = abs_of(bv), scale = abs_of(cv);
  ops::matmul_ref(aa.data(), ba.data(), scale.data(), t.m, t.n, t.k, o);

  const double n_terms = static_cast<double>(t.k + (o.accumulate ? 1 : 0));
  const double gamma = n_terms * kF32Unit / (1 - n_terms * kF32Unit);
  std::vector<double> bound(want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    double e = gamma * scale[i];
    bound[i] = t.c == DType::kBF16 ? e + kBf16Unit * (std::abs(want[i]) + e) : e;
    // An exact zero result (all products zero) must come out exactly zero; give it the smallest
    // positive bound so the ratio test stays well defined.
    if (bound[i] == 0) bound[i] = 1e-300;
  }
  ops::matmul(a, b, c, o);
  EXPECT_TRUE(within_bounds(testing::to_vector(c), want, bound));
}

const int64_t kSizes[] = {1, 3, 17, 67, 130};

std::vector<MatmulOptions> all_transposes(bool accumulate) {
  return {{false, false, accumulate},
          {false, true, accumulate},
          {true, false, accumulate},
          {true, true, accumulate}};
}

TEST(Matmul, F32AllSizesAllTransposes) {
  uint64_t seed = 1;
  for (int64_t m : kSizes)
    for (int64_t n : kSizes)
      for (int64_t k : kSizes)
        for (MatmulOptions o : all_transposes(false)) check_case({m, n, k, o}, seed += 3);
}

TEST(Matmul, F32Accumulate) {
  uint64_t seed = 1000;
  for (int64_t m : {1, 17, 130})
    for (int64_t n : {3, 67})
      for (int64_t k : {1, 17, 130})
        for (MatmulOptions o : all_transposes(true)) check_case({m, n, k, o}, seed += 3);
}

TEST(Matmul, Bf16InputsF32Output) {
  uint64_t seed = 2000;
  for (int64_t m : kSizes)
    for (int64_t n : kSizes)
      for (int64_t k : kSizes)
        for (MatmulOptions o : all_transposes(false)) check_case({m, n, k, o, DType::kBF16}, seed += 3);
}

TEST(Matmul, Bf16InputsF32OutputAccumulate) {
  uint64_t seed = 3000;
  for (int64_t m : {1, 17, 130})
    for (int64_t k : {3, 67, 130})
      for (MatmulOptions o : all_transposes(true)) check_case({m, 67, k, o, DType::kBF16}, seed += 3);
}

TEST(Matmul, Bf16Output) {
  uint64_t seed = 4000;
  for (bool acc : {false, true})
    for (int64_t m : {1, 17, 130})
      for (int64_t k : {1, 67, 130})
        for (MatmulOptions o : all_transposes(acc))
          check_case({m, 3, k, o, DType::kBF16, DType::kBF16}, seed += 3);
}

// bf16 GEMMs widened to f32, the path of CPUs where oneDNN has no bf16 GEMM, forced here on every
// CPU and held to the same bounds (the products and the one rounding of C are the same). A small
// chunk budget makes the splits run several chunks: M = 2100 rows of A and C (A not transposed)
// and K = 2100 rows of A and B (A transposed, B not) in chunks of 1024, the later K chunks
// accumulating into C in f32; both transposed is widened whole. The buffer grows to the size that
// tessera compile predicts (widened_operands_bytes).
TEST(Matmul, Bf16WidenedToF32) {
  struct Restore {
    ~Restore() { cpu::onednn_matmul_force_widened_bf16(false); }
  } restore;
  uint64_t seed = 9000;
  cpu::onednn_matmul_force_widened_bf16(true);
  for (DType c : {DType::kF32, DType::kBF16})
    for (bool acc : {false, true})
      for (MatmulOptions o : all_transposes(acc)) check_case({17, 67, 130, o, DType::kBF16, c}, seed += 3);
  EXPECT_NE(cpu::onednn_matmul_impl({.m = 17, .n = 67, .k = 130, .ab_dtype = DType::kBF16})
                .find("(bf16 widened to f32)"),
            std::string::npos);
  cpu::onednn_matmul_force_widened_bf16(true, 64 << 10);  // also frees the buffer
  size_t predicted = 0;  // tessera compile's figure for the buffer: the largest GEMM's
  for (DType c : {DType::kF32, DType::kBF16})
    for (bool acc : {false, true})
      for (MatmulOptions o : all_transposes(acc))
        for (const Case& t :
             {Case{2100, 67, 130, o, DType::kBF16, c}, Case{67, 130, 2100, o, DType::kBF16, c}}) {
          check_case(t, seed += 3);
          predicted = std::max(predicted, cpu::widened_operands_bytes({.m = t.m,
                                                                       .n = t.n,
                                                                       .k = t.k,
                                                                       .trans_a = o.trans_a,
                                                                       .trans_b = o.trans_b,
                                                                       .ab_dtype = t.ab,
                                                                       .c_dtype = t.c}));
        }
  EXPECT_GT(predicted, 0u);
  constexpr size_t kPage = size_t{2} << 20;  // the buffer is an Arena: whole 2 MiB pages
  EXPECT_EQ(cpu::onednn_matmul_widened_bytes(), (predicted + kPage - 1) / kPage * kPage);
}

TEST(Matmul, OneThreadAndAllThreads) {
  // The thread count is part of the primitive cache key; both must give correct results.
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  check_case({130, 67, 130, {.trans_b = true}}, 6000);
  omp_set_num_threads(threads);
  check_case({130, 67, 130, {.trans_b = true}}, 6001);
}

TEST(Matmul, EmptySizes) {
  OwnedTensor a(Shape{3, 0}, DType::kF32), b(Shape{0, 2}, DType::kF32), c(Shape{3, 2}, DType::kF32);
  std::vector<double> c0 = testing::fill_uniform(c, 7);
  ops::matmul(a, b, c, {.accumulate = true});  // K = 0: an empty sum added, C unchanged
  EXPECT_EQ(testing::to_vector(c), c0);
  ops::matmul(a, b, c);  // K = 0, overwrite: C = 0
  EXPECT_EQ(testing::to_vector(c), std::vector<double>(6, 0.0));
  OwnedTensor a0(Shape{0, 4}, DType::kF32), b0(Shape{4, 2}, DType::kF32), c00(Shape{0, 2}, DType::kF32);
  ops::matmul(a0, b0, c00);  // M = 0: nothing to do, no error
}

// With M >= 1024 and B a weight (f32 not trans_a, bf16 neither transposed) the GEMM runs from a
// copy of B in oneDNN's preferred layout (onednn_matmul.cc); the bound is the same. Ragged N and K
// exercise the layout's padding, and a second call with other values checks that the copy is made
// afresh. Where oneDNN's AVX-512 GEMMs run, every GEMM the rule names is copied; elsewhere (AVX2's
// gemm:jit reads B as it is, in either orientation) nothing is. A widened bf16 GEMM follows the
// f32 rule.
bool reorders_b(const cpu::GemmShape& g) {
  return cpu::onednn_matmul_impl(g).find("(B reordered)") != std::string::npos;
}

TEST(Matmul, FromTheBlockedCopyOfB) {
  uint64_t seed = 7000;
  for (DType ab : {DType::kF32, DType::kBF16})
    for (bool accumulate : {false, true})
      for (bool trans_b : {false, true}) {
        const Case t{1030, 67, 130, {.trans_b = trans_b, .accumulate = accumulate}, ab};
        const bool widened = ab == DType::kBF16 && !cpu::onednn_matmul_native_bf16();
        const bool blocked = ab == DType::kF32 || widened || !trans_b;
        const bool reorders = reorders_b(
            {.m = t.m, .n = t.n, .k = t.k, .trans_b = trans_b, .ab_dtype = ab, .accumulate = accumulate});
        if (!isa_supported(Isa::kAvx512)) {
          EXPECT_FALSE(reorders);
        } else if (!widened) {
          EXPECT_EQ(reorders, blocked);
        } else if (!blocked) {
          EXPECT_FALSE(reorders);
        }
        check_case(t, seed += 3);
        check_case(t, seed += 3);
      }
  // The weight gradient (trans_a) and short GEMMs keep B as it is.
  EXPECT_FALSE(reorders_b({.m = 1030, .n = 67, .k = 130, .trans_a = true}));
  EXPECT_FALSE(reorders_b({.m = 1000, .n = 67, .k = 130}));
}

// tessera compile predicts the blocked copy's size without oneDNN (blocked_b_copy_bytes): oneDNN's
// own size, padding included (on AVX-512, K 130 -> 144 in f32, 160 in bf16; N 67 -> 128; without
// AVX-512, no copy).
TEST(Matmul, BlockedCopySizeIsPredicted) {
  const bool avx512 = isa_supported(Isa::kAvx512);
  const std::vector<std::pair<int64_t, int64_t>> nk = {{768, 768}, {2048, 768}, {768, 32000},
                                                       {67, 130},  {130, 67},   {1000, 1000}};
  for (DType ab : {DType::kF32, DType::kBF16}) {
    if (ab == DType::kBF16 && !cpu::onednn_matmul_native_bf16()) continue;  // widened (Bf16WidenedToF32)
    for (bool trans_b : {false, true})
      for (const auto& [n, k] : nk)
        for (int64_t m : {1000, 1030}) {
          const cpu::GemmShape g{.m = m, .n = n, .k = k, .trans_b = trans_b, .ab_dtype = ab};
          EXPECT_EQ(cpu::blocked_b_copy_bytes(g), cpu::onednn_matmul_blocked_bytes(g))
              << cpu::gemm_shape_str(g);
        }
  }
  EXPECT_EQ(cpu::blocked_b_copy_bytes({.m = 1030, .n = 67, .k = 130}), avx512 ? size_t{144 * 128 * 4} : 0u);
  EXPECT_EQ(cpu::blocked_b_copy_bytes({.m = 1030, .n = 67, .k = 130, .ab_dtype = DType::kBF16}),
            avx512 ? size_t{160 * 128 * 2} : 0u);
  EXPECT_EQ(cpu::blocked_b_copy_bytes({.m = 1030, .n = 67, .k = 130, .trans_a = true}), 0u);
  // Over 128 MiB (a large vocabulary's output projection): no copy.
  EXPECT_EQ(cpu::blocked_b_copy_bytes({.m = 8192, .n = 2048, .k = 128256}), 0u);
}

TEST(Matmul, PrimitivesAreCached) {
  OwnedTensor a(Shape{5, 7}, DType::kF32), b(Shape{7, 11}, DType::kF32), c(Shape{5, 11}, DType::kF32);
  testing::fill_uniform(a, 1);
  testing::fill_uniform(b, 2);
  ops::matmul(a, b, c);
  const size_t n = cpu::onednn_matmul_cache_size();
  ops::matmul(a, b, c);
  EXPECT_EQ(cpu::onednn_matmul_cache_size(), n);
  ops::matmul(a, b, c, {.accumulate = true});  // a different primitive (sum post-op)
  EXPECT_EQ(cpu::onednn_matmul_cache_size(), n + 1);
}

TEST(Matmul, FlopAndByteCounts) {
  EXPECT_EQ(ops::matmul_flops(8192, 768, 2048), int64_t{2} * 8192 * 768 * 2048);
  // bf16 A [4, 5] and B [5, 6], f32 C [4, 6] read and written: (20 + 30) * 2 + 24 * 4 * 2.
  EXPECT_EQ(ops::matmul_bytes(4, 6, 5, DType::kBF16, DType::kF32, true), 100 + 192);
  EXPECT_EQ(ops::matmul_bytes(4, 6, 5, DType::kF32, DType::kF32, false), 200 + 96);
}

// A oneDNN failure surfaces as tessera::Error(kRuntime) naming the problem. oneDNN 2.6 has no
// f32 x f32 -> bf16 GEMM (the op entry rejects it first, so this goes to the backend directly);
// should a later oneDNN add one, the call simply succeeds.
TEST(Matmul, OnednnErrorsBecomeRuntimeErrors) {
  OwnedTensor a(Shape{3, 7}, DType::kF32), b(Shape{7, 5}, DType::kF32), c(Shape{3, 5}, DType::kBF16);
  testing::fill_uniform(a, 1);
  testing::fill_uniform(b, 2);
  try {
    cpu::onednn_matmul({.m = 3, .n = 5, .k = 7, .c_dtype = DType::kBF16}, a.t.data(), b.t.data(), c.t.data());
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kRuntime);
    EXPECT_NE(std::string(e.what()).find("oneDNN matmul (M=3 N=5 K=7, float32 x float32 -> bfloat16)"),
              std::string::npos)
        << e.what();
  }
}

// Linear layer y = x·W (W stored [in, out]) and loss L = sum(g ∘ y): dL/dx = g·Wᵀ, dL/dW = xᵀ·g.
// Checks that the transposed calls of the backward pass (dx with trans_b, dW += with trans_a and
// accumulate) match central finite differences of L computed with the double reference. L is
// bilinear, so central differences are exact up to double rounding (relative ~1e-16 / h).
TEST(Matmul, LinearBackwardMatchesFiniteDifferences) {
  const int64_t n = 5, in = 7, out = 3;
  OwnedTensor x(Shape{n, in}, DType::kF32), w(Shape{in, out}, DType::kF32), g(Shape{n, out}, DType::kF32);
  OwnedTensor dx(Shape{n, in}, DType::kF32), dw(Shape{in, out}, DType::kF32);
  std::vector<double> xv = testing::fill_uniform(x, 11), wv = testing::fill_uniform(w, 12);
  std::vector<double> gv = testing::fill_uniform(g, 13), dw0 = testing::fill_uniform(dw, 14);
  auto loss = [&](const std::vector<double>& xs, const std::vector<double>& ws) {
    std::vector<double> y(static_cast<size_t>(n * out));
    ops::matmul_ref(xs.data(), ws.data(), y.data(), n, out, in);
    double l = 0;
    for (size_t i = 0; i < y.size(); ++i) l += gv[i] * y[i];
    return l;
  };
  ops::matmul(g, w, dx, {.trans_b = true});
  ops::matmul(x, g, dw, {.trans_a = true, .accumulate = true});
  const double h = 1e-3;
  // Each gradient entry is a sum of at most max(n, out) = 5 f32 products of values in [-1, 1]:
  // gamma_6 * 5 < 2e-6 covers the f32 rounding; FD error is below 1e-12.
  const double tol = 2e-6;
  for (int64_t i = 0; i < n * in; ++i) {
    auto xp = xv, xm = xv;
    xp[i] += h;
    xm[i] -= h;
    double fd = (loss(xp, wv) - loss(xm, wv)) / (2 * h);
    EXPECT_NEAR(dx.t.ptr<float>()[i], fd, tol) << "dx[" << i << "]";
  }
  for (int64_t i = 0; i < in * out; ++i) {
    auto wp = wv, wm = wv;
    wp[i] += h;
    wm[i] -= h;
    double fd = (loss(xv, wp) - loss(xv, wm)) / (2 * h);
    EXPECT_NEAR(dw.t.ptr<float>()[i], dw0[i] + fd, tol) << "dw[" << i << "]";
  }
}

// Expects matmul to throw kShape with every fragment in the message.
void expect_shape_error(const Tensor& a, const Tensor& b, const Tensor& c, MatmulOptions o,
                        std::vector<std::string> fragments) {
  try {
    ops::matmul(a, b, c, o);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kShape);
    for (const auto& f : fragments) EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << e.what();
  }
}

TEST(Matmul, ShapeErrors) {
  OwnedTensor a(Shape{4, 5}, DType::kF32), b(Shape{6, 3}, DType::kF32), c(Shape{4, 3}, DType::kF32);
  expect_shape_error(a, b, c, {},
                     {"matmul: inner dimensions differ", "op(a) is [4, 5]", "op(b) is [6, 3]",
                      "float32[6, 3]", "expected op(b) to have 5 rows"});
  OwnedTensor bt(Shape{3, 5}, DType::kF32);
  expect_shape_error(
      a, bt, c, {.trans_a = true, .trans_b = true},
      {"op(a) is [5, 4] (a float32[4, 5], trans_a)", "op(b) is [5, 3] (b float32[3, 5], trans_b)"});
  OwnedTensor c2(Shape{4, 2}, DType::kF32);
  expect_shape_error(a, bt, c2, {.trans_b = true}, {"matmul: c is float32[4, 2], expected [4, 3]"});
  OwnedTensor b16(Shape{5, 3}, DType::kBF16);
  expect_shape_error(a, b16, c, {}, {"a and b must be both float32 or both bfloat16", "bfloat16[5, 3]"});
  OwnedTensor c16(Shape{4, 3}, DType::kBF16);
  expect_shape_error(a, bt, c16, {.trans_b = true}, {"float32 inputs need a float32 c", "bfloat16[4, 3]"});
  OwnedTensor a3(Shape{2, 2, 5}, DType::kF32);
  expect_shape_error(a3, bt, c, {.trans_b = true}, {"must be 2-D", "float32[2, 2, 5]"});
  expect_shape_error(a, bt, Tensor(a.t.data(), Shape{4, 3}, DType::kF32), {.trans_b = true}, {"overlaps"});
}

}  // namespace
}  // namespace tessera
