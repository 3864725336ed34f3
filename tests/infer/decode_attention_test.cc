// ops::decode_attention against its double reference: GQA groups smaller and larger than the
// kernel's head group, head dims that are and are not a whole number of vectors, lengths across
// several key blocks, sliding windows, repeated slots, attention sinks, logit soft caps, f32 and bf16, both
// ISA builds. Sinks add one zero-valued term to each softmax, so the output stays within the bound below.
//
// Tolerance per output element (f32 arithmetic, u = 2^-24; the reference sees the same inputs):
//   a score s_j = scale q.k_j errs by at most ds = (ceil(D/8) + 6) u scale max_j sum_d |q_d k_jd|
//   (lane chains of ceil(D/8) additions and a 4-level tree, as in gemv_test), and exp_vec by
//   8.4e-8 relative; a probability then errs by at most 2 ds + 4 x 8.4e-8 relative (numerator and
//   normaliser), and the weighted sum of n values adds (n + 8) u relative. The output is a convex
//   combination of values, so |got - ref| <= max|v| (2 ds + 3.4e-7 + (n + 8) u). A bf16 output
//   adds its rounding, 2^-8 |ref|.
#include "tessera/ops/decode_attention.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tessera/core/error.h"
#include "testing/op_test_util.h"

namespace tessera {
namespace {

using testing::OwnedTensor;

struct Case {
  int64_t H, Hkv, D, S, T;
  std::vector<int32_t> slot, length;
  int64_t window;
  bool sinks = false;  // GPT-OSS's attention sinks, one logit per query head
  float soft_cap = 0;  // Gemma 2's logit soft cap (1-Lipschitz: the score bound below holds)
};

void check_case(const Case& c, DType dt, uint64_t seed) {
  const auto M = static_cast<int64_t>(c.slot.size());
  SCOPED_TRACE(::testing::Message() << "H " << c.H << " Hkv " << c.Hkv << " D " << c.D << " T " << c.T
                                    << " window " << c.window << " " << dtype_name(dt));
  OwnedTensor q(Shape{M, c.H, c.D}, dt), out(Shape{M, c.H, c.D}, dt);
  OwnedTensor k(Shape{c.S, c.T, c.Hkv, c.D}, dt), v(Shape{c.S, c.T, c.Hkv, c.D}, dt);
  OwnedTensor slot(Shape{M}, DType::kI32), length(Shape{M}, DType::kI32);
  std::copy(c.slot.begin(), c.slot.end(), slot.t.ptr<int32_t>());
  std::copy(c.length.begin(), c.length.end(), length.t.ptr<int32_t>());
  const auto qv = testing::fill_uniform(q, seed, -2, 2), kv = testing::fill_uniform(k, seed + 1, -2, 2);
  const auto vv = testing::fill_uniform(v, seed + 2);
  ops::DecodeAttentionOptions opt{.sliding_window = c.window, .logits_soft_cap = c.soft_cap};
  OwnedTensor sinks(Shape{c.H}, DType::kF32);
  std::vector<double> sv;
  if (c.sinks) {  // one sink far above the scores: the running max moves at the end
    sv = testing::fill_uniform(sinks, seed + 3, -2, 2);
    sinks.t.ptr<float>()[0] = 6.0f;
    sv[0] = 6.0;
    opt.sinks = sinks.t;
  }
  ops::decode_attention(q, k, v, slot, length, out, opt);
  std::vector<double> want;
  ops::decode_attention_ref({M, c.H, c.Hkv, c.D, c.S, c.T}, opt, qv, kv, vv, c.slot, c.length, &want, sv);

  const double u = 0x1.0p-24, scale = 1.0 / std::sqrt(static_cast<double>(c.D));
  std::vector<double> tol(want.size());
  for (int64_t b = 0; b < M; ++b)
    for (int64_t h = 0; h < c.H; ++h) {
      const int64_t hk = h / (c.H / c.Hkv), n = c.length[b];
      double qk = 0, vmax = 0;
      for (int64_t j = 0; j < n; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < c.D; ++d) {
          const int64_t kvi = ((c.slot[b] * c.T + j) * c.Hkv + hk) * c.D + d;
          dot += std::abs(qv[(b * c.H + h) * c.D + d] * kv[kvi]);
          vmax = std::max(vmax, std::abs(vv[kvi]));
        }
        qk = std::max(qk, dot);
      }
      const double ds = static_cast<double>((c.D + 7) / 8 + 6) * u * scale * qk;
      for (int64_t d = 0; d < c.D; ++d) {
        const size_t i = static_cast<size_t>((b * c.H + h) * c.D + d);
        tol[i] = vmax * (2 * ds + 3.4e-7 + static_cast<double>(n + 8) * u);
        if (dt == DType::kBF16) tol[i] += 0x1.0p-8 * std::abs(want[i]);
      }
    }
  EXPECT_TRUE(testing::within(testing::to_vector(out), want, tol));
}

TEST(DecodeAttention, MatchesReference) {
  const std::vector<Case> cases = {
      {4, 2, 10, 3, 150, {2, 0, 1}, {150, 1, 77}, 0},   // several key blocks, D not a vector multiple
      {4, 2, 16, 3, 150, {1, 1, 2}, {129, 64, 65}, 5},  // a repeated slot, a short window
      {12, 1, 64, 2, 90, {1, 0}, {90, 33}, 70},         // G = 12 > 8 heads per walk, MQA
      {3, 3, 3, 1, 20, {0}, {20}, 1},                   // window 1: only the query's own key
      {8, 4, 128, 2, 40, {0, 1}, {1, 40}, 0},           // one key; a whole row
      {12, 2, 64, 2, 150, {1, 0}, {150, 7}, 0, true},   // sinks over several blocks, G = 6
      {4, 4, 10, 2, 40, {0, 1}, {40, 20}, 8, true},     // sinks with a sliding window
      {4, 2, 16, 3, 150, {2, 0, 1}, {150, 9, 77}, 0, false, 1.5f},  // a soft cap that bites
      {8, 4, 64, 2, 90, {1, 0}, {90, 33}, 20, false, 4.0f},         // soft cap, window
  };
  testing::for_each_isa([&] {
    uint64_t seed = 1;
    for (const Case& c : cases)
      for (DType dt : {DType::kF32, DType::kBF16}) check_case(c, dt, seed += 3);
  });
}

TEST(DecodeAttention, RejectsBadArguments) {
  OwnedTensor q(Shape{2, 4, 8}, DType::kF32), out(Shape{2, 4, 8}, DType::kF32);
  OwnedTensor k(Shape{2, 5, 2, 8}, DType::kF32), v(Shape{2, 5, 2, 8}, DType::kF32);
  OwnedTensor vb(Shape{2, 5, 2, 8}, DType::kBF16), k3(Shape{2, 5, 3, 8}, DType::kF32);
  OwnedTensor slot(Shape{2}, DType::kI32), length(Shape{2}, DType::kI32), slot1(Shape{1}, DType::kI32);
  auto set = [&](int32_t s0, int32_t s1, int32_t l0, int32_t l1) {
    slot.t.ptr<int32_t>()[0] = s0, slot.t.ptr<int32_t>()[1] = s1;
    length.t.ptr<int32_t>()[0] = l0, length.t.ptr<int32_t>()[1] = l1;
  };
  auto kind = [&](const Tensor& kk, const Tensor& vv, const Tensor& s) {
    try {
      ops::decode_attention(q, kk, vv, s, length, out);
    } catch (const Error& e) {
      return e.kind();
    }
    return ErrorKind::kInternal;
  };
  set(0, 1, 5, 1);
  EXPECT_EQ(kind(k, v, slot), ErrorKind::kInternal);  // valid: no error
  EXPECT_EQ(kind(k, vb, slot), ErrorKind::kShape);    // dtypes differ
  EXPECT_EQ(kind(k3, k3, slot), ErrorKind::kShape);   // 4 query heads over 3 kv heads
  EXPECT_EQ(kind(k, v, slot1), ErrorKind::kShape);    // one slot for two rows
  set(0, 2, 5, 1);
  EXPECT_EQ(kind(k, v, slot), ErrorKind::kShape);  // slot outside [0, 2)
  set(0, 1, 6, 1);
  EXPECT_EQ(kind(k, v, slot), ErrorKind::kShape);  // length beyond T
  set(0, 1, 5, 0);
  EXPECT_EQ(kind(k, v, slot), ErrorKind::kShape);  // no key to attend to
}

}  // namespace
}  // namespace tessera
