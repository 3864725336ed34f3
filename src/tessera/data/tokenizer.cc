// load_tokenizer: the tokenizer_type names mapped to the loaders (tokenizer.h).
#include "tessera/data/tokenizer.h"

#include "tessera/core/error.h"
#include "tessera/data/tokenizer_bpe.h"
#include "tessera/data/tokenizer_sentencepiece.h"

namespace tessera::data {

std::unique_ptr<Tokenizer> load_tokenizer(std::string_view type, const std::filesystem::path& path) {
  if (path.empty()) fail(ErrorKind::kConfig, "tokenizer_path is empty: name the {} tokenizer file", type);
  if (type == "sentencepiece") return load_sentencepiece(path);
  if (type == "tiktoken") return load_tiktoken(path);
  if (type == "huggingface") return load_huggingface_bpe(path);
  fail(ErrorKind::kConfig, "tokenizer_type '{}': expected sentencepiece, tiktoken or huggingface", type);
}

}  // namespace tessera::data
