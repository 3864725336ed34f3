// The batch iterator: what the trainer's graph inputs receive each micro-step.
//
// Per micro-batch of B rows of T tokens (caller-provided buffers; nothing is allocated per batch for
// synthetic and token-shard data):
//   inputs      int32 [B*T]  token ids
//   targets     int32 [B*T]  the next token of the same document; -1 where there is none (the last
//                            token of a document, padding): the loss ignores those
//   positions   int32 [B, T] 0, 1, 2, ... restarting at 0 with every segment
//   segment_ids int32 [B, T] 1, 2, 3, ... one per document piece within a row; 0 for padding, so
//                            attention never crosses a document boundary
//
// Sources (dataset_type):
//   synthetic  uniform random tokens from (data_shuffle_seed, row), one segment per row;
//   tokens     token shards (shard.h), memory-mapped: never read into memory as a whole;
//   text       .txt / .jsonl documents (documents.h) tokenized when first needed, one at a time.
//
// Packing (packing=true): documents, each with BOS/EOS when add_bos/add_eos, are concatenated into
// one stream and cut into rows of T+1 tokens that overlap by one (row i holds stream[i*T, i*T+T]),
// so every token but the first is a target exactly once. A document cut by a row boundary continues
// in another row as a new segment starting at position 0. With packing=false each row holds one
// document piece (a long document fills several rows) and the rest is padding.
//
// Order and ranks. Token shards with packing are read as windows: window w is stream[w*T, w*T+T];
// each epoch visits the windows in a seeded pseudo-random permutation (a Feistel network, so the
// order costs no memory), and reader `shard_index` of `num_shards` takes the permuted windows
// j = k*num_shards + shard_index, k = 0, 1, ... . So the ranks read disjoint windows, and the union
// of the ranks' batch k is batch k of a single reader with num_shards times the batch: one rank and
// N ranks train on the same global batches. Text datasets (and packing=false) stream documents
// instead: each epoch permutes the documents, reader r takes documents j = k*num_shards + r, and rows
// are cut from its own stream. With enable_data_shuffling=false the permutation is the identity.
// Every epoch uses a fresh permutation; a training iterator runs forever (repeat), an eval iterator
// makes one pass, pads its last batch and then reports the end (synthetic data has no end: an eval
// loop over it must stop after eval_steps batches).
//
// State: a few integers (epoch, row or document cursor) plus a signature of the dataset and options;
// restoring it into a fresh iterator over the same data gives exactly the batches the original
// would have given next (tests/data/iterator_test.cc checks this).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <span>
#include <string>
#include <vector>

#include "tessera/config/config.h"

namespace tessera::data {

struct DataOptions {
  std::string dataset_type = "synthetic";  // synthetic | tokens | text
  std::string dataset_path;                // file, folder or glob (comma-separated list allowed)
  std::string tokenizer_type;              // text datasets: how to tokenize
  std::string tokenizer_path;
  int64_t batch = 1;       // B: rows per micro-batch from this reader
  int64_t seq = 0;         // T
  int64_t vocab_size = 0;  // the model's; every id must lie below it
  bool packing = true;
  bool add_bos = true;
  bool add_eos = true;
  bool shuffle = true;
  uint64_t seed = 0;
  int64_t num_shards = 1;   // data-parallel readers
  int64_t shard_index = 0;  // this reader, in [0, num_shards)
  bool repeat = true;       // false: one pass (eval)
  bool verify_checksums = true;
};

// Options for the training data (repeat, shuffled per enable_data_shuffling) or, with eval = true,
// for eval_dataset_path (one pass, in order, eval batch size). batch = per_device_batch_size (or
// eval_per_device_batch_size): one device per reader. Throws kConfig for a fractional batch.
DataOptions data_options_from_config(const Config& cfg, bool eval, int64_t num_shards = 1,
                                     int64_t shard_index = 0);

// Views of the caller's buffers for one micro-batch; sizes B*T each.
struct Batch {
  std::span<int32_t> inputs;
  std::span<int32_t> targets;
  std::span<int32_t> positions;
  std::span<int32_t> segment_ids;
};

// Buffers for one batch, for callers without their own (tests, eval loops).
struct BatchBuffers {
  BatchBuffers(int64_t batch, int64_t seq);
  Batch view();
  std::vector<int32_t> inputs, targets, positions, segment_ids;
};

struct BatchInfo {
  int64_t rows = 0;     // rows holding data (< B only in the last batch of a pass)
  int64_t targets = 0;  // targets != -1: the tokens the loss counts
};

struct IteratorState {
  std::string signature;  // the dataset and options the state belongs to
  uint64_t epoch = 0;
  uint64_t row = 0;     // rows drawn in this epoch (synthetic, token windows)
  uint64_t doc = 0;     // document streams: position in this reader's document order
  uint64_t offset = 0;  // and token offset in that document (BOS counted)
  bool operator==(const IteratorState&) const = default;
};
void to_json(nlohmann::json& j, const IteratorState& s);
void from_json(const nlohmann::json& j, IteratorState& s);

class DataIterator {
 public:
  // Opens the dataset and checks it against the options: throws kConfig for options that do not
  // fit (e.g. ids beyond vocab_size, a dataset too small for one row per reader), kIo for files.
  explicit DataIterator(const DataOptions& options);
  ~DataIterator();
  DataIterator(const DataIterator&) = delete;
  DataIterator& operator=(const DataIterator&) = delete;

  // Fills the next micro-batch. Returns false, leaving `out` untouched, when a one-pass iterator has
  // no rows left. Throws kShape when a buffer is not B*T long.
  bool next(const Batch& out, BatchInfo* info = nullptr);

  IteratorState state() const;
  // Throws kConfig when the state's signature is not this iterator's.
  void restore(const IteratorState& state);
  // Back to the first batch of epoch 0.
  void reset();

  // This reader's rows per epoch; -1 when only a full pass can tell (text) or there are no epochs
  // (synthetic).
  int64_t rows_per_epoch() const;
  // One line for the log: source, size, rows per epoch.
  std::string describe() const;
  const DataOptions& options() const { return options_; }

  class Source;

 private:
  DataOptions options_;
  std::unique_ptr<Source> source_;
  std::vector<int32_t> row_tokens_;  // T + 1 stream tokens of one row
  std::vector<uint64_t> row_docs_;   // and which document occurrence each came from
  int32_t pad_id_ = 0;
};

// The Feistel permutation of [0, n) under `key` that orders windows and documents; exposed for
// tests. permute_index(i, n, key) for i in [0, n) visits every value of [0, n) exactly once.
uint64_t permute_index(uint64_t i, uint64_t n, uint64_t key);

}  // namespace tessera::data
