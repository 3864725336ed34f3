// Attention: the kernels' forward and backward against the double reference over awkward shapes
// (T = 1, 7, 67, 130; D = 8, 24, 64; H / Hkv = 4/4, 4/2, 4/1), tiles that do not divide T,
// sliding windows, non-causal, segment ids, soft-capping and bf16; the reference's gradients
// against central finite differences; keys and values of other segments having exactly no
// effect; the polynomial exp's error; determinism; FLOP counts; shape errors.
#include "tessera/ops/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>

#include "tessera/backends/cpu/attention_kernels.h"
#include "tessera/backends/cpu/attention_products.h"
#include "tessera/backends/cpu/peak.h"
#include "tessera/core/cpu_features.h"
#include "tessera/core/error.h"
#include "testing/op_test_util.h"

namespace tessera {
namespace {

using ops::AttentionDims;
using ops::AttentionOptions;
using testing::all_close;
using testing::fill_uniform;
using testing::for_each_isa;
using testing::OwnedTensor;
using testing::to_vector;

constexpr double kU32 = 0x1p-24;  // f32 unit roundoff
constexpr double kU16 = 0x1p-8;   // bf16 unit roundoff (8 significant bits)

// Tolerances. In f32 an output element is a chain of sums: D products per score, T terms in the
// softmax denominator and in P V (or in dQ, dK, dV), each adding at most u of its running
// magnitude, plus the exp's 1.6e-7 (< 3u) per probability; with inputs in [-1, 1] the scores
// and probabilities are O(1), so |error| <= c u (D + T) with a small c; c = 4 keeps a margin for
// the few operations beyond the sums.
double f32_tol(int64_t D, int64_t T) {
  return 4 * kU32 * static_cast<double>(D + T);
}

// Gradients are differences of O(1) terms (dS = P (dP - D)) that can cancel to ~0 element-wise
// (with T = 1 the exact dq and dk are 0), so their absolute tolerance scales with the larger of 1
// and the largest reference gradient.
double grad_scale(const std::vector<double>& g) {
  double m = 1;
  for (double v : g) m = std::max(m, std::abs(v));
  return m;
}

// Segment ids for B rows: runs of random length 1..T/2 with ids 1, 2, ..., then (for T > 3) a
// tail of padding with id 0.
std::vector<int32_t> make_segments(int64_t B, int64_t T, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> seg(B * T);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t pad = T > 3 ? T / 8 + 1 : 0;
    int32_t id = 1;
    for (int64_t i = 0; i < T - pad;) {
      const int64_t len = 1 + static_cast<int64_t>(rng() % std::max<int64_t>(1, T / 2));
      for (int64_t j = 0; j < len && i < T - pad; ++j, ++i) seg[b * T + i] = id;
      ++id;
    }
    for (int64_t i = T - pad; i < T; ++i) seg[b * T + i] = 0;
  }
  return seg;
}

// One attention problem: owned tensors filled with random data, plus the same values in double.
struct Problem {
  AttentionDims dims;
  DType dtype;
  AttentionOptions opt;
  OwnedTensor q, k, v, out, lse, dout, dq, dk, dv, seg;
  std::vector<double> qd, kd, vd, doutd;

