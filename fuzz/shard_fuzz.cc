// Fuzzes the token shard reader. The first input byte chooses how the rest, the shard file, is
// written: bit 0 set, the harness first stores correct header and payload checksums into it (so that
// the fuzzer reaches the checks behind them); bit 1 set, the reader also verifies the payload.
// Opening must either throw tessera::Error or give a reader whose every document and token can be
// read.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "tessera/core/crc32c.h"
#include "tessera/core/error.h"
#include "tessera/data/shard.h"

namespace {

void store_u32(std::string& s, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) s[at + i] = static_cast<char>((v >> (8 * i)) & 0xFF);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t mode = data[0];
  std::string file(reinterpret_cast<const char*>(data + 1), size - 1);
  const uint64_t header = tessera::data::kShardHeaderBytes;
  if ((mode & 1) && file.size() >= header) {
    store_u32(file, 52, tessera::crc32c(file.data() + header, file.size() - header));
    store_u32(file, 56, tessera::crc32c(file.data(), 56));
  }
  const auto path = tessera::fuzz::write_scratch("input.tokens", file);
  try {
    tessera::data::ShardReader reader(path, (mode & 2) != 0);
    // Every document boundary (up to a cap that keeps one input fast), the document of a few
    // positions, and the tokens in slices.
    const uint64_t docs = std::min<uint64_t>(reader.document_count(), 4096);
    for (uint64_t d = 0; d <= docs; ++d) (void)reader.doc_begin(d);
    const uint64_t tokens = reader.token_count();
    if (tokens > 0) {
      for (uint64_t pos : {uint64_t{0}, tokens / 2, tokens - 1}) (void)reader.document_at(pos);
      std::vector<int32_t> out(std::min<uint64_t>(tokens, 4096));
      for (uint64_t begin = 0; begin + out.size() <= std::min<uint64_t>(tokens, 1 << 16); begin += out.size())
        reader.read(begin, out);
    }
  } catch (const tessera::Error&) {
  }
  return 0;
}
