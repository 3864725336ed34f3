// Fuzzes the byte-level BPE loaders. The first input byte chooses the file kind; the rest is cut at
// 0xFF bytes into the files:
//   0: a .tiktoken rank file;
//   1: a Hugging Face tokenizer.json;
//   2: vocab.json, 0xFF, merges.txt;
//   3: a folder with tokenizer.json, 0xFF, tokenizer_config.json.
// Loading must either throw tessera::Error or give a tokenizer that encodes a fixed text and decodes
// the ids back.
#include <filesystem>
#include <string>

#include "fuzz/fuzz_util.h"
#include "tessera/core/error.h"
#include "tessera/data/tokenizer_bpe.h"

namespace fs = std::filesystem;
using tessera::fuzz::write_scratch;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int kind = data[0] % 4;
  const auto parts = tessera::fuzz::split_input(data + 1, size - 1, '\xff');
  auto part = [&](size_t i) { return i < parts.size() ? parts[i] : std::string_view(); };
  try {
    std::unique_ptr<tessera::data::Tokenizer> tok;
    if (kind == 0) {
      tok = tessera::data::load_tiktoken(write_scratch("input.tiktoken", part(0)));
    } else if (kind == 1) {
      tok = tessera::data::load_huggingface_bpe(write_scratch("tokenizer.json", part(0)));
    } else if (kind == 2) {
      tok = tessera::data::load_huggingface_bpe(write_scratch("vocab.json", part(0)),
                                                write_scratch("merges.txt", part(1)));
    } else {
      const fs::path dir = tessera::fuzz::scratch_dir() / "hf";
      fs::create_directories(dir);
      write_scratch("hf/tokenizer.json", part(0));
      write_scratch("hf/tokenizer_config.json", part(1));
      tok = tessera::data::load_huggingface_bpe(dir);
    }
    const auto ids = tok->encode("Hello, world! 123 \xc3\xa9t\xc3\xa9 <|endoftext|>\n\n  x");
    (void)tok->decode(ids);
  } catch (const tessera::Error&) {
  }
  return 0;
}
