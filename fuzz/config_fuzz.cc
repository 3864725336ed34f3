// Fuzzes the config loader: the input up to the first 0xFF byte is the YAML file, and each
// 0xFF-separated part after it one `key=value` override, as given on the command line. The loader
// must either return a finalized Config or throw tessera::Error.
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "tessera/config/config.h"
#include "tessera/core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto parts = tessera::fuzz::split_input(data, size, '\xff');
  const auto path = tessera::fuzz::write_scratch("config.yml", parts[0]);
  std::vector<std::string> overrides(parts.begin() + 1, parts.end());
  try {
    tessera::Config cfg = tessera::load_config(path, overrides);
    (void)tessera::config_to_yaml(cfg);
  } catch (const tessera::Error&) {
  }
  return 0;
}
