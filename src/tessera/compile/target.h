// The machines `tessera compile` plans for: the catalogue (configs/targets.yml, one entry per
// device kind: memory, peaks, bandwidths, devices per node) and the topology a compile_topology
// name and compile_topology_num_slices resolve to. Holds no planning; planner.h and cost.h read
// a Topology. The cpu entry is measured on this machine when it is named (measure_cpu_machine).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/core/dtype.h"

namespace tessera::compile {

enum class TargetKind { kGpu, kTpu, kCpu };
const char* target_kind_name(TargetKind k);

// One device kind of the catalogue. Bandwidths are one direction of one device's links, bytes/s.
struct Target {
  std::string name;
  TargetKind kind = TargetKind::kGpu;
  double memory_bytes = 0;                         // usable device memory
  double reserved_bytes = 0;                       // taken by the runtime before the plan
  double peak_bf16_flops = 0, peak_f32_flops = 0;  // dense, FLOP/s
  double hbm_bytes_per_s = 0;
  double intra_node_bytes_per_s = 0;  // NVLink / TPU ICI
  double inter_node_bytes_per_s = 0;  // InfiniBand per GPU / TPU DCN per chip
  int64_t devices_per_node = 1;
  int64_t cores_per_chip = 1;   // TPU slice names count TensorCores where this is 2
  std::vector<int64_t> slices;  // TPU: the slice sizes the name may carry
  double link_fraction = 0;     // cpu: rank-to-rank bandwidth as a fraction of memory bandwidth
  // The fraction of peak that a large GEMM reaches; 1 unless measured (cpu).
  double gemm_efficiency = 1;
  double peak_for(DType compute) const { return compute == DType::kBF16 ? peak_bf16_flops : peak_f32_flops; }
};

struct Catalogue {
  std::vector<Target> targets;
  const Target* find(std::string_view name) const;
  std::string names() const;  // "a100-40gb, a100-80gb, ..." for error messages
};

// configs/targets.yml of the source tree.
std::filesystem::path default_catalogue_path();
// Parses the catalogue's YAML text; `where` names it in errors (kConfig, naming the entry and field).
Catalogue parse_catalogue(std::string_view yaml, std::string_view where);
Catalogue load_catalogue(const std::filesystem::path& path);

// What a cpu-<C> target is made of: this machine's cores, measured.
struct CpuMachine {
  int64_t cores = 1;     // the threads the calibration ran on
  double f32_flops = 0;  // all cores, FMA peak
  double bf16_flops = 0;
  double gemm_f32_flops = 0;         // a large f32 GEMM on all cores
  double memory_bytes = 0;           // MemTotal
  double bandwidth_bytes_per_s = 0;  // a streaming read on all cores
};
// About 0.3 s: the peak calibration (backends/cpu/peak.h), one GEMM and one streaming read.
CpuMachine measure_cpu_machine();

// FLOP/s as TFLOP/s for a report line, with the digits a CPU's fraction of a TFLOP/s needs
// ("0.212 TFLOP/s", "989.5 TFLOP/s").
std::string tflops_text(double flops_per_s);

// A named slice of devices times compile_topology_num_slices.
struct Topology {
  std::string name;  // as given: "v5e-256", "h100-80gb-4", "cpu-1x2"
  Target device;     // per device (cpu: filled from the measurement)
  int64_t devices_per_slice = 1;
  int64_t num_slices = 1;
  int64_t num_devices() const { return devices_per_slice * num_slices; }
  std::string describe() const;  // one line: devices, memory, peaks, links
};

// Resolves compile_topology (see configs/targets.yml for the names). `cpu` is used for cpu-<C>
// names and may be null when the name is not a cpu one (measure_cpu_machine is not called).
// Unknown names and sizes are kConfig errors that list what is known.
Topology resolve_topology(const Catalogue& catalogue, std::string_view name, int64_t num_slices,
                          const CpuMachine* cpu);

}  // namespace tessera::compile
