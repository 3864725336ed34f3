// The CPU backend (backends/backend.h): host memory and every op family, in float32 and bfloat16.
#pragma once

#include "tessera/backends/backend.h"

namespace tessera::cpu {

backends::Backend& cpu_backend();

}  // namespace tessera::cpu
