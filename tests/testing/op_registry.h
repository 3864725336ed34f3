// The registry of op test cases (STYLE.md 8, after ggml's test-backend-ops and PyTorch's OpInfo):
// one OpCase per op says how to make seeded inputs, how to run the op entry (ops::...) on Tensors
// and how to compute the same in double with the op's *_ref; tests/ops/op_cases_test.cc turns every
// entry into the same checks (forward vs reference per ISA, f32 and bf16, backward vs reference,
// reference backward vs finite differences, ISA vs ISA, and a one-node graph through autodiff).
//
// Data crosses the boundary as named arrays of doubles (values exactly as the op sees them, i.e.
// already rounded to the dtype) and named int32 arrays. Cotangents are inputs named "d" + output
// ("dy" for output "y"); the backward returns gradients named "d" + input ("dx" for input "x").
//
// Tolerances (never loosened to make a case pass): for output element i,
//   tol_i = k * u_f32 * sqrt(R) * s_i  (+ u_bf16 * |want_i| when the output is stored in bf16)
// with u_f32 = 2^-24, u_bf16 = 2^-8 (the unit roundoffs), R the case's reduction length (the
// longest sum an output element goes through; rounding errors of a sum of R terms grow like
// sqrt(R) for random data), k the case's constant (how many roundings each term sees; stated in
// each entry) and s_i = |want_i| + mean_j |want_j|: the element's magnitude, floored by the
// output's mean magnitude because elements that come out of a cancellation (a norm's dx, a
// softmax gradient) carry errors relative to the terms, not to the small result. A reference may
// return its own scale array "scale:<output>" where the terms are known better.
// Finite differences of the double reference: central differences with h = 1e-5 * max(1, |x|);
// truncation h^2 |f'''| and cancellation 1e-16 |L| / h are both below 1e-9 for the smooth, O(1)
// losses here, so |analytic - fd| <= 1e-6 * s_i checks the reference gradient's math.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "testing/op_test_util.h"

namespace tessera::testing {

using Dims = std::vector<int64_t>;  // the sizes an entry is run at; their meaning is the entry's

struct Arrays {
  std::map<std::string, std::vector<double>> f;   // real-valued
  std::map<std::string, std::vector<int32_t>> i;  // ids, targets, positions, ...
};

// The checks each entry may take part in; the test name is "<op>_<check>".
enum class Check { kForwardF32, kForwardBf16, kBackward, kReferenceGradient, kIsaAgreement, kGraph };

struct OpCase {
  std::string name;                               // op and variant: "rmsnorm", "glu_silu"
  std::string dims_doc;                           // what Dims holds, for failure messages: "N,C"
  std::vector<Dims> shapes;                       // small, with sizes off the vector width (1, 7, 33, 257)
  bool bf16 = false;                              // the op takes bf16 activations
  double k = 8;                                   // roundings per term (see the file comment)
  std::function<int64_t(const Dims&)> reduction;  // R; unset: 1
  std::set<std::string> f32_outputs;              // outputs that stay f32 when the inputs are bf16
  // Seeded inputs for dtype (activations rounded to it), cotangents included.
  std::function<Arrays(const Dims&, DType, uint64_t seed)> inputs;
  std::function<Arrays(const Dims&, DType, const Arrays& in)> run;  // the op entry forward
  std::function<Arrays(const Dims&, const Arrays& in)> reference;   // the *_ref forward in double
  // Backward (unset: the op has none): the op entry and the reference, and the inputs whose
  // gradient "d" + name both return (finite differences run over these).
  std::function<Arrays(const Dims&, DType, const Arrays& in)> run_backward;
  std::function<Arrays(const Dims&, const Arrays& in)> reference_backward;
  std::vector<std::string> grad_inputs;
  // The one-node graph check (unset: the op has no Graph builder method); runs its own asserts.
  std::function<void(const Dims&)> graph;
  std::vector<Dims> graph_shapes;

  bool has(Check c) const;
};

// The registry, filled by OpCaseRegistrar objects at static initialisation; gtest reads it when
// the parameterised tests are registered (after static initialisation), so entries may live in
// several translation units.
inline std::vector<OpCase>& op_registry() {
  static std::vector<OpCase> cases;
  return cases;
}
struct OpCaseRegistrar {
  explicit OpCaseRegistrar(OpCase c) { op_registry().push_back(std::move(c)); }
};

// How many ISAs for_each_isa runs on this machine. Counted without activating one: the test
// cases are listed before main's environment runs, and TESSERA_ISA naming an ISA this CPU lacks
// must reach IsaFromEnvironment (which skips), not stop the listing.
inline int supported_isa_count() {
  int n = 0;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) n += isa_supported(isa) ? 1 : 0;
  return n;
}

inline bool OpCase::has(Check c) const {
  switch (c) {
    case Check::kForwardF32:
      return true;
    case Check::kForwardBf16:
      return bf16;
    case Check::kBackward:
    case Check::kReferenceGradient:
      return static_cast<bool>(run_backward);
    case Check::kIsaAgreement:
      return supported_isa_count() > 1;
    case Check::kGraph:
      return static_cast<bool>(graph);
  }
  return false;
}

// ---- building entries -------------------------------------------------------------------------

