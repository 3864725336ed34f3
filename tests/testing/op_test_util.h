// Shared helpers for op tests: deterministic random data, owned buffers, tolerance checks, and
// running a test body under each ISA the machine supports, and TESSERA_ISA in the environment.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <random>
#include <vector>

#include "tessera/core/cpu_features.h"
#include "tessera/core/dtype.h"
#include "tessera/core/tensor.h"

namespace tessera::testing {

// A tensor that owns its memory (tests only; library code uses arenas).
struct OwnedTensor {
  std::vector<uint8_t> bytes;
  Tensor t;
  OwnedTensor(Shape s, DType d) : bytes(static_cast<size_t>(s.numel()) * dtype_size(d) + 64) {
    // 64-byte alignment like an arena, so kernels see the same alignment as in training.
    auto p = reinterpret_cast<uintptr_t>(bytes.data());
    t = Tensor(reinterpret_cast<void*>((p + 63) & ~uintptr_t{63}), s, d);
  }
  operator const Tensor&() const { return t; }
};

// Fills with uniform values in [lo, hi), rounded to the tensor's dtype; returns the values as
// doubles exactly as stored (so a reference sees the same inputs as the kernel).
inline std::vector<double> fill_uniform(const Tensor& t, uint64_t seed, double lo = -1, double hi = 1) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> out(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) {
    float v = static_cast<float>(dist(rng));
    if (t.dtype() == DType::kBF16) {
      t.ptr<uint16_t>()[i] = f32_to_bf16(v);
      out[i] = bf16_to_f32(t.ptr<uint16_t>()[i]);
    } else {
      t.ptr<float>()[i] = v;
      out[i] = v;
    }
  }
  return out;
}

inline double get(const Tensor& t, int64_t i) {
  return t.dtype() == DType::kBF16 ? bf16_to_f32(t.ptr<uint16_t>()[i]) : t.ptr<float>()[i];
}

inline std::vector<double> to_vector(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = get(t, i);
  return v;
}

// Every element satisfies |got - want| <= atol + rtol * |want|; reports the worst element.
inline ::testing::AssertionResult all_close(const std::vector<double>& got, const std::vector<double>& want,
                                            double rtol, double atol) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "size " << got.size() << " vs " << want.size();
  size_t worst = 0;
  double worst_excess = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    double err = std::abs(got[i] - want[i]);
    double excess = err - (atol + rtol * std::abs(want[i]));
    if (!(excess <= 0) && (excess > worst_excess || std::isnan(got[i]))) {
      worst_excess = std::isnan(got[i]) ? INFINITY : excess;
      worst = i;
    }
  }
  if (worst_excess < 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "element " << worst << ": got " << got[worst] << ", want "
                                       << want[worst] << " (rtol " << rtol << ", atol " << atol << ")";
}

// |got[i] - want[i]| <= tol[i] for every i (a per-element tolerance); reports the element that
// exceeds its tolerance by the largest factor. NaN fails.
inline ::testing::AssertionResult within(const std::vector<double>& got, const std::vector<double>& want,
                                         const std::vector<double>& tol) {
  if (got.size() != want.size() || got.size() != tol.size())
    return ::testing::AssertionFailure()
           << "sizes " << got.size() << ", " << want.size() << ", " << tol.size();
  size_t worst = got.size();
  double worst_ratio = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(got[i] - want[i]);
    if (err <= tol[i]) continue;
    const double ratio = std::isnan(err) || tol[i] == 0 ? INFINITY : err / tol[i];
    if (worst == got.size() || ratio > worst_ratio) {
      worst_ratio = ratio;
      worst = i;
    }
  }
  if (worst == got.size()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "element " << worst << ": got " << got[worst] << ", want " << want[worst] << ", tolerance "
         << tol[worst] << " (exceeded " << worst_ratio << "x)";
}

// Runs `body` once per ISA this CPU supports (scalar always), with that ISA active, whatever
// TESSERA_ISA says: comparing the builds is the point. Restores the ISA that was active before
// (TESSERA_ISA's, or the best) after.
template <typename F>
void for_each_isa(F&& body) {
  const Isa before = active_isa();
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (!isa_supported(isa)) continue;
    set_active_isa(isa);
    SCOPED_TRACE(std::string("isa=") + std::string(isa_name(isa)));
    body();
  }
  set_active_isa(before);
}

// TESSERA_ISA in a test binary's environment: the code outside for_each_isa runs on that ISA. A
// name the CPU lacks skips every test (so that `TESSERA_ISA=avx512 test_ops` passes as skipped on
// an AVX2 machine, see CMakeLists.txt); an unknown name fails them.
class IsaFromEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    const char* env = std::getenv("TESSERA_ISA");
    if (env == nullptr || *env == '\0') return;
    const std::optional<Isa> isa = isa_from_name(env);
    if (isa && !isa_supported(*isa)) GTEST_SKIP() << "TESSERA_ISA=" << env << ": this CPU lacks that ISA";
    try {
      active_isa();
    } catch (const std::exception& e) {
      FAIL() << e.what();
    }
  }
};
inline ::testing::Environment* const kIsaFromEnvironment =
    ::testing::AddGlobalTestEnvironment(new IsaFromEnvironment);

}  // namespace tessera::testing
