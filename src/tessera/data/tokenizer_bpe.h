// Byte-level BPE (the GPT-2 / tiktoken family): text is split into pieces by a pre-tokeniser regex
// (PCRE2, which has the \p{..} classes and lookahead these regexes need), each piece's UTF-8 bytes
// start as one part per byte, and adjacent parts are merged, lowest rank first, until no adjacent
// pair has a rank. Two ways to rank a pair, one per file format:
//   - tiktoken (.tiktoken: one "<base64 bytes> <rank>" per line): the pair's rank is the rank of the
//     concatenated bytes as a token, and the token's id is its rank;
//   - Hugging Face (vocab.json + merges.txt, or tokenizer.json): the pair's rank is its line in the
//     merges list; ids come from vocab.json, whose keys spell bytes through GPT-2's byte-to-unicode
//     table (so "Ġ" is the space byte).
// A piece that is a token as a whole is emitted directly (tiktoken does so; Hugging Face only with
// ignore_merges). Bytes the regex does not match (invalid UTF-8) are encoded as pieces of their own.
//
// Special tokens (<|endoftext|>, ...) are known for decoding and as bos/eos ids, never produced by
// encode() from text (tokenizer.h). The known tiktoken encodings are recognised by their number of
// ranks and get their regex and special tokens:
//   50256 ranks  GPT-2 / r50k_base  <|endoftext|> = 50256 (bos = eos)
//   100256       cl100k_base        <|endoftext|> = 100257, FIM and <|endofprompt|>
//   199998       o200k_base         <|endoftext|> = 199999, <|endofprompt|> = 200018
//   128000       Llama 3            <|begin_of_text|> = 128000 (bos), <|end_of_text|> = 128001 (eos),
//                                   256 special ids in all
// Other sizes get the GPT-2 regex and no special tokens unless ByteBpeOptions say otherwise.
// Left out: Hugging Face normalisers, byte_fallback BPE (SentencePiece-style; use a .model), and
// encoding special-token text into special ids.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/data/tokenizer.h"

namespace tessera::data {

// Pre-tokeniser regexes, as the reference implementations define them.
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view kCl100kPattern =
    R"('(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s)";
inline constexpr std::string_view kO200kPattern =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct SpecialToken {
  std::string text;
  int32_t id;
};

// Overrides for load_tiktoken; an empty pattern (and no special tokens) means "as recognised from
// the file's size".
struct ByteBpeOptions {
  std::string pattern;
  std::vector<SpecialToken> special_tokens;
  int32_t bos_id = -1, eos_id = -1, pad_id = -1;
};

// Loads a .tiktoken rank file. Throws kIo for a missing or malformed file (naming the line).
std::unique_ptr<Tokenizer> load_tiktoken(const std::filesystem::path& path,
                                         const ByteBpeOptions& options = {});

// Loads a Hugging Face byte-level BPE: `path` is a tokenizer.json file, or a folder holding
// tokenizer.json or vocab.json + merges.txt. bos/eos/pad come from tokenizer_config.json beside it
// when present, else from the vocabulary's <|endoftext|> / <s> / </s> tokens. Throws kIo.
std::unique_ptr<Tokenizer> load_huggingface_bpe(const std::filesystem::path& path);

// The Hugging Face vocab.json + merges.txt pair.
std::unique_ptr<Tokenizer> load_huggingface_bpe(const std::filesystem::path& vocab_json,
                                                const std::filesystem::path& merges_txt);

// GPT-2's reversible byte-to-unicode table: the character (as UTF-8) that stands for byte b in
// Hugging Face vocab.json and merges.txt.
std::string byte_to_unicode(uint8_t b);

}  // namespace tessera::data
