// Next-token sampling (sampling.h): MaxText's strategies on one row of logits.
//
// Rank: tokens are ordered by logit, highest first, equal logits by lower id. The order is strict,
// so "the k highest" and "the shortest prefix" are always well defined, and every kept set below
// is a prefix of it, given by its last token (the cut).
//
// Which tokens are kept, as MaxText's inference_utils.sampling decides it:
//   weighted   all;
//   topk       the top_k first in rank (top_k > V keeps all V);
//   nucleus    the shortest prefix whose probability under softmax(logits) (no temperature)
//              reaches nucleus_p; the token that crosses it is kept;
//   composite  the top_k first, then within them the shortest prefix whose probability,
//              renormalised over the top_k (the softmax of the top_k logits), reaches nucleus_p.
// The temperature then shapes only the draw among the kept tokens.
//
// The draw: weights w_i = exp((logit_i - max) / temperature) of the kept tokens (f32, summed in
// double), in id order; the token is the first whose running sum exceeds u * sum, where u = (the
// next 53 bits of the mt19937_64 stream) / 2^53 is in [0, 1). One draw takes one number from the
// stream, so a seed gives the same tokens for the same logits.
//
// Cost for a vocabulary of V: a pass for the max, a pass of exps for the draw; top-k adds a scan
// through a heap of k (std::nth_element when k > V / 4); the nucleus a pass of exps for the
// softmax and a weighted quickselect (partitions that keep the probability set aside, O(V)
// expected), never a full sort.
#include "tessera/infer/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "tessera/core/error.h"

