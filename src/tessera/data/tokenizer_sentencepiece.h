// SentencePiece tokenizers through the SentencePiece library (Debian libsentencepiece-dev): loading
// a .model file, and training one from text files the way MaxText's train_tokenizer does (read at
// most max_corpus_chars characters of the corpus, train, write the model).
//
// Training settings that are not options: the text is not normalised (identity rule, whitespace
// kept), so decode(encode(text)) == text whenever every character is in the vocabulary or
// byte_fallback is on; digits are split into single pieces; ids are Llama's (unk 0, bos 1, eos 2,
// no pad). Left out: user-defined symbols and the SentencePiece normaliser's NFKC rules.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tessera/data/tokenizer.h"

namespace tessera::data {

// Loads a SentencePiece .model file. Throws kIo.
std::unique_ptr<Tokenizer> load_sentencepiece(const std::filesystem::path& model_path);

struct SentencePieceTrainOptions {
  std::vector<std::string> inputs;   // files, folders or globs of .txt / .jsonl (documents.h)
  std::filesystem::path model_path;  // the .model written (atomically); a .vocab file beside it
  int64_t vocab_size = 32000;
  std::string model_type = "unigram";     // "unigram" (MaxText's trainer) or "bpe"
  int64_t max_corpus_chars = 10'000'000;  // Unicode characters read from the inputs, at most
  bool byte_fallback = true;              // unknown characters become <0xNN> byte pieces, never <unk>
  int num_threads = 0;                    // 0 = one per core
  bool verbose = false;                   // SentencePiece's own progress log on stderr
};

struct SentencePieceTrainReport {
  int64_t sentences = 0;  // lines given to the trainer
  int64_t chars = 0;      // their characters
  double seconds = 0;
};

// Reads the inputs' documents line by line (blank lines skipped) until max_corpus_chars characters,
// trains, and writes model_path and its .vocab. Throws kConfig for bad options or a vocabulary the
// corpus cannot fill, kIo for files.
SentencePieceTrainReport train_sentencepiece(const SentencePieceTrainOptions& options);

}  // namespace tessera::data
