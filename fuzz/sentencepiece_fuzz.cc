// Fuzzes loading a SentencePiece model: the input is the .model file. Loading must either throw
// tessera::Error or give a tokenizer that encodes a fixed text and decodes the ids back.
#include <string>

#include "fuzz/fuzz_util.h"
#include "tessera/core/error.h"
#include "tessera/data/tokenizer_sentencepiece.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = tessera::fuzz::write_scratch("input.model", {reinterpret_cast<const char*>(data), size});
  try {
    auto tok = tessera::data::load_sentencepiece(path);
    const auto ids = tok->encode("Hello, world! 123 \xc3\xa9t\xc3\xa9 <s> </s>");
    (void)tok->decode(ids);
  } catch (const tessera::Error&) {
  }
  return 0;
}
