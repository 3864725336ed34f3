// The file compiled_trainstep_file names: what `tessera compile` planned (the model, the run's
// sizes, the mesh, and every rank class's PlanSpec in its JSON form), and the check `tessera
// train` makes against the plan it would build, naming the first difference. Unlike MaxText's
// serialized executable it holds no code: a run with the same config builds the same plan in a
// second; the file pins what was checked to fit.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "tessera/compile/planner.h"

namespace tessera::compile {

inline constexpr const char* kPlanFileFormat = "tessera.compiled_trainstep";
inline constexpr int kPlanFileVersion = 1;

nlohmann::json plan_file_json(const CompiledRun& run);
// Through core/file.h's AtomicFileWriter.
void write_plan_file(const std::filesystem::path& path, const CompiledRun& run);
// Parses and checks the format; kConfig naming compiled_trainstep_file on failure.
nlohmann::json read_plan_file(const std::filesystem::path& path);

// The first difference between the file and this rank's run (its resolved config and the plan
// build_rank_plan makes for its coordinates), in the order model, run sizes, mesh, graph nodes,
// schedule, memory; "" when they agree.
std::string first_difference(const nlohmann::json& file, const Config& cfg, const RankPlan& rank);

// read_plan_file + first_difference; throws kConfig "compiled_trainstep_file ...: <difference>".
void check_plan_file(const std::filesystem::path& path, const Config& cfg, const RankPlan& rank);

}  // namespace tessera::compile
