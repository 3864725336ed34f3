// The plans of one run on a topology that is not here: the config resolved for the topology's
// devices, the PlanSpec of every distinct rank class (built without allocating), the memory per
// device by category against the device, and the verdict. The cost model is cost.h; plan files
// are plan_file.h; the CLI (cli/cmd_compile.cc) prints these.
//
// Rank classes: a rank's plan depends on its mesh coordinates only through the pieces it holds
// (dist::split_piece needs equal parts, so every rank of an axis holds the same shapes) and the
// offsets of those pieces. The planner builds the plan of each corner of the mesh (coordinate 0
// and size-1 of every axis larger than one), and keeps one plan per distinct set of shapes,
// memory and schedule: that is every rank class, and a check that the ranks agree.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/compile/target.h"
#include "tessera/config/config.h"
#include "tessera/graph/plan_spec.h"
#include "tessera/models/model_spec.h"

namespace tessera::compile {

// Memory of one device as `tessera compile` reports it (bytes).
struct DeviceMemory {
  size_t params = 0;  // master weights and their compute copies
  size_t grads = 0;
  size_t optimizer = 0;
  size_t activations = 0;  // the planned activation arena (remat_policy applied)
  size_t collective = 0;   // FSDP gather buffers and staging, ZeRO-1 pieces, the communicators' scratch
  size_t kernels = 0;      // cpu: oneDNN's copy of the largest weight in its blocked layout
  size_t widened = 0;      // cpu without a bf16 GEMM: the largest bf16 GEMM's operands in f32
  size_t other = 0;        // batch inputs and the runtime's reservation
  size_t total() const {
    return params + grads + optimizer + activations + collective + kernels + widened + other;
  }
};
DeviceMemory device_memory(const graph::PlanSpec& plan, const Target& device);

// Mesh axes Tessera cannot build yet, refused by name (expert, pipeline, sequence, context, the
// transposes), as `tessera train` refuses them.
void reject_unbuilt_parallelism(const Config& cfg);

// The model and PlanSpec of the rank at `coords` (per mesh axis) of cfg's mesh, as the trainer
// builds them (train/trainer.cc's build_plan); nothing is allocated.
struct RankPlan {
  dist::MeshSizes coords{};
  models::ModelSpec model;
  graph::PlanSpec plan;
};
RankPlan build_rank_plan(const Config& cfg, const dist::MeshSizes& coords);

// The mesh of a resolved config (ici x dcn per axis).
dist::MeshSizes mesh_sizes(const Config& cfg);

// Equal in what differs between rank classes: node shapes, memory, FLOPs and the schedule's
// collectives (kind, group, bytes). Piece offsets are not compared.
bool same_rank_class(const graph::PlanSpec& a, const graph::PlanSpec& b);

struct Verdict {
  size_t needed = 0;  // the largest rank class's total
  double usable = 0;  // the device's memory (the reservation is counted in `other`)
  bool fits() const { return static_cast<double>(needed) <= usable; }
  double margin_bytes() const { return usable - static_cast<double>(needed); }
};

struct CompiledRun {
  Config cfg;  // resolved for topology.num_devices() devices in topology.num_slices slices
  Topology topology;
  std::vector<RankPlan> classes;     // one per distinct rank class
  int64_t corners_planned = 0;       // plans built to find them
  std::vector<DeviceMemory> memory;  // per class
  Verdict verdict;
};

// Loads `config_file` with `overrides` for the topology the config's compile_topology and
// compile_topology_num_slices name, and plans every rank class. `cpu` is used for cpu-<C> names.
// `first_class_only` builds only the plan at coordinate 0 (the search's quick pass).
Topology topology_of(const Config& cfg, const Catalogue& catalogue, const CpuMachine* cpu);
CompiledRun compile_run(const Config& cfg, const Topology& topology, bool first_class_only = false);

}  // namespace tessera::compile
