// The source tree this build was configured from. Tessera finds its shipped model presets
// (configs/models/) and target catalogue (configs/targets.yml) under it when they are not beside
// the run's config, and the tests and benchmarks find configs/ and their data there.
//
// The path is compiled into source_dir.cc alone, so every other object file is the same whichever
// folder the tree was cloned into (a compiler cache keyed on relative paths then reuses them).
#pragma once

#include <filesystem>

namespace tessera {

const std::filesystem::path& source_dir();

}  // namespace tessera
