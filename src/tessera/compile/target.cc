// The catalogue of targets and the topology names (target.h).
#include "tessera/compile/target.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <charconv>
#include <chrono>
#include <fstream>
#include <numeric>
#include <sstream>

#include "tessera/backends/cpu/peak.h"
#include "tessera/core/cpu_features.h"
#include "tessera/core/error.h"
#include "tessera/core/source_dir.h"
#include "tessera/ops/matmul.h"

namespace tessera::compile {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kGB = 1e9;
constexpr double kTera = 1e12;

TargetKind parse_kind(const std::string& s, std::string_view where) {
  if (s == "gpu") return TargetKind::kGpu;
  if (s == "tpu") return TargetKind::kTpu;
  if (s == "cpu") return TargetKind::kCpu;
  fail(ErrorKind::kConfig, "{}: kind '{}' is not one of gpu, tpu, cpu", where, s);
}

// `field` of `node` as a T, or `fallback` when absent and not required.
template <typename T>
T field(const YAML::Node& node, const char* key, std::string_view where, bool required, T fallback = {}) {
  const YAML::Node v = node[key];
  if (!v) {
    if (required) fail(ErrorKind::kConfig, "{}: the field '{}' is missing", where, key);
    return fallback;
  }
  try {
    return v.as<T>();
  } catch (const YAML::Exception&) {
    fail(ErrorKind::kConfig, "{}: the field '{}' is not a {}", where, key,
         std::is_same_v<T, std::string> ? "string" : "number or list of numbers");
  }
}

// "<digits>" as a positive integer, or -1.
int64_t parse_count(std::string_view s) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && p == s.data() + s.size() && v > 0 ? v : -1;
}

[[noreturn]] void unknown_topology(const Catalogue& c, std::string_view name) {
  fail(ErrorKind::kConfig,
       "config key 'compile_topology': '{}' is not a known topology; expected <gpu> (one node) or "
       "<gpu>-<N> (N devices) for the GPUs, <tpu>-<N> with N a slice size for the TPUs, or cpu-<C> / "
       "cpu-<C>x<M> (M ranks of C cores of this machine); the catalogue ({}) holds: {}",
       name, default_catalogue_path().string(), c.names());
}

Topology resolve_tpu(const Target& t, std::string_view name, int64_t n, int64_t num_slices) {
  if (std::find(t.slices.begin(), t.slices.end(), n) == t.slices.end())
    fail(ErrorKind::kConfig,
         "config key 'compile_topology': '{}' is not a {} slice; the sizes are {}-{{{}}}{}", name, t.name,
         t.name, fmt::join(t.slices, ","),
         t.cores_per_chip > 1 ? fmt::format(" (TensorCores, {} per chip)", t.cores_per_chip) : "");
  return Topology{.name = std::string(name),
                  .device = t,
                  .devices_per_slice = std::max<int64_t>(1, n / t.cores_per_chip),
                  .num_slices = num_slices};
}

Topology resolve_cpu(const Target& t, std::string_view name, std::string_view rest, int64_t num_slices,
                     const CpuMachine* cpu) {
  const size_t x = rest.find('x');
  const int64_t cores = parse_count(rest.substr(0, x));
  const int64_t ranks = x == std::string_view::npos ? 1 : parse_count(rest.substr(x + 1));
  if (cores < 1 || ranks < 1)
    fail(ErrorKind::kConfig,
         "config key 'compile_topology': '{}' is not cpu-<C> or cpu-<C>x<M> (C cores per rank, M ranks)",
         name);
  if (!cpu) fail(ErrorKind::kInternal, "resolve_topology: '{}' needs the cpu measurement", name);
  Target d = t;
  d.name = fmt::format("cpu-{}", cores);
  const double per_core = 1.0 / static_cast<double>(cpu->cores);
  const double c = static_cast<double>(cores);
  // More cores asked for than the machine has (cpu-1x4 on 2 cores): the ranks share them, each
  // computing at its share of the machine's peak.
  const double shared = std::min(1.0, static_cast<double>(cpu->cores) / (c * static_cast<double>(ranks)));
  d.peak_f32_flops = cpu->f32_flops * per_core * c * shared;
  d.peak_bf16_flops = cpu->bf16_flops * per_core * c * shared;
  d.gemm_efficiency = cpu->f32_flops > 0 ? std::min(1.0, cpu->gemm_f32_flops / cpu->f32_flops) : 1;
  // Memory and its bandwidth are shared by the ranks of one machine.
  d.memory_bytes = cpu->memory_bytes / static_cast<double>(ranks);
  d.hbm_bytes_per_s = cpu->bandwidth_bytes_per_s * std::min(1.0, c * static_cast<double>(ranks) * per_core) /
                      static_cast<double>(ranks);
  d.intra_node_bytes_per_s = d.inter_node_bytes_per_s = d.hbm_bytes_per_s * t.link_fraction;
  d.devices_per_node = ranks;
  return Topology{
      .name = std::string(name), .device = d, .devices_per_slice = ranks, .num_slices = num_slices};
}

}  // namespace

