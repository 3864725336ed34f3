// SentencePiece through the library: a tiny BPE and a tiny unigram model trained inside the test on
// a few KB of generated English, exact round trips (byte fallback covers unseen characters), the
// max_corpus_chars budget, Llama's control ids, and bad options.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "data_test_util.h"
#include "tessera/core/error.h"
#include "tessera/data/tokenizer.h"
#include "tessera/data/tokenizer_sentencepiece.h"
#include "testing/data_dir.h"

namespace tessera::data {
namespace {

namespace fs = std::filesystem;

using testing::TempDir;

// About 6 KB of sentences from a small vocabulary, deterministic.
std::string tiny_corpus() {
  const char* subjects[] = {"The captain",    "A whale",    "Elizabeth",
                            "The old sailor", "Her sister", "Mr. Darcy"};
  const char* verbs[] = {"watched", "followed", "answered", "remembered", "admired", "described"};
  const char* objects[] = {"the grey sea",        "a letter from London", "the ship at dawn",
                           "her mother's garden", "the long voyage",      "an unexpected visitor"};
  std::string text;
  for (int i = 0; i < 120; ++i)
    text +=
        fmt::format("{} {} {} in {}.\n", subjects[i % 6], verbs[(i / 6) % 6], objects[(i * 5) % 6], 1800 + i);
  return text;
}

fs::path write_corpus(const fs::path& dir) {
  std::ofstream(dir / "corpus.txt") << tiny_corpus();
  std::ofstream(dir / "more.jsonl") << R"({"text": "Call me Ishmael.\nSome years ago, never mind how long."})"
                                    << "\n";
  return dir;
}

TEST(SentencePiece, TrainsBpeWithByteFallbackAndRoundTrips) {
  TempDir dir("sp_bpe");
  SentencePieceTrainOptions o;
  o.inputs = {write_corpus(dir.path()).string()};
  o.model_path = dir.path() / "tiny.model";
  o.vocab_size = 420;  // 3 control + 256 byte pieces + merges and characters
  o.model_type = "bpe";
  o.num_threads = 1;
  const SentencePieceTrainReport r = train_sentencepiece(o);
  EXPECT_GT(r.sentences, 120);
  EXPECT_TRUE(fs::exists(dir.path() / "tiny.vocab"));

  auto tok = load_tokenizer("sentencepiece", o.model_path);
  EXPECT_EQ(tok->vocab_size(), 420);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_EQ(tok->pad_id(), -1);
  EXPECT_EQ(tok->type(), "sentencepiece");
  for (const std::string text :
       {"The captain watched the grey sea in 1850.", "  two  spaces\tand a tab\n",
        "unseen: \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x99\x82 Zzz!", "multi\nline\n\ntext"}) {
    const std::vector<int32_t> ids = tok->encode(text);
    for (int32_t id : ids) EXPECT_NE(id, 0) << "no <unk> with byte fallback: " << text;
    EXPECT_EQ(tok->decode(ids), text);
  }
  // Frequent words of the corpus became single pieces: far fewer ids than bytes.
  const std::string seen = "The captain watched the grey sea";
  EXPECT_LT(tok->encode(seen).size(), seen.size() / 2);
  EXPECT_THROW(tok->decode(std::vector<int32_t>{420}), Error);
}

TEST(SentencePiece, TrainsUnigramWithinTheCharacterBudget) {
  TempDir dir("sp_unigram");
  SentencePieceTrainOptions o;
  o.inputs = {(write_corpus(dir.path()) / "*.txt").string()};  // a glob
  o.model_path = dir.path() / "sub" / "uni.model";
  o.vocab_size = 60;
  o.model_type = "unigram";
  o.byte_fallback = false;
  o.max_corpus_chars = 2000;
  o.num_threads = 1;
  const SentencePieceTrainReport r = train_sentencepiece(o);
  EXPECT_GE(r.chars, 2000);
  EXPECT_LT(r.chars, 2000 + 60);  // stops after the line that crosses the budget
  auto tok = load_tokenizer("sentencepiece", o.model_path);
  EXPECT_EQ(tok->vocab_size(), 60);
  const std::string text = "Her sister admired the ship at dawn in 1803.";
  EXPECT_EQ(tok->decode(tok->encode(text)), text);
}

TEST(SentencePiece, BadOptionsAndFiles) {
  TempDir dir("sp_bad");
  SentencePieceTrainOptions o;
  o.inputs = {write_corpus(dir.path()).string()};
  o.model_path = dir.path() / "x.model";
  o.model_type = "wordpiece";
  EXPECT_THROW(train_sentencepiece(o), Error);
  o.model_type = "bpe";
  o.vocab_size = 100000;  // far more pieces than a few KB of text holds
  o.num_threads = 1;
  try {
    train_sentencepiece(o);
    FAIL() << "expected a config error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
  }
  EXPECT_FALSE(fs::exists(o.model_path));
  o.inputs = {(dir.path() / "none*.txt").string()};
  EXPECT_THROW(train_sentencepiece(o), Error);
  EXPECT_THROW(load_tokenizer("sentencepiece", dir.path() / "corpus.txt"), Error);
}

// A model with an empty piece (fixtures/empty_piece.model, found by fuzz/sentencepiece_fuzz.cc)
// makes SentencePiece's trie builder throw rather than return a status: still kIo naming the file.
TEST(SentencePiece, MalformedModelIsAnIoErrorNamingTheFile) {
  const fs::path model = tessera::testing::data_dir() / "fixtures" / "empty_piece.model";
  try {
    load_sentencepiece(model);
    FAIL() << "loaded " << model;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    EXPECT_NE(std::string(e.what()).find(model.string()), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessera::data