// Uniform values in [lo, hi) rounded to dtype (what a kernel reading that dtype sees).
inline std::vector<double> uniform(int64_t n, uint64_t seed, DType dt, double lo = -1, double hi = 1) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) {
    const float f = static_cast<float>(dist(rng));
    x = dt == DType::kBF16 ? bf16_to_f32(f32_to_bf16(f)) : f;
  }
  return v;
}

inline std::vector<int32_t> uniform_ints(int64_t n, uint64_t seed, int32_t lo, int32_t hi_inclusive) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> dist(lo, hi_inclusive);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int32_t& x : v) x = dist(rng);
  return v;
}

// Tensors owned for the duration of one run.
struct Buffers {
  std::deque<OwnedTensor> owned;
  const Tensor& make(Shape s, DType d) { return owned.emplace_back(s, d).t; }
  const Tensor& zeros(Shape s, DType d) {
    const Tensor& t = make(s, d);
    std::memset(t.data(), 0, t.nbytes());
    return t;
  }
  // The values (exactly representable in d: they come from uniform()) in a new tensor.
  const Tensor& from(const std::vector<double>& v, Shape s, DType d) {
    const Tensor& t = make(s, d);
    for (int64_t i = 0; i < t.numel(); ++i) {
      if (d == DType::kBF16)
        t.ptr<uint16_t>()[i] = f32_to_bf16(static_cast<float>(v[i]));
      else
        t.ptr<float>()[i] = static_cast<float>(v[i]);
    }
    return t;
  }
  const Tensor& ints(const std::vector<int32_t>& v, Shape s) {
    const Tensor& t = make(s, DType::kI32);
    std::memcpy(t.data(), v.data(), v.size() * sizeof(int32_t));
    return t;
  }
};

// ---- comparing --------------------------------------------------------------------------------

constexpr double kUnitF32 = 0x1p-24;
constexpr double kUnitBf16 = 0x1p-8;

inline std::vector<double> scale_of(const Arrays& ref, const std::string& out) {
  if (auto it = ref.f.find("scale:" + out); it != ref.f.end()) return it->second;
  const std::vector<double>& w = ref.f.at(out);
  double mean = 0;
  for (double x : w) mean += std::abs(x);
  mean /= std::max<size_t>(1, w.size());
  std::vector<double> s(w.size());
  for (size_t i = 0; i < w.size(); ++i) s[i] = std::abs(w[i]) + mean;
  return s;
}

// The file comment's tol_i for output `out` of an op run at dims in dtype dt.
inline std::vector<double> tolerance(const OpCase& c, const Dims& dims, DType dt, const Arrays& ref,
                                     const std::string& out) {
  const double r = c.reduction ? static_cast<double>(c.reduction(dims)) : 1.0;
  const bool bf16_store = dt == DType::kBF16 && !c.f32_outputs.count(out);
  const std::vector<double>& want = ref.f.at(out);
  std::vector<double> tol = scale_of(ref, out);
  for (size_t i = 0; i < tol.size(); ++i) {
    tol[i] *= c.k * kUnitF32 * std::sqrt(r);
    if (bf16_store) tol[i] += kUnitBf16 * std::abs(want[i]);
  }
  return tol;
}

// Every output of `ref` against the same name in `got`, with the case's tolerance; `what` names the
// comparison in the failure ("forward", "backward").
inline void expect_outputs_close(const OpCase& c, const Dims& dims, DType dt, const Arrays& got,
                                 const Arrays& ref, const char* what) {
  for (const auto& [name, want] : ref.f) {
    if (name.starts_with("scale:")) continue;
    auto it = got.f.find(name);
    if (it == got.f.end()) {
      ADD_FAILURE() << what << ": the op returned no output " << name;
      continue;
    }
    EXPECT_TRUE(within(it->second, want, tolerance(c, dims, dt, ref, name))) << what << " output " << name;
  }
}

// sum over outputs o with a cotangent "d" + o in `in` of <d o, o>: the scalar whose gradient the
// backward computes.
inline double cotangent_loss(const OpCase& c, const Dims& dims, const Arrays& in) {
  const Arrays out = c.reference(dims, in);
  double l = 0;
  for (const auto& [name, v] : out.f) {
    auto it = in.f.find("d" + name);
    if (it == in.f.end()) continue;
    for (size_t i = 0; i < v.size(); ++i) l += it->second[i] * v[i];
  }
  return l;
}

// Central differences of f over every element of (*in)[name]; restores the values.
inline std::vector<double> finite_difference(std::vector<double>& x, const std::function<double()>& f) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i], h = 1e-5 * std::max(1.0, std::abs(x0));
    x[i] = x0 + h;
    const double lp = f();
    x[i] = x0 - h;
    const double lm = f();
    x[i] = x0;
    g[i] = (lp - lm) / (2 * h);
  }
  return g;
}

// The reference backward against finite differences of the reference forward (file comment).
inline void expect_reference_gradient(const OpCase& c, const Dims& dims, Arrays in) {
  const Arrays grads = c.reference_backward(dims, in);
  for (const std::string& name : c.grad_inputs) {
    std::vector<double>& x = in.f.at(name);
    const std::vector<double> fd = finite_difference(x, [&] { return cotangent_loss(c, dims, in); });
    std::vector<double> tol = scale_of(grads, "d" + name);
    for (double& t : tol) t *= 1e-6;
    EXPECT_TRUE(within(grads.f.at("d" + name), fd, tol)) << "d" << name << " vs finite differences";
  }
}

}  // namespace tessera::testing
