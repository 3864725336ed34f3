// The families' entries (decoder.h), each defined in its own file. Internal to models/.
#pragma once

#include "tessera/models/decoder.h"

namespace tessera::models {

using graph::ValueId;

extern const Family kLlamaFamily;  // llama.cc
extern const Family kGpt3Family;   // gpt3.cc

}  // namespace tessera::models
