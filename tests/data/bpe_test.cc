// Byte-level BPE: the merge loop and both file formats on a hand-made vocabulary whose ids are
// worked out below, round trips on awkward text, malformed files, and (when the file is present)
// the real GPT-2 vocabulary against ids computed by the tiktoken package.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "data_test_util.h"
#include "tessera/core/error.h"
#include "tessera/data/tokenizer.h"
#include "tessera/data/tokenizer_bpe.h"
#include "testing/data_dir.h"

namespace tessera::data {
namespace {

namespace fs = std::filesystem;
using Ids = std::vector<int32_t>;

const fs::path kFixtures = tessera::testing::data_dir() / "fixtures" / "tiny_bpe";

// tests/data/fixtures/tiny_bpe (tools/make_bpe_fixtures.py): byte b is id b; merges, in rank order,
//   256 he = h+e   257 ll = l+l   258 hell = he+ll   259 hello = hell+o
//   260 " w" = ' '+w   261 or = o+r   262 " wor" = " w"+or   263 ld = l+d
// "hello world" splits (GPT-2 regex) into "hello" and " world".
//   "hello": pairs he(256) ll(257) -> he merges first: [he,l,l,o]; then ll: [he,ll,o]; then
//            hell(258): [hell,o]; then hello(259): [hello]                       -> 259
//   " world": " w"(260), or(261), ld(263) -> [" w",o,r,l,d] -> [" w",or,l,d] -> [" wor",l,d]
//            -> [" wor",ld]; " world" is not a token                             -> 262 263
//   "held":  he(256), then ld(263): [he, ld]                                      -> 256 263
const std::vector<std::pair<std::string, Ids>> kTinyCases = {
    {"hello world", {259, 262, 263}},
    {"held", {256, 263}},
    {"", {}},
    // Regex pieces: "it" "'s" " 12" (no merges apply, so bytes).
    {"it's 12", {'i', 't', '\'', 's', ' ', '1', '2'}},
    // "a  b" splits into "a", " " (\s+(?!\S) gives back the space before b), " b".
    {"a  b", {'a', ' ', ' ', 'b'}},
    // Two-byte UTF-8 letter: its bytes 0xC3 0xA9.
    {"\xC3\xA9", {0xC3, 0xA9}},
    // Invalid UTF-8 is not matched by the regex and still encodes, byte by byte.
    {"\xFF\xFEhe", {0xFF, 0xFE, 256}},
};

TEST(ByteBpe, TinyTiktokenKnownIds) {
  auto tok = load_tiktoken(kFixtures / "tiny.tiktoken");
  EXPECT_EQ(tok->vocab_size(), 264);
  EXPECT_EQ(tok->bos_id(), -1);  // a size no preset knows: no special tokens
  for (const auto& [text, ids] : kTinyCases) {
    EXPECT_EQ(tok->encode(text), ids) << "text: " << text;
    EXPECT_EQ(tok->decode(tok->encode(text)), text);
  }
}

TEST(ByteBpe, TinyHuggingFaceKnownIds) {
  auto tok = load_huggingface_bpe(kFixtures);  // the folder: vocab.json + merges.txt
  EXPECT_EQ(tok->vocab_size(), 265);
  EXPECT_EQ(tok->eos_id(), 264);  // <|endoftext|>
  EXPECT_EQ(tok->bos_id(), 264);
  EXPECT_EQ(tok->decode(Ids{259, 264}), "hello<|endoftext|>");
  // Special-token text in the input is ordinary text, never the special id.
  EXPECT_EQ(tok->encode("<|endoftext|>").size(), 13u);
  for (const auto& [text, ids] : kTinyCases) EXPECT_EQ(tok->encode(text), ids) << "text: " << text;
}

TEST(ByteBpe, LoadTokenizerByType) {
  EXPECT_EQ(load_tokenizer("tiktoken", kFixtures / "tiny.tiktoken")->encode("held"), (Ids{256, 263}));
  EXPECT_EQ(load_tokenizer("huggingface", kFixtures / "vocab.json")->encode("held"), (Ids{256, 263}));
  try {
    load_tokenizer("wordpiece", kFixtures);
    FAIL() << "expected a config error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
  }
}

TEST(ByteBpe, RoundTripsAwkwardText) {
  auto tok = load_tiktoken(kFixtures / "tiny.tiktoken");
  const std::string texts[] = {"  leading and trailing  ",
                               "tabs\tand\r\nnewlines\n\n\n",
                               "日本語 naïve “quotes” 🙂",
                               std::string("nul\0byte", 8),
                               "'''",
                               "hellohellohello world world"};
  for (const std::string& t : texts) EXPECT_EQ(tok->decode(tok->encode(t)), t);
}

TEST(ByteBpe, DecodeRejectsIdsOutsideTheVocabulary) {
  auto tok = load_tiktoken(kFixtures / "tiny.tiktoken");
  EXPECT_THROW(tok->decode(Ids{5, 264}), Error);
  EXPECT_THROW(tok->decode(Ids{-1}), Error);
}

TEST(ByteBpe, MalformedFilesNameTheLine) {
  const fs::path dir = fs::temp_directory_path() / "tessera_bpe_test";
  fs::create_directories(dir);
  const fs::path bad = dir / "bad.tiktoken";
  std::ofstream(bad) << "aGU= 0\nnot base64! 1\n";
  try {
    load_tiktoken(bad);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    EXPECT_NE(std::string(e.what()).find("bad.tiktoken:2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_tiktoken(dir / "missing.tiktoken"), Error);
  fs::remove_all(dir);
}

// Fields of the wrong JSON type (found by fuzz/bpe_fuzz.cc) are kIo naming the file, not
// nlohmann's type_error escaping the loader.
TEST(ByteBpe, JsonFieldsOfTheWrongTypeAreIoErrors) {
  testing::TempDir dir("bpe_json_types");
  const fs::path tokenizer_json = dir.path() / "tokenizer.json";
  const fs::path vocab_json = dir.path() / "vocab.json", merges = dir.path() / "merges.txt";
  std::ofstream(merges) << "#version: 0.2\n";
  for (
      const char* text :
      {R"({"model": 3})", R"({"model": {"type": 3}})",
       R"({"model": {"type": "BPE", "vocab": {}}, "pre_tokenizer": 5})",
       R"({"model": {"type": "BPE", "vocab": {}}, "added_tokens": [7]})",
       // An added token's id that is no integer, or out of range (a float of
       // 2.6e90 once reached an int conversion, undefined behaviour).
       R"({"model": {"type": "BPE", "vocab": {}}, "added_tokens": [{"special": true, "id": 2.6e90}]})",
       R"({"model": {"type": "BPE", "vocab": {}}, "added_tokens": [{"special": true, "id": 1e12}]})",
       R"({"model": {"type": "BPE", "vocab": {}}, "added_tokens": [{"special": true, "id": 1000000000000}]})",
       R"({"model": {"type": "BPE", "vocab": {}}, "added_tokens": [{"special": true, "id": -3}]})",
       R"({"model": {"type": "BPE", "vocab": {}}, "added_tokens": [{"special": true}]})"}) {
    std::ofstream(tokenizer_json) << text;
    try {
      load_huggingface_bpe(tokenizer_json);
      ADD_FAILURE() << "loaded " << text;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kIo) << e.what();
      EXPECT_NE(std::string(e.what()).find(tokenizer_json.string()), std::string::npos) << e.what();
    }
  }
  std::ofstream(vocab_json) << R"({"a": "not an id"})";
  EXPECT_THROW(load_huggingface_bpe(vocab_json, merges), Error);
}

// The vocabulary table is dense up to the largest id: one huge id (found by fuzz/bpe_fuzz.cc) took
// gigabytes and minutes before it was refused.
TEST(ByteBpe, HugeTokenIdIsRefusedBeforeAllocating) {
  testing::TempDir dir("bpe_huge_id");
  const fs::path bad = dir.path() / "huge.tiktoken";
  std::ofstream(bad) << "AA== 0\nAQ== 333333333\n";
  try {
    load_tiktoken(bad);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    const std::string says = "huge.tiktoken:2: token id 333333333 is out of range";
    EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
  }
}

TEST(ByteBpe, ByteToUnicodeTable) {
  EXPECT_EQ(byte_to_unicode(' '), "\xC4\xA0");  // "Ġ", U+0120
  EXPECT_EQ(byte_to_unicode('a'), "a");
  EXPECT_EQ(byte_to_unicode('\n'), "\xC4\x8A");  // "Ċ", U+010A
}

// The real GPT-2 vocabulary: whisper/assets/gpt2.tiktoken from the openai-whisper package on PyPI
// (sha256 306cd27f...). Set TESSERA_GPT2_TIKTOKEN to its path to run this test. The expected ids were
// computed with the tiktoken package (0.14.0) on that file.
TEST(ByteBpe, Gpt2KnownIds) {
  const char* path = std::getenv("TESSERA_GPT2_TIKTOKEN");
  if (!path || !fs::exists(path))
    GTEST_SKIP()
        << "set TESSERA_GPT2_TIKTOKEN to GPT-2's gpt2.tiktoken (pip download --no-deps openai-whisper; "
           "whisper/assets/gpt2.tiktoken) to check the real vocabulary";
  auto tok = load_tokenizer("tiktoken", path);
  EXPECT_EQ(tok->vocab_size(), 50257);
  EXPECT_EQ(tok->eos_id(), 50256);
  EXPECT_EQ(tok->decode(Ids{50256}), "<|endoftext|>");
  const std::vector<std::pair<std::string, Ids>> cases = {
      {"Hello world", {15496, 995}},
      {"hello", {31373}},
      {" the", {262}},
      {"The quick brown fox jumps over the lazy dog.",
       {464, 2068, 7586, 21831, 18045, 625, 262, 16931, 3290, 13}},
      {"It's 2024!  Tabs\tand\nnewlines\n\n",
       {1026, 338, 48609, 0, 220, 309, 8937, 197, 392, 198, 3605, 6615, 628}},
      {"na\xC3\xAFve caf\xC3\xA9, Z\xC3\xBCrich \xE2\x80\x94 \xE2\x80\x9Cquotes\xE2\x80\x9D",
       {2616, 38776, 40304, 11, 1168, 9116, 7527, 851, 564, 250, 421, 6421, 447, 251}},
      {"    indented code()", {220, 220, 220, 773, 4714, 2438, 3419}},
      {"I'll we've they're", {40, 1183, 356, 1053, 484, 821}},
      {"12345 67", {10163, 2231, 8275}},
      {"\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E\xE3\x81\xAE\xE3\x83\x86\xE3\x82\xAD\xE3\x82\xB9\xE3\x83\x88",
       {33768, 98, 17312, 105, 45739, 252, 5641, 24336, 25084, 43302}},
      {"emoji \xF0\x9F\x99\x82 ok", {368, 31370, 32485, 12876}},
      {"trailing spaces   ", {9535, 4386, 9029, 220, 220, 220}},
  };
  for (const auto& [text, ids] : cases) {
    EXPECT_EQ(tok->encode(text), ids) << "text: " << text;
    EXPECT_EQ(tok->decode(ids), text);
  }
}

}  // namespace
}  // namespace tessera::data