  Problem(AttentionDims d, DType dt, AttentionOptions o, bool segments = false, uint64_t seed = 1)
      : dims(d),
        dtype(dt),
        opt(o),
        q(Shape{d.B, d.T, d.H, d.D}, dt),
        k(Shape{d.B, d.T, d.Hkv, d.D}, dt),
        v(Shape{d.B, d.T, d.Hkv, d.D}, dt),
        out(Shape{d.B, d.T, d.H, d.D}, dt),
        lse(Shape{d.B, d.H, d.T}, DType::kF32),
        dout(Shape{d.B, d.T, d.H, d.D}, dt),
        dq(Shape{d.B, d.T, d.H, d.D}, dt),
        dk(Shape{d.B, d.T, d.Hkv, d.D}, dt),
        dv(Shape{d.B, d.T, d.Hkv, d.D}, dt),
        seg(Shape{d.B, d.T}, DType::kI32) {
    qd = fill_uniform(q, seed * 4 + 0);
    kd = fill_uniform(k, seed * 4 + 1);
    vd = fill_uniform(v, seed * 4 + 2);
    doutd = fill_uniform(dout, seed * 4 + 3);
    if (segments) {
      std::vector<int32_t> s = make_segments(d.B, d.T, seed);
      std::memcpy(seg.t.data(), s.data(), s.size() * sizeof(int32_t));
      opt.segment_ids = seg.t;
    }
  }
  void forward() { ops::attention_fwd(q, k, v, out, lse, opt); }
  void backward() { ops::attention_bwd(dout, q, k, v, out, lse, dq, dk, dv, opt); }
};

std::string describe(const AttentionDims& d, const AttentionOptions& o) {
  return "B=" + std::to_string(d.B) + " T=" + std::to_string(d.T) + " H=" + std::to_string(d.H) +
         " Hkv=" + std::to_string(d.Hkv) + " D=" + std::to_string(d.D) +
         " causal=" + std::to_string(o.causal) + " window=" + std::to_string(o.sliding_window) +
         " segments=" + std::to_string(o.segment_ids.defined()) +
         " cap=" + std::to_string(o.logits_soft_cap) + " blocks=" + std::to_string(o.block_q) + "x" +
         std::to_string(o.block_k);
}

// Forward and backward of the kernels against the reference, in f32.
void check_f32(Problem& p) {
  SCOPED_TRACE(describe(p.dims, p.opt));
  std::vector<double> out, lse, dq, dk, dv;
  ops::attention_ref(p.dims, p.opt, p.qd, p.kd, p.vd, &out, &lse);
  ops::attention_bwd_ref(p.dims, p.opt, p.doutd, p.qd, p.kd, p.vd, &dq, &dk, &dv);
  const double tol = f32_tol(p.dims.D, p.dims.T);
  for_each_isa([&] {
    p.forward();
    EXPECT_TRUE(all_close(to_vector(p.out), out, tol, tol)) << "out";
    EXPECT_TRUE(all_close(to_vector(p.lse), lse, tol, tol)) << "lse";
    p.backward();
    EXPECT_TRUE(all_close(to_vector(p.dq), dq, tol, tol * grad_scale(dq))) << "dq";
    EXPECT_TRUE(all_close(to_vector(p.dk), dk, tol, tol * grad_scale(dk))) << "dk";
    EXPECT_TRUE(all_close(to_vector(p.dv), dv, tol, tol * grad_scale(dv))) << "dv";
  });
}

TEST(AttentionExp, RelativeErrorWithinStatedBound) {
  // The shared Cephes-style exp (simd_vec.h): stated maximum relative error 8.4e-8 on
  // [-87.3, 88.3], below which it flushes to 0 (exp(-87.3) = 1.3e-38, nothing a softmax keeps);
  // check 2e-7 on [-87.3, 88].
  const int64_t n = 1 << 18;
  std::vector<float> x(n), y(n);
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(-87.3 + (88.0 + 87.3) * i / (n - 1));
  for_each_isa([&] {
    cpu::attention_kernels().exp_f32(x.data(), y.data(), n);
    double worst = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double want = std::exp(static_cast<double>(x[i]));
      worst = std::max(worst, std::abs(y[i] - want) / want);
    }
    EXPECT_LT(worst, 2e-7);
    const float inf = std::numeric_limits<float>::infinity();
    std::vector<float> special = {-inf, -1000.0f, -87.5f, 0.0f, std::nanf("")}, out(special.size());
    cpu::attention_kernels().exp_f32(special.data(), out.data(), static_cast<int64_t>(special.size()));
    EXPECT_EQ(out[0], 0.0f);  // masked logits get probability exactly 0
    EXPECT_EQ(out[1], 0.0f);
    EXPECT_EQ(out[2], 0.0f);
    EXPECT_EQ(out[3], 1.0f);
    EXPECT_TRUE(std::isnan(out[4]));
  });
}

