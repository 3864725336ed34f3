#include "tessera/models/init.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "tessera/ops/convert.h"

namespace tessera::models {

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t hash_name(const std::string& s) {  // FNV-1a
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// Uniform in (0, 1) from 24 random bits (float: the values are stored as f32 anyway).
float uniform(uint64_t bits) {
  return (static_cast<float>(bits >> 40) + 0.5f) * 0x1.0p-24f;
}

// Standard normals number 2j and 2j+1 of stream `key`: both outputs of one Box-Muller draw.
void normal_pair(uint64_t key, uint64_t j, float* z0, float* z1) {
  uint64_t r = splitmix64(key ^ j);
  float u1 = uniform(r), u2 = uniform(r << 24);
  float radius = std::sqrt(-2.0f * std::log(u1));
  float s, c;
  sincosf(2.0f * std::numbers::pi_v<float> * u2, &s, &c);
  *z0 = radius * c;
  *z1 = radius * s;
}

float normal_at(uint64_t key, uint64_t i) {
  float z0, z1;
  normal_pair(key, i / 2, &z0, &z1);
  return (i & 1) ? z1 : z0;
}

// A draw with |z| >= 2 is replaced by the first in-range draw of a second stream for that element.
float truncated(uint64_t key, uint64_t i, float z) {
  for (uint64_t k = 1; std::abs(z) >= 2.0f; ++k)
    z = normal_at(splitmix64(key ^ (i * 0x9e3779b97f4a7c15ull)), k);
  return z;
}

// A kernel's input dimension: [in, out], or [experts, in, out] for the experts' stacked kernels.
int64_t fan_in(const Shape& whole) {
  return whole.rank() == 3 ? whole[1] : whole[0];
}

}  // namespace

void init_params(graph::Plan& plan, uint64_t seed) {
  const auto& values = plan.graph().values();
  // A norm that scales by gamma + offset (Gemma's 1 + w) starts at gamma = 1 - offset: every norm
  // starts as the identity scale.
  std::vector<float> norm_start(values.size(), 1.0f);
  for (const graph::Node& n : plan.graph().nodes())
    if (n.op == graph::OpKind::kRmsNorm) norm_start[n.in[1]] = 1.0f - n.attr<graph::NormAttrs>().offset;
  for (size_t id = 0; id < values.size(); ++id) {
    const graph::Value& v = values[id];
    if (v.kind != graph::ValueKind::kParam) continue;
    // This rank's piece of the whole tensor: element i of the piece is element whole_index(piece, i)
    // of the whole, and gets that element's value (the whole tensor's fan-in, too).
    const dist::Piece& piece = plan.layout(static_cast<graph::ValueId>(id)).stored;
    float* w = plan.state(static_cast<graph::ValueId>(id)).ptr<float>();
    const int64_t n = piece.shape.numel();
    const uint64_t key = splitmix64(seed) ^ hash_name(v.name);
    // Projection, LayerNorm and expert biases (MaxText's wi_0_bias, ...) and attention sinks start at zero.
    const bool is_bias = v.name.ends_with(".bias") || v.name.ends_with("_bias") || v.name.ends_with(".sinks");
    const bool is_norm = !is_bias && v.logical_axes.size() == 1 && v.logical_axes[0] == "norm";
    const bool is_embedding = v.name.ends_with("embedding");
    // std of a unit normal truncated at 2 sigma is 0.87962566; divide it out to get 1/sqrt(fan_in).
    const auto kernel_std =
        static_cast<float>(1.0 / std::sqrt(static_cast<double>(fan_in(piece.whole))) / 0.87962566103423978);
    if (is_norm || is_bias) {
      std::fill(w, w + n, is_norm ? norm_start[id] : 0.0f);
      continue;
    }
    auto value = [&](uint64_t i, float z) { return is_embedding ? z : kernel_std * truncated(key, i, z); };
    if (!piece.covers_all()) {
#pragma omp parallel for schedule(static) if (n > 65536)
      for (int64_t i = 0; i < n; ++i) {
        const auto g = static_cast<uint64_t>(dist::whole_index(piece, i));
        w[i] = value(g, normal_at(key, g));
      }
      continue;
    }
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t j = 0; j < (n + 1) / 2; ++j) {
      float z[2];
      normal_pair(key, static_cast<uint64_t>(j), &z[0], &z[1]);
      for (int64_t e = 0; e < 2 && 2 * j + e < n; ++e)
        w[2 * j + e] = value(static_cast<uint64_t>(2 * j + e), z[e]);
    }
  }
  sync_compute_copies(plan);
}

void sync_compute_copies(graph::Plan& plan) {
  // Stored pieces: a sharded parameter's gathered copies are refreshed by the executor's gathers.
  const auto& values = plan.graph().values();
  for (size_t id = 0; id < values.size(); ++id)
    if (values[id].kind == graph::ValueKind::kParamCompute)
      ops::convert(plan.state(values[id].master), plan.state(static_cast<graph::ValueId>(id)));
}

}  // namespace tessera::models
