// prepare-data and the documents it reads: .txt and .jsonl documents to shards and back (decoding
// every document), shard rollover at document boundaries, the manifest, stale shards of an earlier
// run, progress reports, and malformed JSONL named by file and line.
#include "tessera/data/prepare.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "data_test_util.h"
#include "tessera/core/error.h"
#include "tessera/core/file.h"
#include "tessera/data/documents.h"
#include "tessera/data/files.h"
#include "tessera/data/shard.h"
#include "tessera/data/tokenizer.h"
#include "testing/data_dir.h"

namespace tessera::data {
namespace {

namespace fs = std::filesystem;

using testing::TempDir;

std::unique_ptr<Tokenizer> tiny_tokenizer() {
  return load_tokenizer("tiktoken", tessera::testing::data_dir() / "fixtures" / "tiny_bpe" / "tiny.tiktoken");
}

// Writes the documents as a.txt, b.jsonl (two documents, a blank line, unicode escapes) and c.txt.
std::vector<std::string> write_inputs(const fs::path& dir) {
  const std::vector<std::string> docs = {"hello world\nsecond line\n", "held \"quoted\"\ttab",
                                         "caf\xC3\xA9 \xE2\x80\x94", "last one"};
  fs::create_directories(dir);
  std::ofstream(dir / "a.txt") << docs[0];
  std::ofstream(dir / "b.jsonl") << nlohmann::json{{"text", docs[1]}}.dump() << "\n\n"
                                 << R"({"id": 7, "text": "caf\u00e9 \u2014"})"
                                 << "\n";
  std::ofstream(dir / "c.txt") << docs[3];
  std::ofstream(dir / "ignored.csv") << "not,a,document\n";
  return docs;
}

TEST(PrepareData, ShardsDecodeBackToTheDocuments) {
  TempDir dir("prep_rt");
  const std::vector<std::string> docs = write_inputs(dir.path() / "in");
  auto tok = tiny_tokenizer();
  PrepareDataOptions o;
  o.inputs = {(dir.path() / "in").string()};
  o.out_dir = dir.path() / "out";
  o.tokens_per_shard = 12;
  int calls = 0;
  PrepareProgress last;
  const PrepareReport r = prepare_data(o, *tok, [&](const PrepareProgress& p) {
    ++calls;
    last = p;
  });
  EXPECT_EQ(r.documents, 4);
  EXPECT_GE(calls, 1);
  EXPECT_EQ(last.bytes_read, last.bytes_total);
  EXPECT_EQ(last.tokens, r.tokens);

  // Documents never straddle shards: each shard closes at the first boundary past 12 tokens.
  std::vector<std::string> decoded;
  int64_t tokens = 0;
  ASSERT_EQ(r.shards,
            resolve_data_files(o.out_dir.string(), std::array<std::string_view, 1>{kShardExtension}));
  for (const fs::path& p : r.shards) {
    ShardReader s(p);
    EXPECT_EQ(s.space().vocab_size, tok->vocab_size());
    for (uint64_t d = 0; d < s.document_count(); ++d) {
      std::vector<int32_t> ids(s.doc_begin(d + 1) - s.doc_begin(d));
      s.read(s.doc_begin(d), ids);
      decoded.push_back(tok->decode(ids));
    }
    tokens += static_cast<int64_t>(s.token_count());
    if (&p != &r.shards.back()) {
      EXPECT_GE(s.token_count(), 12u);
    }
  }
  EXPECT_EQ(decoded, docs);
  EXPECT_EQ(tokens, r.tokens);
  EXPECT_GE(r.shards.size(), 2u);

  const nlohmann::json m = nlohmann::json::parse(read_file(o.out_dir / "manifest.json"));
  EXPECT_EQ(m["tokens"], r.tokens);
  EXPECT_EQ(m["documents"], 4);
  EXPECT_EQ(m["shards"].size(), r.shards.size());
  EXPECT_EQ(m["tokenizer"]["vocab_size"], tok->vocab_size());

  // A second run into the same folder with bigger shards leaves no stale shard behind.
  o.tokens_per_shard = 1 << 20;
  const PrepareReport again = prepare_data(o, *tok);
  EXPECT_EQ(again.shards.size(), 1u);
  EXPECT_EQ(resolve_data_files(o.out_dir.string(), std::array<std::string_view, 1>{kShardExtension}).size(),
            1u);
}

TEST(PrepareData, MalformedJsonlNamesFileAndLine) {
  TempDir dir("prep_bad");
  std::ofstream(dir.path() / "x.jsonl") << R"({"text": "fine"})"
                                        << "\n"
                                        << R"({"txt": "typo"})"
                                        << "\n";
  std::ofstream(dir.path() / "y.jsonl") << R"({"text": 3})"
                                        << "\n";
  std::ofstream(dir.path() / "z.jsonl") << "{not json\n";
  auto tok = tiny_tokenizer();
  const std::pair<const char*, const char*> cases[] = {
      {"x.jsonl", "x.jsonl:2: the object has no \"text\" field"},
      {"y.jsonl", "y.jsonl:1: \"text\" is a number, expected a string"},
      {"z.jsonl", "z.jsonl:1: not valid JSON"},
  };
  for (const auto& [file, message] : cases) {
    PrepareDataOptions o;
    o.inputs = {(dir.path() / file).string()};
    o.out_dir = dir.path() / "out";
    try {
      prepare_data(o, *tok);
      ADD_FAILURE() << "expected an error for " << file;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kIo);
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
}

TEST(Documents, IndexReadsDocumentsInAnyOrder) {
  TempDir dir("docs_index");
  const std::vector<std::string> docs = write_inputs(dir.path());
  DocumentIndex index(resolve_text_files({dir.path().string()}));
  ASSERT_EQ(index.size(), docs.size());
  for (uint64_t d = index.size(); d-- > 0;) EXPECT_EQ(index.read(d), docs[d]);
  // A file named explicitly must be text.
  EXPECT_THROW(resolve_text_files({(dir.path() / "ignored.csv").string()}), Error);
  // Globs and comma-separated lists.
  EXPECT_EQ(
      resolve_text_files({(dir.path() / "*.txt").string() + "," + (dir.path() / "b.jsonl").string()}).size(),
      3u);
}

}  // namespace
}  // namespace tessera::data
