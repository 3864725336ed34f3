// A part that builds on `low`: its include runs down the order, which is allowed.
#pragma once

#include "tessera/low/low.h"