TEST(AttentionRef, GradientsMatchFiniteDifferences) {
  // Central differences of sum(dout * out) in double: truncation error ~h^2 = 1e-10 and rounding
  // ~1e-16 / h = 1e-11 relative, far below the 1e-7 checked.
  const AttentionDims d{1, 6, 2, 1, 3};
  std::vector<int32_t> seg = {1, 1, 2, 2, 2, 0};
  Tensor seg_t(seg.data(), Shape{1, 6}, DType::kI32);
  std::vector<AttentionOptions> variants(4);
  variants[1].sliding_window = 2;
  variants[2].segment_ids = seg_t;
  variants[2].causal = false;
  variants[3].logits_soft_cap = 0.7f;
  variants[3].scale = 1.3f;
  for (const AttentionOptions& opt : variants) {
    SCOPED_TRACE(describe(d, opt));
    std::mt19937_64 rng(5);
    std::uniform_real_distribution<double> dist(-1, 1);
    std::vector<double> q(6 * 2 * 3), k(6 * 3), v(6 * 3), dout(q.size());
    for (auto* x : {&q, &k, &v, &dout})
      for (double& e : *x) e = dist(rng);
    std::vector<double> dq, dk, dv;
    ops::attention_bwd_ref(d, opt, dout, q, k, v, &dq, &dk, &dv);
    auto loss = [&] {
      std::vector<double> out, lse;
      ops::attention_ref(d, opt, q, k, v, &out, &lse);
      double s = 0;
      for (size_t i = 0; i < out.size(); ++i) s += out[i] * dout[i];
      return s;
    };
    const double h = 1e-5;
    for (auto [x, g] : {std::pair{&q, &dq}, std::pair{&k, &dk}, std::pair{&v, &dv}}) {
      std::vector<double> numeric(x->size());
      for (size_t i = 0; i < x->size(); ++i) {
        const double keep = (*x)[i];
        (*x)[i] = keep + h;
        const double up = loss();
        (*x)[i] = keep - h;
        const double down = loss();
        (*x)[i] = keep;
        numeric[i] = (up - down) / (2 * h);
      }
      EXPECT_TRUE(all_close(*g, numeric, 1e-7, 1e-8));
    }
  }
}

TEST(Attention, MatchesReferenceOverShapes) {
  for (int64_t T : {1, 7, 67, 130})
    for (int64_t D : {8, 24, 64})
      for (int64_t Hkv : {4, 2, 1}) {
        Problem p({T < 67 ? 2 : 1, T, 4, Hkv, D}, DType::kF32, {}, false, T * 100 + D + Hkv);
        check_f32(p);
      }
}

TEST(Attention, MatchesReferenceWithOptionsAndOddTiles) {
  struct Variant {
    bool causal;
    int64_t window;
    bool segments;
    float cap;
    int64_t block_q, block_k;
  };
  const Variant variants[] = {
      {true, 0, false, 0, 5, 7},   // tiles dividing nothing
      {false, 0, false, 0, 0, 0},  // non-causal
      {false, 0, false, 0, 9, 4},
      {true, 9, false, 0, 0, 0},                  // sliding window narrower than a tile
      {true, 9, false, 0, 4, 5},                  // ... wider than a tile: whole tiles skipped
      {true, 70, false, 0, 0, 0},                 // window wider than the default tile
      {false, 6, false, 0, 8, 3},                 // symmetric band
      {false, int64_t{1} << 40, false, 0, 0, 0},  // a window wider than T hides nothing
      {true, 0, true, 0, 0, 0},                   // packed segments
      {true, 0, true, 0, 6, 5},                   // ... with tiles skipped between segments
      {false, 0, true, 0, 7, 6},
      {true, 0, false, 30.0f, 0, 0},  // soft cap (Gemma 2 uses 50; 30 is active at these scales)
      {true, 0, false, 0.5f, 5, 3},   // a cap that bends almost every logit
      {true, 12, true, 2.0f, 6, 7},   // everything at once
      {false, 5, true, 0, 4, 6},      // band within segments
  };
  for (const Variant& var : variants)
    for (int64_t Hkv : {4, 1}) {
      AttentionOptions opt;
      opt.causal = var.causal, opt.sliding_window = var.window, opt.logits_soft_cap = var.cap;
      opt.block_q = var.block_q, opt.block_k = var.block_k;
      Problem p({2, 67, 4, Hkv, 24}, DType::kF32, opt, var.segments, 7 + Hkv);
      check_f32(p);
    }
}

TEST(Attention, ExplicitScale) {
  AttentionOptions opt;
  opt.scale = 0.9f;  // larger than 1/sqrt(D): sharper softmax
  Problem p({1, 33, 2, 1, 16}, DType::kF32, opt);
  check_f32(p);
}

