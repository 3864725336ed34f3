// The data of the test part being built (tests/<part>/ in the source tree: goldens, fixtures,
// scripts). Each test_<part> executable is compiled with TESSERA_TEST_PART naming its folder.
#pragma once

#include <filesystem>

#include "tessera/core/source_dir.h"

namespace tessera::testing {

inline std::filesystem::path data_dir() {
  return source_dir() / "tests" / TESSERA_TEST_PART;
}

}  // namespace tessera::testing
