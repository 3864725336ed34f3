// `tessera compile --search`: for a model and a topology, the layouts that fit, best first by
// estimated throughput. A layout is a mesh (ici data x fsdp x tensor x expert inside a slice, the
// expert axis only for a mixture of experts; data or fsdp over the slices), a remat policy and a
// per-device batch; every other key stays as configured.
// Candidates are planned at rank coordinate 0 (all ranks hold the same shapes, planner.h); the
// ones returned are re-planned for every rank class and must fit in all of them.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "tessera/compile/cost.h"
#include "tessera/compile/planner.h"

namespace tessera::compile {

struct SearchOptions {
  std::vector<std::string> remat_policies = {"full", "save_dot_except_mlp", "minimal", "none"};
  std::vector<double> per_device_batches = {1, 2, 4, 8, 16};
  int64_t max_tensor = 8;  // tensor parallelism stays inside a node (and divides the heads)
  size_t keep = 10;        // layouts returned
};

struct SearchResult {
  std::vector<std::string> overrides;  // the key=value settings of the layout
  std::string layout;                  // "fsdp 8 x tensor 1 x data 1, dcn data 4; remat full; batch 4"
  DeviceMemory memory;
  Verdict verdict;
  CostReport cost;
};

struct SearchReport {
  std::vector<SearchResult> fitting;              // best first by tokens per second per device
  int64_t planned = 0, refused = 0, too_big = 0;  // refused: the config or model cannot build the layout
};

SearchReport search_layouts(const std::filesystem::path& config_file,
                            const std::vector<std::string>& overrides, const Topology& topology,
                            const SearchOptions& options = {});

}  // namespace tessera::compile
