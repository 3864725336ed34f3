// The Sampler against the definitions in sampling.h / sampling.cc: greedy's arg-max and ties, the
// support of topk, nucleus and composite (exactly the set the definition keeps), the frequencies
// of each draw against the renormalised softmax(logits / temperature) over that set, temperature,
// seeds, and validate()'s errors.
//
// Frequency bound: N draws of a token with probability p give a count with standard deviation
// sqrt(N p (1 - p)); each test allows 5 standard deviations plus one draw. The draws come from
// fixed seeds, so a run either always passes or always fails; with a correct sampler the chance
// that any of the checked frequencies lands outside 5 sigma is below 1e-5.
#include "tessera/infer/sampling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

#include "tessera/core/error.h"

namespace tessera::infer {
namespace {

const std::vector<float> kLogits = {0.5f, 2.0f, -1.0f, 1.2f, 3.0f, 0.0f, 2.0f, -3.0f, 1.0f, 0.7f};

std::vector<double> softmax_over(const std::vector<float>& logits, const std::set<int32_t>& keep, double t) {
  std::vector<double> p(logits.size(), 0.0);
  double z = 0;
  for (int32_t i : keep) z += p[i] = std::exp(logits[i] / t);
  for (double& x : p) x /= z;
  return p;
}

// Draws n tokens and checks support and frequencies against `want`.
void check_distribution(const std::vector<float>& logits, const SamplingParams& params,
                        const std::vector<double>& want, uint64_t seed, int n = 40000) {
  Sampler s(seed);
  std::vector<int> count(logits.size(), 0);
  for (int i = 0; i < n; ++i) ++count[static_cast<size_t>(s.sample(logits, params))];
  for (size_t v = 0; v < logits.size(); ++v) {
    if (want[v] == 0) {
      EXPECT_EQ(count[v], 0) << "token " << v << " is outside the kept set";
      continue;
    }
    const double sigma = std::sqrt(n * want[v] * (1 - want[v]));
    EXPECT_NEAR(count[v], n * want[v], 5 * sigma + 1) << "token " << v;
  }
}

TEST(Sampling, GreedyIsTheArgmaxWithTiesToTheLowerId) {
  Sampler s(1);
  EXPECT_EQ(s.sample(kLogits, {}), 4);
  const std::vector<float> tie = {1.0f, 3.0f, 2.0f, 3.0f};
  EXPECT_EQ(s.sample(tie, {}), 1);
}

TEST(Sampling, WeightedFollowsSoftmaxAtEachTemperature) {
  std::set<int32_t> all;
  for (int32_t i = 0; i < static_cast<int32_t>(kLogits.size()); ++i) all.insert(i);
  for (double t : {1.0, 0.5, 2.0}) {
    SCOPED_TRACE(t);
    check_distribution(kLogits, {.strategy = "weighted", .temperature = t}, softmax_over(kLogits, all, t),
                       11);
  }
}

TEST(Sampling, TopkKeepsTheKHighest) {
  // Top 3: ids 4 (3.0), then the tie 1 and 6 (2.0).
  check_distribution(kLogits, {.strategy = "topk", .temperature = 0.8, .top_k = 3},
                     softmax_over(kLogits, {4, 1, 6}, 0.8), 12);
  // The tie at the k-th place goes to the lower id.
  check_distribution(kLogits, {.strategy = "topk", .top_k = 2}, softmax_over(kLogits, {4, 1}, 1.0), 13);
  Sampler s(3);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(s.sample(kLogits, {.strategy = "topk", .top_k = 1}), 4);
  // top_k beyond the vocabulary keeps it all.
  std::set<int32_t> all;
  for (int32_t i = 0; i < 10; ++i) all.insert(i);
  check_distribution(kLogits, {.strategy = "topk", .top_k = 50}, softmax_over(kLogits, all, 1.0), 14);
}

// The shortest prefix, by probability, whose softmax mass (no temperature) reaches p.
std::set<int32_t> nucleus_of(const std::vector<float>& logits, const std::vector<int32_t>& order, double p) {
  double z = 0;
  for (int32_t i : order) z += std::exp(logits[i]);
  std::set<int32_t> keep;
  double run = 0;
  for (int32_t i : order) {
    keep.insert(i);
    run += std::exp(logits[i]) / z;
    if (run >= p) break;
  }
  return keep;
}

TEST(Sampling, NucleusKeepsTheSmallestSetReachingP) {
  const std::vector<int32_t> order = {4, 1, 6, 3, 8, 9, 0, 5, 2, 7};  // by logit, ties by id
  for (double p : {0.3, 0.6, 0.9, 0.999, 1.0}) {
    SCOPED_TRACE(p);
    const auto keep = nucleus_of(kLogits, order, p);
    check_distribution(kLogits, {.strategy = "nucleus", .temperature = 1.5, .nucleus_p = p},
                       softmax_over(kLogits, keep, 1.5), 15);
  }
  // p = 0.3 is reached by the top token alone (its probability is about 0.37).
  EXPECT_EQ(nucleus_of(kLogits, order, 0.3), std::set<int32_t>{4});
}

// A flat vocabulary needs a nucleus far longer than the first sorted prefix (64 tokens): with
// 2000 equal logits, p = 0.4999 keeps ids 0..999 (ties by id; 999 tokens hold 0.4995).
TEST(Sampling, NucleusGrowsItsSortedPrefix) {
  const std::vector<float> flat(2000, 0.25f);
  Sampler s(5);
  int32_t top = 0;
  for (int i = 0; i < 3000; ++i)
    top = std::max(top, s.sample(flat, {.strategy = "nucleus", .nucleus_p = 0.4999}));
  EXPECT_LT(top, 1000);
  EXPECT_GE(top, 950);  // missed by all 3000 draws with probability 0.95^3000
}

TEST(Sampling, CompositeIsTopkThenNucleusWithinIt) {
  // Top 4: 4, 1, 6, 3. Renormalised over them (softmax of the four logits): 0.526, 0.193, 0.193,
  // 0.087; p = 0.8 keeps 4, 1, 6 (cumulative 0.526, 0.720, 0.913).
  const std::vector<float> top4 = {kLogits[4], kLogits[1], kLogits[6], kLogits[3]};
  double z = 0;
  for (float l : top4) z += std::exp(l);
  ASSERT_LT((std::exp(3.0) + std::exp(2.0)) / z, 0.8);
  ASSERT_GE((std::exp(3.0) + 2 * std::exp(2.0)) / z, 0.8);
  check_distribution(kLogits, {.strategy = "composite", .temperature = 0.7, .nucleus_p = 0.8, .top_k = 4},
                     softmax_over(kLogits, {4, 1, 6}, 0.7), 16);
}

TEST(Sampling, SeedsReproduce) {
  const SamplingParams p{.strategy = "weighted", .temperature = 2.0};
  auto draws = [&](uint64_t seed) {
    Sampler s(seed);
    std::vector<int32_t> out;
    for (int i = 0; i < 64; ++i) out.push_back(s.sample(kLogits, p));
    return out;
  };
  EXPECT_EQ(draws(42), draws(42));
  EXPECT_NE(draws(42), draws(43));
}

TEST(Sampling, ValidateNamesTheKey) {
  auto message = [](const SamplingParams& p) -> std::string {
    try {
      validate(p);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kConfig);
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(message({}), "");
  EXPECT_EQ(message({.strategy = "greedy", .nucleus_p = -1, .top_k = 0}), "");  // unused fields unchecked
  EXPECT_NE(message({.strategy = "beam"}).find("decode_sampling_strategy"), std::string::npos);
  EXPECT_NE(message({.strategy = "weighted", .temperature = 0}).find("decode_sampling_temperature"),
            std::string::npos);
  EXPECT_NE(message({.strategy = "weighted", .temperature = NAN}).find("decode_sampling_temperature"),
            std::string::npos);
  EXPECT_NE(message({.strategy = "nucleus", .nucleus_p = 0}).find("decode_sampling_nucleus_p"),
            std::string::npos);
  EXPECT_NE(message({.strategy = "nucleus", .nucleus_p = 1.5}).find("decode_sampling_nucleus_p"),
            std::string::npos);
  EXPECT_NE(message({.strategy = "composite", .nucleus_p = 0.9, .top_k = 0}).find("decode_sampling_top_k"),
            std::string::npos);
  EXPECT_NE(message({.strategy = "composite", .nucleus_p = -1, .top_k = 5}).find("decode_sampling_nucleus_p"),
            std::string::npos);
  EXPECT_NE(message({.strategy = "topk", .top_k = 0}).find("decode_sampling_top_k"), std::string::npos);
  Sampler s(1);
  EXPECT_THROW(s.sample(kLogits, {.strategy = "topk", .top_k = 0}), Error);
}

}  // namespace
}  // namespace tessera::infer
