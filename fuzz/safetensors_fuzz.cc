// Fuzzes the safetensors reader: the input is the file. Opening must either succeed, with every
// tensor's bytes inside the mapping (each one is read through), or throw tessera::Error.
#include <cstdint>

#include "fuzz/fuzz_util.h"
#include "tessera/core/error.h"
#include "tessera/core/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path =
      tessera::fuzz::write_scratch("input.safetensors", {reinterpret_cast<const char*>(data), size});
  try {
    tessera::SafetensorsFile file(path.string());
    volatile uint8_t sink = 0;
    for (const std::string& name : file.names()) {
      tessera::Tensor t = file.get(name);
      const auto* bytes = static_cast<const uint8_t*>(t.data());
      for (size_t i = 0; i < t.nbytes(); ++i) sink = sink ^ bytes[i];
    }
    (void)file.metadata();
  } catch (const tessera::Error&) {
  }
  return 0;
}
