#include "tessera/core/source_dir.h"

namespace tessera {

const std::filesystem::path& source_dir() {
  static const std::filesystem::path dir = TESSERA_SOURCE_DIR;  // set for this file alone (CMakeLists.txt)
  return dir;
}

}  // namespace tessera
