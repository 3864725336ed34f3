#include "tessera/models/init.h"

#include <cmath>
#include <numbers>
#include <string>

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

// Uniform in (0, 1) from 53 random bits.
double uniform(uint64_t bits) { return (static_cast<double>(bits >> 11) + 0.5) * 0x1.0p-53; }

// Standard normal number `draw` of stream `key` (Box-Muller on two independent uniforms).
double normal(uint64_t key, uint64_t draw) {
  double u1 = uniform(splitmix64(key ^ (2 * draw)));
  double u2 = uniform(splitmix64(key ^ (2 * draw + 1) ^ 0x5851f42d4c957f2dull));
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2 * std::numbers::pi * u2);
}

// Normal truncated to |z| < 2 by redrawing: element i uses draws i, i + n, i + 2n, ... of its stream.
double truncated_normal(uint64_t key, uint64_t i, uint64_t n) {
  for (uint64_t k = 0;; ++k) {
    double z = normal(key, i + k * n);
    if (std::abs(z) < 2.0) return z;
  }
}

}  // namespace

void init_params(graph::Plan& plan, uint64_t seed) {
  const auto& values = plan.graph().values();
  for (size_t id = 0; id < values.size(); ++id) {
    const graph::Value& v = values[id];
    if (v.kind != graph::ValueKind::kParam) continue;
    float* w = plan.view(static_cast<graph::ValueId>(id)).ptr<float>();
    const int64_t n = v.shape.numel();
    const uint64_t key = splitmix64(seed) ^ hash_name(v.name);
    const bool is_norm = v.logical_axes.size() == 1 && v.logical_axes[0] == "norm";
    const bool is_embedding = v.name.ends_with("embedding");
    // std of a unit normal truncated at 2 sigma is 0.87962566; divide it out to get 1/sqrt(fan_in).
    const double kernel_std = 1.0 / std::sqrt(static_cast<double>(v.shape[0])) / 0.87962566103423978;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) {
      double x;
      if (is_norm) x = 1.0;
      else if (is_embedding) x = normal(key, static_cast<uint64_t>(i));
      else x = kernel_std * truncated_normal(key, static_cast<uint64_t>(i), static_cast<uint64_t>(n));
      w[i] = static_cast<float>(x);
    }
  }
  sync_compute_copies(plan);
}

void sync_compute_copies(graph::Plan& plan) {
  const auto& values = plan.graph().values();
  for (size_t id = 0; id < values.size(); ++id)
    if (values[id].kind == graph::ValueKind::kParamCompute)
      ops::convert(plan.view(values[id].master), plan.view(static_cast<graph::ValueId>(id)));
}

}  // namespace tessera::models
