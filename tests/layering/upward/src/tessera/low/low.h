// A part low in the order that includes one above it: cmake/check_layers.cmake must reject it.
#pragma once

#include "tessera/high/high.h"
