// prepare-data: text documents (.txt / .jsonl, documents.h) to token shards (shard.h), streaming:
// one document and one shard's document index in memory at a time, whatever the corpus size.
//
// Output in out_dir: <prefix>-00000.tokens, <prefix>-00001.tokens, ... and manifest.json (the
// tokenizer's ids, the inputs, and each shard's token and document counts). A shard is closed at the
// first document boundary at or past tokens_per_shard tokens, so documents never straddle shards
// (a document longer than tokens_per_shard gets a shard of its own). Shards of an earlier run under
// the same prefix that this run does not overwrite are removed at the end, so the folder always
// holds exactly one dataset. Documents are stored without BOS/EOS; readers add them (add_bos,
// add_eos).
//
// Left out: tokenizing on several threads (one core does about 1-5 MB of text per second; the
// pd-en corpus takes seconds) and resuming an interrupted run (it simply runs again).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "tessera/data/tokenizer.h"

namespace tessera::data {

struct PrepareDataOptions {
  std::vector<std::string> inputs;  // files, folders or globs of .txt / .jsonl
  std::filesystem::path out_dir;
  int64_t tokens_per_shard = int64_t{1} << 27;
  std::string shard_prefix = "shard";
};

struct PrepareProgress {
  uint64_t bytes_read = 0, bytes_total = 0;  // of the input files
  int64_t documents = 0, tokens = 0, shards = 0;
  std::string current_file;
};

struct PrepareReport {
  int64_t documents = 0, tokens = 0;
  uint64_t bytes = 0;  // of text read
  std::vector<std::filesystem::path> shards;
  double seconds = 0;
};

// Tokenizes every document of the inputs with `tokenizer` into shards under out_dir. `progress`,
// when set, is called about every MiB of input and once at the end. Throws kIo (files) or kConfig
// (options).
PrepareReport prepare_data(const PrepareDataOptions& options, const Tokenizer& tokenizer,
                           const std::function<void(const PrepareProgress&)>& progress = {});

}  // namespace tessera::data