// Keys and values of other segments must have no effect at all: a query's out and lse, its dq,
// and the dk, dv of its own segment's keys are bit-for-bit unchanged when they change.
TEST(Attention, OtherSegmentsHaveExactlyNoEffect) {
  for (int64_t block : {0, 5}) {
    AttentionOptions opt;
    opt.block_q = opt.block_k = block;
    for (bool causal : {true, false}) {
      opt.causal = causal;
      for_each_isa([&] {
        Problem p({1, 130, 4, 2, 24}, DType::kF32, opt, true, 3);
        const int32_t* seg = p.seg.t.ptr<int32_t>();
        p.forward();
        p.backward();
        const std::vector<double> out = to_vector(p.out), lse = to_vector(p.lse), dq = to_vector(p.dq),
                                  dk = to_vector(p.dk), dv = to_vector(p.dv);
        // Perturb every key and value of the segment holding position 60.
        const int32_t victim = seg[60];
        for (int64_t j = 0; j < 130; ++j)
          if (seg[j] == victim)
            for (int64_t x = 0; x < 2 * 24; ++x) {
              p.k.t.ptr<float>()[j * 48 + x] += 3.0f;
              p.v.t.ptr<float>()[j * 48 + x] -= 5.0f;
            }
        p.forward();
        p.backward();
        const std::vector<double> out2 = to_vector(p.out), lse2 = to_vector(p.lse), dq2 = to_vector(p.dq),
                                  dk2 = to_vector(p.dk), dv2 = to_vector(p.dv);
        int64_t checked = 0;
        for (int64_t i = 0; i < 130; ++i) {
          if (seg[i] == victim) continue;
          ++checked;
          for (int64_t x = 0; x < 4 * 24; ++x) {
            ASSERT_EQ(out2[i * 96 + x], out[i * 96 + x]) << "out at " << i;
            ASSERT_EQ(dq2[i * 96 + x], dq[i * 96 + x]) << "dq at " << i;
          }
          for (int64_t x = 0; x < 2 * 24; ++x) {
            ASSERT_EQ(dk2[i * 48 + x], dk[i * 48 + x]) << "dk at " << i;
            ASSERT_EQ(dv2[i * 48 + x], dv[i * 48 + x]) << "dv at " << i;
          }
          for (int64_t h = 0; h < 4; ++h) ASSERT_EQ(lse2[h * 130 + i], lse[h * 130 + i]);
        }
        ASSERT_GT(checked, 20);
        ASSERT_NE(to_vector(p.out), out);  // the perturbation did reach its own segment
      });
    }
  }
}

// bf16: inputs are bf16 values (the reference sees the same values), all arithmetic is f32 and
// each output is rounded once to bf16 (relative error <= u_bf16 = 2^-8), so out, dq, dk, dv get
// rtol = u_bf16 on top of the f32 tolerance. The backward also reads D_i = rowsum(dout * out) from
// the bf16-rounded out; its D rounding errors (each <= u_bf16 |out_d|, independent) add like a
// random walk: |dD_i| ~ u_bf16 sqrt(D) max|dout_d out_d| <= u_bf16 sqrt(D). That moves dS_ij by
// P_ij dD_i and so dq_i by scale * |dD_i| * max|k| ~ u_bf16 (scale = 1/sqrt(D)); dk_j likewise,
// times the attention key j receives, which averages 1 over the keys. So the gradients get
// atol = u_bf16 max(1, max|g|) besides (the worst case, all roundings aligned, is sqrt(D) times
// that; the largest error seen here is 0.2 u_bf16).
// bf16 attention's products pinned to one path for the scope (attention_products.h).
struct PinProducts {
  explicit PinProducts(cpu::Bf16Products p) { cpu::pin_bf16_attention_products(p); }
  ~PinProducts() { cpu::pin_bf16_attention_products(std::nullopt); }
  PinProducts(const PinProducts&) = delete;
  PinProducts& operator=(const PinProducts&) = delete;
};

