// The batch iterator: packing with segment ids, positions and -1 targets on hand-made documents
// (expected rows written out by hand), one-pass eval with padding, shuffling determinism, disjoint
// data-parallel readers, exact resume from a saved state, and the text source agreeing with the
// token-shard source.
#include "tessera/data/iterator.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "data_test_util.h"
#include "tessera/core/error.h"
#include "tessera/data/prepare.h"
#include "tessera/data/shard.h"
#include "tessera/data/tokenizer.h"
#include "testing/data_dir.h"

namespace tessera::data {
namespace {

namespace fs = std::filesystem;
using Ids = std::vector<int32_t>;

using testing::TempDir;

// vocab 100, BOS 1, EOS 2.
constexpr TokenSpace kSpace{100, 1, 2, -1};

void write_shard(const fs::path& path, const std::vector<Ids>& docs, TokenSpace space = kSpace) {
  ShardWriter w(path, space);
  for (const Ids& d : docs) w.add_document(d);
  w.finish();
}

// One row of a batch, as the four arrays the trainer receives.
struct Row {
  Ids inputs, targets, positions, segments;
  bool operator==(const Row&) const = default;
};
std::ostream& operator<<(std::ostream& os, const Row& r) {
  return os << fmt::format("in [{}] tg [{}] pos [{}] seg [{}]", fmt::join(r.inputs, ","),
                           fmt::join(r.targets, ","), fmt::join(r.positions, ","),
                           fmt::join(r.segments, ","));
}

std::vector<Row> rows_of(const BatchBuffers& b, int64_t B, int64_t T) {
  std::vector<Row> rows;
  for (int64_t r = 0; r < B; ++r) {
    auto slice = [&](const Ids& v) { return Ids(v.begin() + r * T, v.begin() + (r + 1) * T); };
    rows.push_back({slice(b.inputs), slice(b.targets), slice(b.positions), slice(b.segment_ids)});
  }
  return rows;
}

// Draws `batches` batches (fewer if the iterator ends) and returns their rows.
std::vector<Row> draw(DataIterator& it, int batches) {
  const DataOptions& o = it.options();
  BatchBuffers buf(o.batch, o.seq);
  std::vector<Row> rows;
  for (int i = 0; i < batches; ++i) {
    if (!it.next(buf.view())) break;
    for (Row& r : rows_of(buf, o.batch, o.seq)) rows.push_back(std::move(r));
  }
  return rows;
}

DataOptions token_options(const fs::path& path, int64_t B, int64_t T) {
  DataOptions o;
  o.dataset_type = "tokens";
  o.dataset_path = path.string();
  o.batch = B;
  o.seq = T;
  o.vocab_size = 100;
  o.shuffle = false;
  return o;
}

// Documents A, B, C; with BOS (1) and EOS (2) the stream is
//   idx  0  1  2  3  4 | 5  6  7  8 | 9 10 11 12 13 14
//   tok  1 10 11 12  2 | 1 20 21  2 | 1 30 31 32 33  2      (15 tokens)
const std::vector<Ids> kDocs = {{10, 11, 12}, {20, 21}, {30, 31, 32, 33}};

// T = 4: rows are stream[0..4], [4..8], [8..12] (and, one-pass only, [12..14]).
const Row kRow0 = {{1, 10, 11, 12}, {10, 11, 12, 2}, {0, 1, 2, 3}, {1, 1, 1, 1}};
const Row kRow1 = {{2, 1, 20, 21}, {-1, 20, 21, 2}, {0, 0, 1, 2}, {1, 2, 2, 2}};  // A's EOS, then B
const Row kRow2 = {{2, 1, 30, 31}, {-1, 30, 31, 32}, {0, 0, 1, 2}, {1, 2, 2, 2}};
const Row kRow3 = {{32, 33, 2, 0}, {33, 2, -1, -1}, {0, 1, 2, 0}, {1, 1, 1, 0}};  // padded end
const Row kPadRow = {{0, 0, 0, 0}, {-1, -1, -1, -1}, {0, 0, 0, 0}, {0, 0, 0, 0}};

TEST(Iterator, PacksDocumentsWithSegmentsPositionsAndTargets) {
  TempDir dir("it_pack");
  write_shard(dir.path() / "a.tokens", kDocs);
  DataIterator it(token_options(dir.path(), 1, 4));
  EXPECT_EQ(it.rows_per_epoch(), 3);  // (15 - 1) / 4 full rows; the tail waits for the next epoch
  const std::vector<Row> want = {kRow0, kRow1, kRow2, kRow0};  // the second epoch starts again
  EXPECT_EQ(draw(it, 4), want);
}

TEST(Iterator, DocumentsSplitAcrossShardsGiveTheSameRows) {
  TempDir dir("it_shards");
  write_shard(dir.path() / "a.tokens", {kDocs[0]});
  write_shard(dir.path() / "b.tokens", {kDocs[1], kDocs[2]});
  write_shard(dir.path() / "c.tokens", {});  // an empty shard changes nothing
  DataIterator it(token_options(dir.path(), 3, 4));
  const std::vector<Row> want = {kRow0, kRow1, kRow2};
  EXPECT_EQ(draw(it, 1), want);
}

TEST(Iterator, OnePassPadsTheLastBatchThenEnds) {
  TempDir dir("it_eval");
  write_shard(dir.path() / "a.tokens", kDocs);
  DataOptions o = token_options(dir.path(), 3, 4);
  o.repeat = false;
  DataIterator it(o);
  EXPECT_EQ(it.rows_per_epoch(), 4);
  BatchBuffers buf(3, 4);
  BatchInfo info;
  ASSERT_TRUE(it.next(buf.view(), &info));
  EXPECT_EQ(info.rows, 3);
  EXPECT_EQ(info.targets, 4 + 3 + 3);
  ASSERT_TRUE(it.next(buf.view(), &info));
  EXPECT_EQ(info.rows, 1);
  EXPECT_EQ(info.targets, 2);
  EXPECT_EQ(rows_of(buf, 3, 4), (std::vector<Row>{kRow3, kPadRow, kPadRow}));
  EXPECT_FALSE(it.next(buf.view()));
  it.reset();
  EXPECT_EQ(draw(it, 1), (std::vector<Row>{kRow0, kRow1, kRow2}));
}

TEST(Iterator, WithoutBosEosOrPacking) {
  TempDir dir("it_nopack");
  write_shard(dir.path() / "a.tokens", kDocs);
  DataOptions o = token_options(dir.path(), 1, 4);
  o.add_bos = o.add_eos = false;  // stream 10 11 12 | 20 21 | 30 31 32 33
  EXPECT_EQ(draw(*std::make_unique<DataIterator>(o), 2),
            (std::vector<Row>{{{10, 11, 12, 20}, {11, 12, -1, 21}, {0, 1, 2, 0}, {1, 1, 1, 2}},
                              {{21, 30, 31, 32}, {-1, 31, 32, 33}, {0, 0, 1, 2}, {1, 2, 2, 2}}}));
  // packing=false: one document per row; a long one continues in the next row, starting with the
  // token whose target the previous row could not hold.
  o.add_bos = o.add_eos = true;
  o.packing = false;
  DataIterator it(o);
  EXPECT_EQ(draw(it, 5), (std::vector<Row>{{{1, 10, 11, 12}, {10, 11, 12, 2}, {0, 1, 2, 3}, {1, 1, 1, 1}},
                                           {{1, 20, 21, 2}, {20, 21, 2, -1}, {0, 1, 2, 3}, {1, 1, 1, 1}},
                                           {{1, 30, 31, 32}, {30, 31, 32, 33}, {0, 1, 2, 3}, {1, 1, 1, 1}},
                                           {{33, 2, 0, 0}, {2, -1, -1, -1}, {0, 1, 0, 0}, {1, 1, 0, 0}},
                                           {{1, 10, 11, 12}, {10, 11, 12, 2}, {0, 1, 2, 3}, {1, 1, 1, 1}}}));
}

// 40 documents of 1 to 23 tokens; every token of the corpus is different (3, 4, 5, ...), so a
// row's inputs identify the window it came from.
constexpr int64_t kCorpusVocab = 1000;
fs::path make_corpus(const fs::path& dir) {
  std::vector<Ids> docs;
  int32_t next = 3;
  for (int d = 0; d < 40; ++d) {
    Ids doc;
    for (int k = 0; k < 1 + (d * 7) % 23; ++k) doc.push_back(next++);
    docs.push_back(doc);
  }
  const TokenSpace space{kCorpusVocab, 1, 2, -1};
  write_shard(dir / "a.tokens", std::vector<Ids>(docs.begin(), docs.begin() + 25), space);
  write_shard(dir / "b.tokens", std::vector<Ids>(docs.begin() + 25, docs.end()), space);
  return dir;
}

DataOptions corpus_options(const fs::path& dir, int64_t B, int64_t T) {
  DataOptions o = token_options(make_corpus(dir), B, T);
  o.vocab_size = kCorpusVocab;
  return o;
}

std::multiset<Ids> inputs_of(const std::vector<Row>& rows) {
  std::multiset<Ids> s;
  for (const Row& r : rows) s.insert(r.inputs);
  return s;
}

TEST(Iterator, ShufflingIsDeterministicAndAPermutationOfEachEpoch) {
  TempDir dir("it_shuffle");
  DataOptions o = corpus_options(dir.path(), 2, 8);
  DataIterator plain(o);
  const int64_t per_epoch = plain.rows_per_epoch();
  ASSERT_EQ(per_epoch % 2, 0) << "the test draws whole epochs in batches of 2";
  const std::vector<Row> in_order = draw(plain, static_cast<int>(per_epoch / 2));
  o.shuffle = true;
  o.seed = 17;
  DataIterator a(o), b(o);
  const std::vector<Row> ra = draw(a, static_cast<int>(per_epoch)), rb = draw(b, static_cast<int>(per_epoch));
  EXPECT_EQ(ra, rb);  // same seed, same order
  const std::vector<Row> epoch0(ra.begin(), ra.begin() + per_epoch), epoch1(ra.begin() + per_epoch, ra.end());
  EXPECT_NE(epoch0, in_order);
  EXPECT_EQ(inputs_of(epoch0), inputs_of(in_order));  // every window once per epoch
  EXPECT_EQ(inputs_of(epoch1), inputs_of(in_order));
  EXPECT_NE(epoch0, epoch1);  // a fresh order each epoch
  o.seed = 18;
  DataIterator c(o);
  EXPECT_NE(draw(c, static_cast<int>(per_epoch / 2)), epoch0);
}

TEST(Iterator, ReadersAreDisjointAndTogetherMakeTheSingleReaderBatch) {
  TempDir dir("it_ranks");
  DataOptions o = corpus_options(dir.path(), 2, 8);
  o.shuffle = true;
  o.seed = 5;
  constexpr int R = 3, kBatches = 4;
  DataOptions single = o;
  single.batch = o.batch * R;
  DataIterator one(single);
  const std::vector<Row> all = draw(one, kBatches);
  std::vector<std::vector<Row>> per_rank;
  for (int r = 0; r < R; ++r) {
    DataOptions ro = o;
    ro.num_shards = R;
    ro.shard_index = r;
    DataIterator it(ro);
    per_rank.push_back(draw(it, kBatches));
  }
  for (int k = 0; k < kBatches; ++k) {
    std::vector<Row> global(all.begin() + k * single.batch, all.begin() + (k + 1) * single.batch), joined;
    for (int r = 0; r < R; ++r)
      joined.insert(joined.end(), per_rank[r].begin() + k * o.batch, per_rank[r].begin() + (k + 1) * o.batch);
    EXPECT_EQ(inputs_of(joined), inputs_of(global)) << "batch " << k;
  }
  // Within one epoch the readers never share a window.
  std::set<Ids> seen;
  for (int r = 0; r < R; ++r) {
    DataOptions ro = o;
    ro.num_shards = R;
    ro.shard_index = r;
    DataIterator it(ro);
    BatchBuffers buf(o.batch, o.seq);
    for (int64_t i = 0; i < it.rows_per_epoch() / o.batch; ++i) {
      ASSERT_TRUE(it.next(buf.view()));
      for (const Row& row : rows_of(buf, o.batch, o.seq)) EXPECT_TRUE(seen.insert(row.inputs).second);
    }
  }
}

void expect_exact_resume(const DataOptions& o) {
  DataIterator it(o);
  draw(it, 7);
  const std::string saved = nlohmann::json(it.state()).dump();
  const std::vector<Row> next5 = draw(it, 5);
  DataIterator fresh(o);
  fresh.restore(nlohmann::json::parse(saved).get<IteratorState>());
  EXPECT_EQ(draw(fresh, 5), next5) << o.dataset_type << " packing=" << o.packing;
}

TEST(Iterator, ResumesExactlyFromASavedState) {
  TempDir dir("it_resume");
  DataOptions o = corpus_options(dir.path(), 3, 32);
  o.shuffle = true;
  o.seed = 11;
  // Windows: about 17 rows per epoch, so the 7 batches before the save and the 5 after both cross
  // an epoch boundary (a new permutation).
  ASSERT_LT(DataIterator(o).rows_per_epoch(), 7 * 3);
  expect_exact_resume(o);
  o.packing = false;  // the document stream, 20 documents per epoch for each of 2 readers
  o.num_shards = 2;
  o.shard_index = 1;
  expect_exact_resume(o);
  o.packing = true;
  o.seq = 8;
  expect_exact_resume(o);
  DataOptions s;
  s.batch = 2;
  s.seq = 5;
  s.vocab_size = 50;
  expect_exact_resume(s);  // synthetic
}

TEST(Iterator, RestoreRefusesAStateOfAnotherDataset) {
  TempDir dir("it_mismatch");
  DataOptions o = corpus_options(dir.path(), 2, 8);
  DataIterator it(o);
  IteratorState s = it.state();
  o.seq = 16;
  DataIterator other(o);
  try {
    other.restore(s);
    FAIL() << "expected a config error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_NE(std::string(e.what()).find("seq=8"), std::string::npos) << e.what();
  }
}

TEST(Iterator, TextSourceMatchesPreparedShards) {
  TempDir dir("it_text");
  const fs::path text = dir.path() / "text";
  fs::create_directories(text);
  std::ofstream(text / "a.txt") << "hello world, hello held world";
  std::ofstream(text / "b.jsonl") << R"({"text": "held"})"
                                  << "\n\n"
                                  << R"({"text": "world hello world hello", "id": 3})"
                                  << "\n";
  std::ofstream(text / "c.txt") << "";  // an empty document
  const fs::path bpe = tessera::testing::data_dir() / "fixtures" / "tiny_bpe" / "vocab.json";
  auto tok = load_tokenizer("huggingface", bpe);
  PrepareDataOptions po;
  po.inputs = {text.string()};
  po.out_dir = dir.path() / "tokens";
  prepare_data(po, *tok);

  DataOptions o = token_options(po.out_dir, 2, 4);
  o.vocab_size = 265;
  DataIterator shards(o);
  o.dataset_type = "text";
  o.dataset_path = text.string();
  o.tokenizer_type = "huggingface";
  o.tokenizer_path = bpe.string();
  DataIterator texts(o);
  // Unshuffled, one reader: the document stream cuts the same rows as the windows, for a full epoch.
  const int batches = static_cast<int>(shards.rows_per_epoch() / 2);
  ASSERT_GE(batches, 2);
  EXPECT_EQ(draw(texts, batches), draw(shards, batches));
  o.shuffle = true;
  expect_exact_resume(o);
  // One pass, in order: the same rows to the end, whether the stream ends inside a row or exactly
  // at a row's last token, for every row length.
  o.shuffle = false;
  o.repeat = false;
  for (int64_t T = 1; T <= 9; ++T) {
    DataOptions ot = o, os = token_options(po.out_dir, 2, T);
    ot.seq = T;
    os.vocab_size = 265;
    os.repeat = false;
    DataIterator t(ot), s(os);
    EXPECT_EQ(draw(t, 1000), draw(s, 1000)) << "T " << T;
  }
}

TEST(Iterator, RefusesDataThatDoesNotFit) {
  TempDir dir("it_refuse");
  write_shard(dir.path() / "a.tokens", kDocs);
  DataOptions o = token_options(dir.path(), 1, 4);
  o.vocab_size = 50;  // the shards were written for 100 ids
  EXPECT_THROW(DataIterator{o}, Error);
  o.vocab_size = 100;
  o.num_shards = 4;  // 3 rows per epoch cannot feed 4 readers
  EXPECT_THROW(DataIterator{o}, Error);
  o.num_shards = 1;
  o.dataset_path = (dir.path() / "nothing*.tokens").string();
  EXPECT_THROW(DataIterator{o}, Error);
  o.dataset_path = dir.path().string();
  DataIterator it(o);
  BatchBuffers small(1, 3);
  EXPECT_THROW(it.next(small.view()), Error);
}

TEST(Iterator, SyntheticReadersSplitTheSingleReaderRows) {
  DataOptions o;
  o.batch = 2;
  o.seq = 6;
  o.vocab_size = 1000;
  DataOptions single = o;
  single.batch = 4;
  DataIterator one(single);
  const std::vector<Row> all = draw(one, 1);
  for (int r = 0; r < 2; ++r) {
    DataOptions ro = o;
    ro.num_shards = 2;
    ro.shard_index = r;
    DataIterator it(ro);
    const std::vector<Row> mine = draw(it, 2);
    EXPECT_EQ(mine[0], all[static_cast<size_t>(r)]);  // reader r takes global rows r, r + 2, ...
    EXPECT_EQ(mine[1], all[static_cast<size_t>(r + 2)]);
    EXPECT_EQ(mine[0].segments, Ids(6, 1));
    EXPECT_EQ(mine[0].positions, (Ids{0, 1, 2, 3, 4, 5}));
    EXPECT_EQ(Ids(mine[0].inputs.begin() + 1, mine[0].inputs.end()),
              Ids(mine[0].targets.begin(), mine[0].targets.end() - 1));
  }
}

TEST(Iterator, PermuteIndexIsABijection) {
  for (uint64_t n : {1u, 2u, 3u, 5u, 16u, 17u, 1000u, 4097u})
    for (uint64_t key : {0ull, 1ull, 0xdeadbeefull}) {
      std::vector<bool> hit(n);
      for (uint64_t i = 0; i < n; ++i) {
        const uint64_t p = permute_index(i, n, key);
        ASSERT_LT(p, n);
        EXPECT_FALSE(hit[p]) << "n " << n << " key " << key;
        hit[p] = true;
      }
    }
}

TEST(Iterator, OptionsFromConfig) {
  Config cfg = default_config();
  cfg.dataset_type = "tokens";
  cfg.dataset_path = "train/";
  cfg.eval_dataset_path = "valid/";
  cfg.per_device_batch_size = 4;
  cfg.eval_per_device_batch_size = 2;
  cfg.data_shuffle_seed = 9;
  const DataOptions train = data_options_from_config(cfg, false, 2, 1);
  EXPECT_EQ(train.dataset_path, "train/");
  EXPECT_EQ(train.batch, 4);
  EXPECT_TRUE(train.shuffle && train.repeat);
  EXPECT_EQ(train.seed, 9u);
  EXPECT_EQ(train.shard_index, 1);
  const DataOptions eval = data_options_from_config(cfg, true);
  EXPECT_EQ(eval.dataset_path, "valid/");
  EXPECT_EQ(eval.batch, 2);
  EXPECT_FALSE(eval.shuffle || eval.repeat);
  cfg.per_device_batch_size = 0.5;
  EXPECT_THROW(data_options_from_config(cfg, false), Error);
}

}  // namespace
}  // namespace tessera::data