const char* target_kind_name(TargetKind k) {
  switch (k) {
    case TargetKind::kGpu:
      return "gpu";
    case TargetKind::kTpu:
      return "tpu";
    case TargetKind::kCpu:
      return "cpu";
  }
  return "?";
}

const Target* Catalogue::find(std::string_view name) const {
  for (const Target& t : targets)
    if (t.name == name) return &t;
  return nullptr;
}

std::string Catalogue::names() const {
  std::vector<std::string> out;
  for (const Target& t : targets) {
    if (t.kind == TargetKind::kTpu)
      out.push_back(fmt::format("{}-{{{}}}", t.name, fmt::join(t.slices, ",")));
    else if (t.kind == TargetKind::kCpu)
      out.push_back("cpu-<C>[x<M>]");
    else
      out.push_back(fmt::format("{}[-<N>]", t.name));
  }
  return fmt::format("{}", fmt::join(out, ", "));
}

std::filesystem::path default_catalogue_path() {
  return tessera::source_dir() / "configs" / "targets.yml";
}

Catalogue parse_catalogue(std::string_view yaml, std::string_view where) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& e) {
    fail(ErrorKind::kConfig, "{}: not valid YAML: {}", where, e.what());
  }
  if (!root["targets"] || !root["targets"].IsSequence())
    fail(ErrorKind::kConfig, "{}: expected a list under 'targets'", where);
  Catalogue c;
  for (const YAML::Node& n : root["targets"]) {
    Target t;
    t.name = field<std::string>(n, "name", where, true);
    const std::string at = fmt::format("{}: target '{}'", where, t.name);
    if (c.find(t.name)) fail(ErrorKind::kConfig, "{} is listed twice", at);
    t.kind = parse_kind(field<std::string>(n, "kind", at, true), at);
    const bool measured = t.kind == TargetKind::kCpu;  // the rest comes from measure_cpu_machine
    t.memory_bytes = field<double>(n, "memory_gib", at, !measured) * kGiB;
    t.reserved_bytes = field<double>(n, "reserved_gib", at, false) * kGiB;
    t.peak_bf16_flops = field<double>(n, "peak_bf16_tflops", at, !measured) * kTera;
    t.peak_f32_flops = field<double>(n, "peak_f32_tflops", at, !measured) * kTera;
    t.hbm_bytes_per_s = field<double>(n, "hbm_gbps", at, !measured) * kGB;
    t.intra_node_bytes_per_s = field<double>(n, "intra_node_gbps", at, !measured) * kGB;
    t.inter_node_bytes_per_s = field<double>(n, "inter_node_gbps", at, !measured) * kGB;
    t.devices_per_node = field<int64_t>(n, "devices_per_node", at, !measured, 1);
    t.cores_per_chip = field<int64_t>(n, "cores_per_chip", at, false, 1);
    t.slices = field<std::vector<int64_t>>(n, "slices", at, t.kind == TargetKind::kTpu);
    t.link_fraction = field<double>(n, "link_fraction", at, measured);
    if (!measured &&
        (t.memory_bytes <= 0 || t.peak_bf16_flops <= 0 || t.peak_f32_flops <= 0 || t.hbm_bytes_per_s <= 0 ||
         t.intra_node_bytes_per_s <= 0 || t.inter_node_bytes_per_s <= 0))
      fail(ErrorKind::kConfig, "{}: memory, peaks and bandwidths must be > 0", at);
    if (t.devices_per_node < 1 || t.cores_per_chip < 1)
      fail(ErrorKind::kConfig, "{}: devices_per_node and cores_per_chip must be >= 1", at);
    c.targets.push_back(std::move(t));
  }
  return c;
}

Catalogue load_catalogue(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) fail(ErrorKind::kConfig, "cannot read the target catalogue {}", path.string());
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_catalogue(ss.str(), path.string());
}

namespace {

double mem_total_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kib = 0;
  while (in >> key) {
    if (key == "MemTotal:") {
      in >> kib;
      return kib * 1024;
    }
    in.ignore(1 << 12, '\n');
  }
  return 0;
}

using Clock = std::chrono::steady_clock;

// The best of a few reads of a 256 MiB buffer (larger than any last-level cache) on every thread.
double measure_bandwidth() {
  const size_t n = (size_t{256} << 20) / sizeof(double);
  std::vector<double> buf(n, 1.0);
  double best = 0, sink = 0;
  for (int rep = 0; rep < 4; ++rep) {
    const auto t0 = Clock::now();
    double sum = 0;
#pragma omp parallel for reduction(+ : sum) schedule(static)
    for (size_t i = 0; i < n; ++i) sum += buf[i];
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    sink += sum;
    best = std::max(best, static_cast<double>(n * sizeof(double)) / s);
  }
  if (sink < 0) best = 0;  // keeps the reads
  return best;
}

// The best of a few f32 GEMMs of 1024^3 (2 GFLOP each) through the op entry.
double measure_gemm() {
  const int64_t m = 1024;
  std::vector<float> a(m * m, 0.5f), b(m * m, 0.25f), c(m * m);
  Tensor ta(a.data(), Shape{m, m}, DType::kF32), tb(b.data(), Shape{m, m}, DType::kF32),
      tc(c.data(), Shape{m, m}, DType::kF32);
  ops::matmul(ta, tb, tc);  // warm-up: oneDNN's primitive cache and the pages
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = Clock::now();
    ops::matmul(ta, tb, tc);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::max(best, 2.0 * static_cast<double>(m * m * m) / s);
  }
  return best;
}

}  // namespace

CpuMachine measure_cpu_machine() {
  CpuMachine m;
  m.cores = num_threads();
  const backends::DevicePeak p = cpu::calibrate_cpu_peak(0.05);
  m.f32_flops = p.f32_flops;
  m.bf16_flops = p.bf16_flops;
  m.gemm_f32_flops = measure_gemm();
  m.memory_bytes = mem_total_bytes();
  m.bandwidth_bytes_per_s = measure_bandwidth();
  return m;
}

std::string tflops_text(double flops_per_s) {
  const double t = flops_per_s / 1e12;
  return fmt::format("{:.{}f} TFLOP/s", t, t < 10 ? 3 : 1);
}

std::string Topology::describe() const {
  const Target& d = device;
  std::string slices = num_slices > 1 ? fmt::format(" x {} slices", num_slices) : "";
  std::string eff =
      d.gemm_efficiency < 1 ? fmt::format(" (measured GEMM: {:.0f}% of it)", 100 * d.gemm_efficiency) : "";
  return fmt::format(
      "{}{}: {} x {} ({}), {:.1f} GiB each ({:.2f} GiB reserved), peak {} bf16 / {} f32{}, "
      "memory {:.0f} GB/s, links {:.1f} GB/s in a node / {:.2f} GB/s between nodes, {} per node",
      name, slices, num_devices(), d.name, target_kind_name(d.kind), d.memory_bytes / kGiB,
      d.reserved_bytes / kGiB, tflops_text(d.peak_bf16_flops), tflops_text(d.peak_f32_flops), eff,
      d.hbm_bytes_per_s / kGB, d.intra_node_bytes_per_s / kGB, d.inter_node_bytes_per_s / kGB,
      d.devices_per_node);
}

Topology resolve_topology(const Catalogue& catalogue, std::string_view name, int64_t num_slices,
                          const CpuMachine* cpu) {
  if (name.empty())
    fail(ErrorKind::kConfig,
         "config key 'compile_topology' is empty: name the target, e.g. h100-80gb, h100-80gb-4, v5e-256 or "
         "cpu-1x2; known: {}",
         catalogue.names());
  if (num_slices < 1) num_slices = 1;  // -1: one slice
  if (const Target* t = catalogue.find(name); t && t->kind == TargetKind::kGpu)
    return Topology{.name = std::string(name),
                    .device = *t,
                    .devices_per_slice = t->devices_per_node,
                    .num_slices = num_slices};
  const size_t dash = name.rfind('-');
  if (dash == std::string_view::npos) unknown_topology(catalogue, name);
  const std::string_view base = name.substr(0, dash), rest = name.substr(dash + 1);
  const Target* t = catalogue.find(base);
  if (!t) unknown_topology(catalogue, name);
  if (t->kind == TargetKind::kCpu) return resolve_cpu(*t, name, rest, num_slices, cpu);
  const int64_t n = parse_count(rest);
  if (n < 1) unknown_topology(catalogue, name);
  if (t->kind == TargetKind::kTpu) return resolve_tpu(*t, name, n, num_slices);
  return Topology{.name = std::string(name), .device = *t, .devices_per_slice = n, .num_slices = num_slices};
}

}  // namespace tessera::compile