// A bf16 problem's forward and backward against the reference with the bounds stated above
// Bf16MatchesReference; out_atol is out's absolute bound beyond the f32 one (0 on the f32 path).
void check_bf16(Problem& p, double out_atol, const std::function<void(const std::function<void()>&)>& on) {
  const AttentionDims& d = p.dims;
  SCOPED_TRACE(describe(d, p.opt));
  std::vector<double> out, lse, dq, dk, dv;
  ops::attention_ref(d, p.opt, p.qd, p.kd, p.vd, &out, &lse);
  ops::attention_bwd_ref(d, p.opt, p.doutd, p.qd, p.kd, p.vd, &dq, &dk, &dv);
  const double tol = f32_tol(d.D, d.T), grad_tol = tol + kU16;
  on([&] {
    p.forward();
    EXPECT_TRUE(all_close(to_vector(p.out), out, kU16 + tol, out_atol + tol)) << "out";
    EXPECT_TRUE(all_close(to_vector(p.lse), lse, tol, tol)) << "lse";
    p.backward();
    EXPECT_TRUE(all_close(to_vector(p.dq), dq, kU16 + tol, grad_tol * grad_scale(dq))) << "dq";
    EXPECT_TRUE(all_close(to_vector(p.dk), dk, kU16 + tol, grad_tol * grad_scale(dk))) << "dk";
    EXPECT_TRUE(all_close(to_vector(p.dv), dv, kU16 + tol, grad_tol * grad_scale(dv))) << "dv";
  });
}

TEST(Attention, Bf16MatchesReference) {
  const PinProducts f32_path(cpu::Bf16Products::kF32);
  for (int64_t T : {7, 130})
    for (int64_t Hkv : {4, 1})
      for (bool segments : {false, true}) {
        Problem p(AttentionDims{2, T, 4, Hkv, 64}, DType::kBF16, AttentionOptions{}, segments, 11);
        check_bf16(p, 0.0, [](const std::function<void()>& body) { for_each_isa(body); });
      }
}

// bf16 on bf16 products (attention_products.h): the AMX tiles where this CPU has them, and
// vdpbf16ps wherever the AVX-512 kernels run (chosen by itself only where it outpaces the f32 FMAs,
// pinned here). Both need D and key tiles that are multiples of 32. P is rounded to bf16 for its
// product with V, as FlashAttention does on GPUs: each probability moves by at most 2^-9 relative,
// so out moves by at most 2^-9 max|v| = u_bf16 / 2 (inputs in [-1, 1]) absolutely, besides its
// own rounding (rtol u_bf16). lse comes from the f32 probabilities, as on the f32 path. The
// gradients keep Bf16MatchesReference's bounds.
void check_bf16_products(cpu::Bf16Products products) {
  const Isa before = active_isa();
  set_active_isa(Isa::kAvx512);
  const PinProducts pinned(products);
  AttentionOptions window, capped, full;
  window.sliding_window = 37;
  capped.logits_soft_cap = 5.0f;
  full.causal = false;
  for (int64_t T : {7, 128, 200})  // 128: K and V tiles read from the tensors; 7, 200: from copies
    for (int64_t Hkv : {4, 1})
      for (const AttentionOptions& opt : {AttentionOptions{}, window, capped, full})
        for (bool segments : {false, true}) {
          Problem p(AttentionDims{2, T, 4, Hkv, 64}, DType::kBF16, opt, segments, 13);
          check_bf16(p, kU16 / 2, [](const std::function<void()>& body) { body(); });
        }
  set_active_isa(before);
}

TEST(Attention, Bf16OnTheAmxTilesMatchesReference) {
  if (!amx_bf16_usable() || !isa_supported(Isa::kAvx512)) GTEST_SKIP() << "this CPU has no AMX tiles";
  check_bf16_products(cpu::Bf16Products::kTiles);
}

TEST(Attention, Bf16OnTheDotProductMatchesReference) {
  if (!isa_supported(Isa::kAvx512)) GTEST_SKIP() << "this CPU cannot run the AVX-512 kernels";
  check_bf16_products(cpu::Bf16Products::kDot);
}

// The tiles where AMX is usable; vdpbf16ps where it outpaces the f32 FMAs by half again (AMD
// Zen 4/5 measure about 2x, an AMX Xeon 0.5x); else f32, and always f32 below AVX-512.
TEST(Attention, Bf16ProductsFollowTheCalibration) {
  using cpu::Bf16Products;
  EXPECT_EQ(cpu::choose_products(true, true, 0.5), Bf16Products::kTiles);
  EXPECT_EQ(cpu::choose_products(true, false, 2.0), Bf16Products::kDot);
  EXPECT_EQ(cpu::choose_products(true, false, 1.0), Bf16Products::kF32);
  EXPECT_EQ(cpu::choose_products(false, true, 2.0), Bf16Products::kF32);
  EXPECT_EQ(cpu::choose_products(false, false, 2.0), Bf16Products::kF32);
  if (!isa_supported(Isa::kAvx512)) {
    EXPECT_EQ(cpu::bf16_dot_speedup(), 0.0);
    return;
  }
  const double speedup = cpu::bf16_dot_speedup();
  EXPECT_GT(speedup, 0.2);
  EXPECT_LT(speedup, 8.0);
  const Isa before = active_isa();
  set_active_isa(Isa::kAvx512);
  EXPECT_EQ(cpu::bf16_attention_products(), cpu::choose_products(true, cpu::amx_tiles_in_use(), speedup));
  set_active_isa(Isa::kAvx2);
  EXPECT_EQ(cpu::bf16_attention_products(), Bf16Products::kF32);
  set_active_isa(before);
}