namespace tessera::infer {

namespace {

using Entry = std::pair<float, int32_t>;  // (logit, id)

constexpr int64_t kSortBelow = 32;  // the weighted selection sorts ranges this small

bool is_strategy(const std::string& s) {
  return s == "greedy" || s == "weighted" || s == "nucleus" || s == "topk" || s == "composite";
}

// a ranks before b: a higher logit, or the same logit and a lower id.
bool before(const Entry& a, const Entry& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

// The largest logit. Written as a select rather than std::max so that GCC vectorises it (4x here).
float max_of(std::span<const float> l) {
  float m = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : m)
  for (size_t v = 0; v < l.size(); ++v) m = l[v] > m ? l[v] : m;
  return m;
}

double uniform(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

// Within s[lo, hi), the entry that ends the shortest rank prefix of that range whose weights
// (w[id]) sum to at least `need`; the range's last entry in rank when none does. Reorders the
// range. Quickselect: the entries ranked before a pivot are moved ahead of it; if their weight
// reaches `need` the cut lies among them, else they are all kept (their weight leaves `need`) and
// the search goes on after the pivot.
Entry weighted_cut(std::vector<Entry>& s, int64_t lo, int64_t hi, const std::vector<float>& w, double need) {
  const Entry last = *std::max_element(s.begin() + lo, s.begin() + hi, before);
  auto weight = [&](const Entry& e) { return static_cast<double>(w[static_cast<size_t>(e.second)]); };
  while (hi - lo > kSortBelow) {
    Entry a = s[lo], b = s[lo + (hi - lo) / 2], c = s[hi - 1];  // the median of three, by rank
    if (before(b, a)) std::swap(a, b);
    if (before(c, b)) std::swap(b, c);
    if (before(b, a)) std::swap(a, b);
    const Entry pivot = b;
    const auto mid =
        std::partition(s.begin() + lo, s.begin() + hi, [&](const Entry& e) { return before(e, pivot); });
    const int64_t m = mid - s.begin();
    double ahead = 0;
    for (int64_t i = lo; i < m; ++i) ahead += weight(s[i]);
    if (ahead >= need) {
      hi = m;
      continue;
    }
    need -= ahead;
    std::iter_swap(s.begin() + m, std::find(s.begin() + m, s.begin() + hi, pivot));
    const double wp = weight(s[m]);
    if (wp >= need) return s[m];
    need -= wp;
    lo = m + 1;
  }
  std::sort(s.begin() + lo, s.begin() + hi, before);
  for (int64_t i = lo; i < hi; ++i) {
    const double wi = weight(s[i]);
    if (wi >= need) return s[i];
    need -= wi;
  }
  return last;
}

// The k highest-ranked tokens into s[0, k) (in heap order); returns the k-th in rank. A heap of
// the best k seen so far, whose front is the worst of them: a token enters only if it ranks before
// that front, so for k much smaller than V most tokens cost one comparison. Large k: nth_element.
Entry top_k(std::span<const float> logits, int64_t k, std::vector<Entry>& s) {
  const auto V = static_cast<int64_t>(logits.size());
  if (4 * k > V) {
    s.resize(static_cast<size_t>(V));
    for (int64_t v = 0; v < V; ++v) s[v] = {logits[v], static_cast<int32_t>(v)};
    std::nth_element(s.begin(), s.begin() + (k - 1), s.end(), before);
    return s[k - 1];
  }
  s.resize(static_cast<size_t>(k));
  for (int64_t v = 0; v < k; ++v) s[v] = {logits[v], static_cast<int32_t>(v)};
  std::make_heap(s.begin(), s.end(), before);  // front: the entry every other ranks before
  for (int64_t v = k; v < V; ++v) {
    const Entry e{logits[v], static_cast<int32_t>(v)};
    if (!before(e, s.front())) continue;
    std::pop_heap(s.begin(), s.end(), before);
    s.back() = e;
    std::push_heap(s.begin(), s.end(), before);
  }
  return s.front();
}

}  // namespace

void validate(const SamplingParams& p) {
  if (!is_strategy(p.strategy))
    fail(
        ErrorKind::kConfig,
        "decode_sampling_strategy '{}' is not a sampling strategy (allowed: greedy, weighted, nucleus, topk, "
        "composite)",
        p.strategy);
  if (!(std::isfinite(p.temperature) && p.temperature > 0))
    fail(ErrorKind::kConfig, "decode_sampling_temperature must be a number > 0, got {}", p.temperature);
  if ((p.strategy == "nucleus" || p.strategy == "composite") && !(p.nucleus_p > 0 && p.nucleus_p <= 1))
    fail(ErrorKind::kConfig, "decode_sampling_nucleus_p must be in (0, 1] for the {} strategy, got {}",
         p.strategy, p.nucleus_p);
  if ((p.strategy == "topk" || p.strategy == "composite") && p.top_k < 1)
    fail(ErrorKind::kConfig, "decode_sampling_top_k must be >= 1 for the {} strategy, got {}", p.strategy,
         p.top_k);
}

int32_t Sampler::sample(std::span<const float> logits, const SamplingParams& params) {
  validate(params);
  TESSERA_CHECK_SHAPE(!logits.empty(), "sample: the logits row is empty");
  const auto V = static_cast<int64_t>(logits.size());
  const float mx = max_of(logits);
  if (params.strategy == "greedy") {
    for (int64_t v = 0; v < V; ++v)
      if (logits[v] == mx) return static_cast<int32_t>(v);
    return 0;  // no logit equals the max: they are all NaN
  }
  weights_.resize(static_cast<size_t>(V));  // both grow once to the vocabulary
  std::optional<Entry> cut;                 // the last kept token in rank; none: all are kept
  if (params.strategy != "weighted") {
    scratch_.reserve(static_cast<size_t>(V));
    int64_t kept = V;
    if (params.strategy == "topk" || params.strategy == "composite") {
      kept = std::min(params.top_k, V);
      cut = top_k(logits, kept, scratch_);  // scratch_[0, kept) holds the top k
    } else {
      scratch_.resize(static_cast<size_t>(V));
      for (int64_t v = 0; v < V; ++v) scratch_[v] = {logits[v], static_cast<int32_t>(v)};
    }
    if (params.strategy == "nucleus" || params.strategy == "composite") {
      double z = 0;  // softmax's normaliser over the candidates (all V, or the top k)
      for (int64_t i = 0; i < kept; ++i) {
        const auto [l, id] = scratch_[i];
        z += weights_[id] = std::exp(l - mx);
      }
      cut = weighted_cut(scratch_, 0, kept, weights_, params.nucleus_p * z);
    }
  }
  // The draw, in id order over the kept tokens.
  const float inv_t = static_cast<float>(1.0 / params.temperature);
  double total = 0;
  for (int64_t v = 0; v < V; ++v) {
    const Entry e{logits[v], static_cast<int32_t>(v)};
    const bool keep = !cut || !before(*cut, e);
    total += weights_[v] = keep ? std::exp((logits[v] - mx) * inv_t) : 0.0f;
  }
  const double target = uniform(rng_) * total;
  double run = 0;
  int32_t last = 0;
  for (int64_t v = 0; v < V; ++v) {
    if (weights_[v] == 0.0f) continue;
    run += weights_[v];
    last = static_cast<int32_t>(v);
    if (run > target) return last;
  }
  return last;  // target within rounding of the total
}

}  // namespace tessera::infer
