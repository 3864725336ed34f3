// The layout search (search.h).
#include "tessera/compile/search.h"

#include <fmt/format.h>

#include <algorithm>

#include "tessera/core/error.h"

namespace tessera::compile {
namespace {

struct Mesh {
  int64_t data = 1, fsdp = 1, tensor = 1, expert = 1;
  int64_t dcn_data = 1, dcn_fsdp = 1, dcn_expert = 1;
};

// Inside a slice: tensor (powers of two up to max_tensor, inside a node) x expert (powers of two
// dividing the experts; only for a mixture of experts) x fsdp (every divisor) x data (the rest);
// over the slices data, fsdp or (a mixture of experts whose experts the two expert sizes divide)
// expert.
std::vector<Mesh> meshes(const Topology& t, int64_t max_tensor, int64_t experts) {
  std::vector<Mesh> out;
  const int64_t p = t.devices_per_slice, s = t.num_slices;
  const int64_t node = t.device.kind == TargetKind::kTpu ? p : std::min(p, t.device.devices_per_node);
  for (int64_t tp = 1; tp <= std::min(max_tensor, node); tp *= 2) {
    if (p % tp != 0 || node % tp != 0) continue;
    for (int64_t ep = 1; ep <= std::max<int64_t>(experts, 1) && (p / tp) % ep == 0; ep *= 2) {
      if (experts > 1 && experts % ep != 0) break;
      const int64_t rest = p / tp / ep;
      for (int64_t f = 1; f <= rest; ++f) {
        if (rest % f != 0) continue;
        for (int dcn = 0; dcn < (s > 1 ? 3 : 1); ++dcn) {
          if (dcn == 2 && (experts <= 1 || experts % (ep * s) != 0)) continue;
          out.push_back(Mesh{.data = rest / f,
                             .fsdp = f,
                             .tensor = tp,
                             .expert = ep,
                             .dcn_data = dcn == 0 ? s : 1,
                             .dcn_fsdp = dcn == 1 ? s : 1,
                             .dcn_expert = dcn == 2 ? s : 1});
        }
      }
    }
  }
  return out;
}

std::vector<std::string> mesh_overrides(const Mesh& m) {
  return {fmt::format("ici_data_parallelism={}", m.data),
          fmt::format("ici_fsdp_parallelism={}", m.fsdp),
          fmt::format("ici_tensor_parallelism={}", m.tensor),
          fmt::format("ici_expert_parallelism={}", m.expert),
          fmt::format("dcn_data_parallelism={}", m.dcn_data),
          fmt::format("dcn_fsdp_parallelism={}", m.dcn_fsdp),
          "dcn_tensor_parallelism=1",
          fmt::format("dcn_expert_parallelism={}", m.dcn_expert)};
}

std::string describe(const Mesh& m, const std::string& remat, double batch, int64_t slices) {
  const char* over = m.dcn_data > 1 ? "data" : m.dcn_fsdp > 1 ? "fsdp" : "expert";
  std::string dcn = slices > 1 ? fmt::format(", dcn {} {}", over, slices) : "";
  std::string expert = m.expert > 1 ? fmt::format(" x expert {}", m.expert) : "";
  return fmt::format("data {} x fsdp {} x tensor {}{}{}; remat {}; per-device batch {:g}", m.data, m.fsdp,
                     m.tensor, expert, dcn, remat, batch);
}

}  // namespace

SearchReport search_layouts(const std::filesystem::path& config_file,
                            const std::vector<std::string>& overrides, const Topology& topology,
                            const SearchOptions& options) {
  SearchReport report;
  const DeviceCount devices{topology.num_devices(), topology.num_slices};
  // The keys a layout sets are the search's, not the command line's.
  std::vector<std::string> fixed;
  for (const std::string& o : overrides) {
    bool layout_key = false;
    for (const char* k :
         {"ici_data_parallelism=", "ici_fsdp_parallelism=", "ici_tensor_parallelism=",
          "ici_expert_parallelism=", "dcn_data_parallelism=", "dcn_fsdp_parallelism=",
          "dcn_tensor_parallelism=", "dcn_expert_parallelism=", "remat_policy=", "per_device_batch_size="})
      layout_key = layout_key || o.rfind(k, 0) == 0;
    if (!layout_key) fixed.push_back(o);
  }
  // The model's experts decide whether expert meshes are candidates (the mesh is the search's).
  std::vector<std::string> one_device = fixed;
  for (std::string& k : mesh_overrides(Mesh{})) one_device.push_back(std::move(k));
  const int64_t experts = load_config(config_file, one_device, DeviceCount{1, 1}).num_experts;
  for (const Mesh& m : meshes(topology, options.max_tensor, experts)) {
    for (const std::string& remat : options.remat_policies) {
      // Memory grows with the batch: the first batch that does not fit ends this (mesh, remat).
      for (double batch : options.per_device_batches) {
        std::vector<std::string> ov = fixed;
        for (std::string& s : mesh_overrides(m)) ov.push_back(std::move(s));
        ov.push_back("remat_policy=" + remat);
        ov.push_back(fmt::format("per_device_batch_size={:g}", batch));
        SearchResult r;
        CompiledRun run;
        try {
          const Config cfg = load_config(config_file, ov, devices);
          run = compile_run(cfg, topology, /*first_class_only=*/true);
        } catch (const Error& e) {
          if (e.kind() != ErrorKind::kConfig) throw;
          ++report.refused;  // e.g. heads that the tensor axis does not divide, a batch that does not split
          continue;
        }
        ++report.planned;
        if (!run.verdict.fits()) {
          ++report.too_big;
          break;
        }
        r.overrides =
            std::vector<std::string>(ov.begin() + static_cast<std::ptrdiff_t>(fixed.size()), ov.end());
        r.layout = describe(m, remat, batch, topology.num_slices);
        r.memory = run.memory.at(0);
        r.verdict = run.verdict;
        r.cost = estimate_cost(run.classes.at(0).plan, run.cfg, topology);
        report.fitting.push_back(std::move(r));
      }
    }
  }
  std::stable_sort(report.fitting.begin(), report.fitting.end(),
                   [](const SearchResult& a, const SearchResult& b) {
                     return a.cost.tokens_per_s_per_device > b.cost.tokens_per_s_per_device;
                   });
  // The ones returned fit on every rank class, not only at coordinate 0.
  std::vector<SearchResult> kept;
  for (SearchResult& r : report.fitting) {
    if (kept.size() == options.keep) break;
    std::vector<std::string> ov = fixed;
    ov.insert(ov.end(), r.overrides.begin(), r.overrides.end());
    const CompiledRun all = compile_run(load_config(config_file, ov, devices), topology);
    if (!all.verdict.fits()) continue;
    r.verdict = all.verdict;
    kept.push_back(std::move(r));
  }
  report.fitting = std::move(kept);
  return report;
}

}  // namespace tessera::compile