// The backward splits a head's query tiles over several tasks when B * Hkv leaves threads idle
// (here 1 head on 3 threads), summing dK, dV partials in a fixed order: still the reference, and
// the same bits on every run.
TEST(Attention, BackwardDeterministicAcrossSplits) {
  const int threads = num_threads();
  for (int n : {1, 3}) {
    set_num_threads(n);
    AttentionOptions opt;
    opt.block_q = 16;
    Problem p({1, 130, 3, 1, 64}, DType::kF32, opt, false, 17);
    check_f32(p);
    p.forward();
    p.backward();
    const std::vector<double> dk = to_vector(p.dk), dq = to_vector(p.dq);
    p.backward();
    EXPECT_EQ(to_vector(p.dk), dk);
    EXPECT_EQ(to_vector(p.dq), dq);
  }
  set_num_threads(threads);
}

TEST(Attention, FlopCounts) {
  // Causal: 2*B*T^2*H*D; non-causal twice that; window W: 4*B*(T*W - W^2/2)*H*D.
  EXPECT_DOUBLE_EQ(ops::attention_fwd_flops(2, 1024, 12, 64), 2.0 * 2 * 1024 * 1024 * 12 * 64);
  EXPECT_DOUBLE_EQ(ops::attention_fwd_flops(2, 1024, 12, 64, 0, false), 4.0 * 2 * 1024 * 1024 * 12 * 64);
  EXPECT_DOUBLE_EQ(ops::attention_fwd_flops(1, 4096, 8, 128, 512),
                   4.0 * (4096.0 * 512 - 512.0 * 512 / 2) * 8 * 128);
  EXPECT_DOUBLE_EQ(ops::attention_fwd_flops(1, 100, 1, 8, 100), ops::attention_fwd_flops(1, 100, 1, 8));
  EXPECT_DOUBLE_EQ(ops::attention_bwd_flops(2, 1024, 12, 64),
                   2.5 * ops::attention_fwd_flops(2, 1024, 12, 64));
}

TEST(Attention, RejectsBadShapes) {
  OwnedTensor q(Shape{1, 8, 4, 16}, DType::kF32), k(Shape{1, 8, 3, 16}, DType::kF32),
      k2(Shape{1, 8, 2, 16}, DType::kF32), kb(Shape{1, 8, 2, 16}, DType::kBF16),
      out(Shape{1, 8, 4, 16}, DType::kF32), lse(Shape{1, 4, 8}, DType::kF32),
      bad_lse(Shape{1, 8, 4}, DType::kF32), seg(Shape{1, 7}, DType::kI32);
  auto kind_of = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return e.kind();
    }
    return ErrorKind::kInternal;
  };
  EXPECT_EQ(kind_of([&] { ops::attention_fwd(q, k, k, out, lse); }), ErrorKind::kShape);    // 4 % 3 != 0
  EXPECT_EQ(kind_of([&] { ops::attention_fwd(q, k2, kb, out, lse); }), ErrorKind::kShape);  // mixed dtypes
  EXPECT_EQ(kind_of([&] { ops::attention_fwd(q, k2, k2, out, bad_lse); }), ErrorKind::kShape);
  AttentionOptions opt;
  opt.segment_ids = seg;
  EXPECT_EQ(kind_of([&] { ops::attention_fwd(q, k2, k2, out, lse, opt); }), ErrorKind::kShape);
  opt = {};
  opt.scale = -1;
  EXPECT_EQ(kind_of([&] { ops::attention_fwd(q, k2, k2, out, lse, opt); }), ErrorKind::kShape);
  EXPECT_EQ(kind_of([&] { ops::attention_bwd(out, q, k2, k2, out, lse, out, k2, k); }), ErrorKind::kShape);
  try {
    ops::attention_fwd(q, k, k, out, lse);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("attention_fwd"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessera
