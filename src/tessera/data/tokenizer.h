// Tokenizers: text to token ids and back. One interface, two families:
//   - SentencePiece models (.model files; BPE or unigram), loaded and trained through the
//     SentencePiece library (tokenizer_sentencepiece.h);
//   - byte-level BPE in the GPT-2 / tiktoken family: `.tiktoken` rank files, or Hugging Face
//     vocab.json + merges.txt / tokenizer.json (tokenizer_bpe.h).
// The config names them tokenizer_type = sentencepiece | tiktoken | huggingface, with the file (or
// folder) in tokenizer_path; load_tokenizer turns the pair into a Tokenizer.
//
// encode() treats special-token text ("<|endoftext|>", "<s>") as ordinary text: training data that
// happens to contain such a string is not turned into control tokens. Callers add BOS/EOS ids
// themselves (the data iterator does, per add_bos / add_eos).
// Implementations are immutable after loading; encode and decode may be called from several threads.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::data {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // Throws kShape for an id outside [0, vocab_size()).
  virtual std::string decode(std::span<const int32_t> ids) const = 0;

  // Ids lie in [0, vocab_size()).
  virtual int64_t vocab_size() const = 0;
  // -1 when the vocabulary has no such token.
  virtual int32_t bos_id() const = 0;
  virtual int32_t eos_id() const = 0;
  virtual int32_t pad_id() const = 0;
  // "sentencepiece", "tiktoken" or "huggingface": the tokenizer_type that loads it.
  virtual std::string_view type() const = 0;
};

// Loads a tokenizer of `type` (sentencepiece | tiktoken | huggingface) from `path`:
//   sentencepiece: a .model file;
//   tiktoken:      a .tiktoken rank file (the regex and special tokens of the known encodings are
//                  chosen from its size: GPT-2/r50k, cl100k, o200k, Llama 3; see tokenizer_bpe.h);
//   huggingface:   a tokenizer.json file, or a folder holding tokenizer.json or vocab.json +
//                  merges.txt.
// Throws kConfig for an unknown type, kIo for a missing or malformed file.
std::unique_ptr<Tokenizer> load_tokenizer(std::string_view type, const std::filesystem::path& path);

}  // namespace tessera::data
