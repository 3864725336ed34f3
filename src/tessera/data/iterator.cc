// The batch iterator (iterator.h): row assembly, the synthetic source, token-shard windows, and
// document streams over token shards or text.
#include "tessera/data/iterator.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <nlohmann/json.hpp>

#include "tessera/core/error.h"
#include "tessera/data/documents.h"
#include "tessera/data/files.h"
#include "tessera/data/shard.h"
#include "tessera/data/tokenizer.h"

namespace tessera::data {
namespace fs = std::filesystem;

namespace {

uint64_t mix(uint64_t x) {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The key of one epoch's permutation.
uint64_t epoch_key(uint64_t seed, uint64_t epoch) {
  return mix(mix(seed) ^ mix(epoch + 0x5eed));
}

std::string options_signature(const DataOptions& o) {
  return fmt::format("seq={} readers={}/{} seed={} shuffle={} packing={} add_bos={} add_eos={}", o.seq,
                     o.shard_index, o.num_shards, o.seed, o.shuffle, o.packing, o.add_bos, o.add_eos);
}

}  // namespace

uint64_t permute_index(uint64_t i, uint64_t n, uint64_t key) {
  TESSERA_ASSERT(i < n);
  if (n <= 2) return n == 2 ? (i ^ (key & 1)) : 0;
  // A balanced Feistel network on the smallest even number of bits that covers n is a bijection of
  // [0, 2^bits); walking the cycle from i until the value falls below n restricts it to a bijection
  // of [0, n). 2^bits < 4n, so the walk takes fewer than 4 steps on average.
  int bits = std::bit_width(n - 1);
  bits += bits & 1;
  const int half = bits / 2;
  const uint64_t mask = (uint64_t{1} << half) - 1;
  uint64_t x = i;
  do {
    uint64_t left = x >> half, right = x & mask;
    for (uint64_t round = 0; round < 4; ++round) {
      const uint64_t f = mix(right ^ key ^ (round * 0x632be59bd9b4e019ull)) & mask;
      const uint64_t next = left ^ f;
      left = right;
      right = next;
    }
    x = (left << half) | right;
  } while (x >= n);
  return x;
}

// ---- sources ----

class DataIterator::Source {
 public:
  virtual ~Source() = default;
  // Fills up to T+1 stream tokens of the next row and, for each, a number that changes exactly where
  // a new document (occurrence) starts. Returns how many; 0 means no more rows.
  virtual size_t fill(std::span<int32_t> tokens, std::span<uint64_t> docs) = 0;
  virtual void save(IteratorState& s) const = 0;
  virtual void load(const IteratorState& s) = 0;
  virtual void reset() = 0;
  virtual std::string signature() const = 0;
  virtual std::string describe() const = 0;
  virtual int64_t rows_per_epoch() const = 0;
  virtual int32_t pad_id() const { return -1; }
};

namespace {

// Uniform random tokens; row k of reader r is global row k*R + r, so N readers together draw the
// rows one reader with N times the batch would.
class SyntheticSource final : public DataIterator::Source {
 public:
  explicit SyntheticSource(const DataOptions& o) : o_(o) {
    TESSERA_CHECK(o.vocab_size >= 1, ErrorKind::kConfig, "synthetic data needs vocab_size >= 1");
  }
  size_t fill(std::span<int32_t> tokens, std::span<uint64_t> docs) override {
    const uint64_t g = row_ * static_cast<uint64_t>(o_.num_shards) + static_cast<uint64_t>(o_.shard_index);
    const uint64_t base = mix(o_.seed ^ mix(g));
    for (size_t t = 0; t < tokens.size(); ++t) {
      tokens[t] = static_cast<int32_t>(mix(base ^ t) % static_cast<uint64_t>(o_.vocab_size));
      docs[t] = 0;
    }
    ++row_;
    return tokens.size();
  }
  void save(IteratorState& s) const override { s.row = row_; }
  void load(const IteratorState& s) override { row_ = s.row; }
  void reset() override { row_ = 0; }
  std::string signature() const override {
    return fmt::format("synthetic vocab={} {}", o_.vocab_size, options_signature(o_));
  }
  std::string describe() const override {
    return fmt::format("synthetic: uniform random tokens over {} ids", o_.vocab_size);
  }
  int64_t rows_per_epoch() const override { return -1; }

 private:
  DataOptions o_;
  uint64_t row_ = 0;
};

// The shards of a tokens dataset, opened (and checksummed) once; document d of the dataset is
// document d - doc_base[s] of shard s.
struct ShardSet {
  explicit ShardSet(const DataOptions& o) {
    const std::string_view ext[] = {kShardExtension};
    for (const fs::path& p : resolve_data_files(o.dataset_path, ext)) {
      shards.push_back(std::make_unique<ShardReader>(p, o.verify_checksums));
      const ShardReader& s = *shards.back();
      if (shards.size() == 1) space = s.space();
      if (!(s.space() == space))
        fail(ErrorKind::kIo,
             "token shards '{}' and '{}' come from different tokenizers (vocab {} vs {}, eos {} vs {})",
             shards.front()->path().string(), p.string(), space.vocab_size, s.space().vocab_size,
             space.eos_id, s.space().eos_id);
      doc_base.push_back(documents);
      token_base.push_back(tokens);
      documents += s.document_count();
      tokens += s.token_count();
    }
    TESSERA_CHECK(space.vocab_size <= o.vocab_size, ErrorKind::kConfig,
                  "the token shards in '{}' use a vocabulary of {} ids but the model's vocab_size is {}",
                  o.dataset_path, space.vocab_size, o.vocab_size);
  }
  size_t shard_of_doc(uint64_t d) const {
    return static_cast<size_t>(std::upper_bound(doc_base.begin(), doc_base.end(), d) - doc_base.begin()) - 1;
  }
  std::string describe() const {
    return fmt::format("{} shard{}, {} tokens, {} documents", shards.size(), shards.size() == 1 ? "" : "s",
                       tokens, documents);
  }
  std::vector<std::unique_ptr<ShardReader>> shards;
  std::vector<uint64_t> doc_base, token_base;
  uint64_t documents = 0, tokens = 0;
  TokenSpace space;
};

// BOS/EOS as configured, checked against what the vocabulary has.
struct Framing {
  Framing(const DataOptions& o, int32_t bos, int32_t eos, std::string_view what) {
    TESSERA_CHECK(!o.add_bos || bos >= 0, ErrorKind::kConfig, "add_bos=true but {} has no BOS token", what);
    TESSERA_CHECK(!o.add_eos || eos >= 0, ErrorKind::kConfig, "add_eos=true but {} has no EOS token", what);
    TESSERA_CHECK(std::max(bos, eos) < o.vocab_size, ErrorKind::kConfig,
                  "{}: BOS/EOS ids ({}, {}) do not fit the model's vocab_size {}", what, bos, eos,
                  o.vocab_size);
    this->bos = o.add_bos ? bos : -1;
    this->eos = o.add_eos ? eos : -1;
    extra = (o.add_bos ? 1u : 0u) + (o.add_eos ? 1u : 0u);
  }
  int32_t bos, eos;
  uint64_t extra;  // stream tokens a document gains
};

// Token shards with packing: random access to windows of the concatenated stream.
class WindowSource final : public DataIterator::Source {
 public:
  explicit WindowSource(const DataOptions& o)
      : o_(o), set_(o), framing_(o, set_.space.bos_id, set_.space.eos_id, "the token shards' tokenizer") {
    for (size_t s = 0; s < set_.shards.size(); ++s) {
      stream_base_.push_back(stream_);
      stream_ += set_.shards[s]->token_count() + framing_.extra * set_.shards[s]->document_count();
    }
    const auto T = static_cast<uint64_t>(o.seq), R = static_cast<uint64_t>(o.num_shards),
               r = static_cast<uint64_t>(o.shard_index);
    windows_ = stream_ < 2 ? 0 : (o.repeat ? (stream_ - 1) / T : (stream_ - 1 + T - 1) / T);
    per_epoch_ = o.repeat ? windows_ / R : (windows_ > r ? (windows_ - r + R - 1) / R : 0);
    TESSERA_CHECK(!o.repeat || per_epoch_ >= 1, ErrorKind::kConfig,
                  "'{}' holds {} tokens (with BOS/EOS): {} rows of {}+1 tokens, fewer than the {} "
                  "data-parallel readers",
                  o.dataset_path, stream_, windows_, T, R);
  }

  size_t fill(std::span<int32_t> tokens, std::span<uint64_t> docs) override {
    if (row_ >= per_epoch_) {
      if (!o_.repeat) return 0;
      ++epoch_;
      row_ = 0;
    }
    const uint64_t j = row_ * static_cast<uint64_t>(o_.num_shards) + static_cast<uint64_t>(o_.shard_index);
    const uint64_t w = o_.shuffle ? permute_index(j, windows_, epoch_key(o_.seed, epoch_)) : j;
    ++row_;
    const uint64_t T = static_cast<uint64_t>(o_.seq);
    const uint64_t begin = w * T, end = std::min(begin + T + 1, stream_);
    read_stream(begin, tokens.first(end - begin), docs);
    return end - begin;
  }
  void save(IteratorState& s) const override {
    s.epoch = epoch_;
    s.row = row_;
  }
  void load(const IteratorState& s) override {
    epoch_ = s.epoch;
    row_ = s.row;
  }
  void reset() override { epoch_ = row_ = 0; }
  std::string signature() const override {
    return fmt::format("tokens documents={} tokens={} {}", set_.documents, set_.tokens,
                       options_signature(o_));
  }
  std::string describe() const override {
    return fmt::format("tokens: {}; {} rows of {} per epoch for this reader (windows shuffled: {})",
                       set_.describe(), per_epoch_, o_.seq, o_.shuffle);
  }
  int64_t rows_per_epoch() const override { return static_cast<int64_t>(per_epoch_); }
  int32_t pad_id() const override { return set_.space.pad_id; }

 private:
  // Copies stream[begin, begin + out.size()) and the global document of each token.
  void read_stream(uint64_t begin, std::span<int32_t> out, std::span<uint64_t> docs) const {
    size_t s = static_cast<size_t>(std::upper_bound(stream_base_.begin(), stream_base_.end(), begin) -
                                   stream_base_.begin()) -
               1;
    uint64_t q = begin - stream_base_[s];
    uint64_t d = doc_at(*set_.shards[s], q);
    uint64_t u = q - (set_.shards[s]->doc_begin(d) + framing_.extra * d);  // offset in the framed document
    size_t n = 0;
    while (n < out.size()) {
      const ShardReader& sh = *set_.shards[s];
      if (d == sh.document_count()) {  // next shard
        ++s, d = 0, u = 0;
        continue;
      }
      const uint64_t tb = sh.doc_begin(d), len = sh.doc_begin(d + 1) - tb;
      const uint64_t framed = len + framing_.extra;
      const uint64_t global_doc = set_.doc_base[s] + d;
      while (u < framed && n < out.size()) {
        const uint64_t body = framing_.bos >= 0 ? u - (u > 0 ? 1 : 0) : u;  // index into the document
        if (framing_.bos >= 0 && u == 0) {
          out[n] = framing_.bos;
          docs[n++] = global_doc;
          ++u;
        } else if (body < len) {
          const size_t take = static_cast<size_t>(std::min<uint64_t>(len - body, out.size() - n));
          sh.read(tb + body, out.subspan(n, take));
          std::fill_n(docs.begin() + static_cast<ptrdiff_t>(n), take, global_doc);
          n += take;
          u += take;
        } else {
          out[n] = framing_.eos;
          docs[n++] = global_doc;
          ++u;
        }
      }
      ++d, u = 0;
    }
  }
  // The document holding framed-stream offset q of one shard: the last d with
  // doc_begin(d) + extra*d <= q whose framed length is not zero.
  uint64_t doc_at(const ShardReader& sh, uint64_t q) const {
    if (framing_.extra == 0) return sh.document_at(q);
    uint64_t lo = 0, hi = sh.document_count();
    while (hi - lo > 1) {
      const uint64_t mid = lo + (hi - lo) / 2;
      if (sh.doc_begin(mid) + framing_.extra * mid <= q)
        lo = mid;
      else
        hi = mid;
    }
    return lo;
  }

  DataOptions o_;
  ShardSet set_;
  Framing framing_;
  std::vector<uint64_t> stream_base_;
  uint64_t stream_ = 0, windows_ = 0, per_epoch_ = 0;
  uint64_t epoch_ = 0, row_ = 0;
};

// Where documents come from for a document stream.
class DocumentProvider {
 public:
  virtual ~DocumentProvider() = default;
  virtual uint64_t count() const = 0;
  virtual void get(uint64_t d, std::vector<int32_t>& tokens) const = 0;  // without BOS/EOS
  virtual std::string signature() const = 0;
  virtual std::string describe() const = 0;
};

class ShardDocuments final : public DocumentProvider {
 public:
  explicit ShardDocuments(const DataOptions& o) : set_(o) {}
  uint64_t count() const override { return set_.documents; }
  void get(uint64_t d, std::vector<int32_t>& tokens) const override {
    const size_t s = set_.shard_of_doc(d);
    const ShardReader& sh = *set_.shards[s];
    const uint64_t local = d - set_.doc_base[s], b = sh.doc_begin(local), e = sh.doc_begin(local + 1);
    tokens.resize(e - b);
    sh.read(b, tokens);
  }
  std::string signature() const override {
    return fmt::format("tokens documents={} tokens={}", set_.documents, set_.tokens);
  }
  std::string describe() const override { return "tokens: " + set_.describe(); }
  const TokenSpace& space() const { return set_.space; }

 private:
  ShardSet set_;
};

class TextDocuments final : public DocumentProvider {
 public:
  explicit TextDocuments(const DataOptions& o)
      : index_(resolve_text_files({o.dataset_path})),
        tokenizer_(load_tokenizer(o.tokenizer_type, o.tokenizer_path)) {
    TESSERA_CHECK(tokenizer_->vocab_size() <= o.vocab_size, ErrorKind::kConfig,
                  "the tokenizer '{}' has {} ids but the model's vocab_size is {}", o.tokenizer_path,
                  tokenizer_->vocab_size(), o.vocab_size);
    for (const fs::path& f : index_.files()) {
      std::error_code ec;
      bytes_ += fs::file_size(f, ec);
    }
  }
  uint64_t count() const override { return index_.size(); }
  void get(uint64_t d, std::vector<int32_t>& tokens) const override {
    tokens = tokenizer_->encode(index_.read(d));
  }
  std::string signature() const override {
    return fmt::format("text documents={} files={} bytes={} tokenizer={}:{}", index_.size(),
                       index_.files().size(), bytes_, tokenizer_->type(), tokenizer_->vocab_size());
  }
  std::string describe() const override {
    return fmt::format("text: {} files, {} bytes, {} documents, tokenized on the fly ({}, {} ids)",
                       index_.files().size(), bytes_, index_.size(), tokenizer_->type(),
                       tokenizer_->vocab_size());
  }
  const Tokenizer& tokenizer() const { return *tokenizer_; }

 private:
  DocumentIndex index_;
  std::unique_ptr<Tokenizer> tokenizer_;
  uint64_t bytes_ = 0;
};

// Documents in a per-epoch permuted order, this reader taking every num_shards-th; rows are cut
// from the reader's own stream (packing) or one document piece per row.
class DocStreamSource final : public DataIterator::Source {
 public:
  DocStreamSource(const DataOptions& o, std::unique_ptr<DocumentProvider> docs, int32_t bos, int32_t eos,
                  int32_t pad, std::string_view what)
      : o_(o), docs_(std::move(docs)), framing_(o, bos, eos, what), pad_(pad) {
    const uint64_t D = docs_->count(), R = static_cast<uint64_t>(o.num_shards),
                   r = static_cast<uint64_t>(o.shard_index);
    per_epoch_ = o.repeat ? D / R : (D > r ? (D - r + R - 1) / R : 0);
    TESSERA_CHECK(!o.repeat || per_epoch_ >= 1, ErrorKind::kConfig,
                  "'{}' holds {} documents, fewer than the {} data-parallel readers", o.dataset_path, D, R);
  }

  size_t fill(std::span<int32_t> tokens, std::span<uint64_t> docs) override {
    Cursor c = pos_;
    Cursor next = end_cursor();
    size_t n = 0;
    while (n < tokens.size() && seek(c)) {
      const uint64_t framed = doc_tokens_.size();
      const size_t take = static_cast<size_t>(std::min<uint64_t>(framed - c.offset, tokens.size() - n));
      std::copy_n(doc_tokens_.begin() + static_cast<ptrdiff_t>(c.offset), take,
                  tokens.begin() + static_cast<ptrdiff_t>(n));
      std::fill_n(docs.begin() + static_cast<ptrdiff_t>(n), take, c.epoch * per_epoch_ + c.doc);
      n += take;
      c.offset += take;
      if (n == tokens.size()) {
        next = c;
        // The row's last token starts the next row (it still needs its own target), except that
        // without packing a row never continues into another document.
        if (o_.packing || c.offset < framed) {
          next.offset -= 1;
        } else {
          next.offset = 0;
          ++next.doc;
        }
      }
      if (!o_.packing) break;
    }
    if (!o_.packing && n > 0 && n < tokens.size()) {  // the document ended inside the row
      next = c;
      next.offset = 0;
      ++next.doc;
    }
    if (o_.packing && !o_.repeat && n == tokens.size()) {
      // A one-pass stream whose last token is this row's last: no row follows (it would hold that
      // token alone, with no target), as with the windows of token shards.
      Cursor after = next;
      after.offset += 1;
      if (!seek(after)) next = end_cursor();
    }
    pos_ = next;
    return n;
  }
  void save(IteratorState& s) const override {
    s.epoch = pos_.epoch;
    s.doc = pos_.doc;
    s.offset = pos_.offset;
  }
  void load(const IteratorState& s) override { pos_ = {s.epoch, s.doc, s.offset}; }
  void reset() override { pos_ = {}; }
  std::string signature() const override {
    return fmt::format("{} {}", docs_->signature(), options_signature(o_));
  }
  std::string describe() const override {
    return fmt::format("{}; {} documents per epoch for this reader ({}, documents shuffled: {})",
                       docs_->describe(), per_epoch_, o_.packing ? "packed" : "one document per row",
                       o_.shuffle);
  }
  int64_t rows_per_epoch() const override { return -1; }
  int32_t pad_id() const override { return pad_; }

 private:
  struct Cursor {
    uint64_t epoch = 0, doc = 0, offset = 0;
  };
  // Past the end of a one-pass stream (repeating streams never end).
  Cursor end_cursor() const { return {1, 0, 0}; }

  // Moves `c` over finished and empty documents to the next token and loads its document into
  // doc_tokens_; false at the end of a one-pass stream.
  bool seek(Cursor& c) {
    uint64_t empty = 0;
    for (;;) {
      if (c.doc >= per_epoch_) c = {c.epoch + 1, 0, 0};
      if (!o_.repeat && c.epoch >= 1) return false;
      load(c);
      if (c.offset < doc_tokens_.size()) return true;
      TESSERA_CHECK(++empty <= per_epoch_, ErrorKind::kConfig, "every document of '{}' is empty",
                    o_.dataset_path);
      c = {c.epoch, c.doc + 1, 0};
    }
  }
  // Makes doc_tokens_ the framed tokens (BOS, body, EOS) of the cursor's document.
  void load(const Cursor& c) {
    if (loaded_ && loaded_epoch_ == c.epoch && loaded_doc_ == c.doc) return;
    const uint64_t j = c.doc * static_cast<uint64_t>(o_.num_shards) + static_cast<uint64_t>(o_.shard_index);
    const uint64_t d = o_.shuffle ? permute_index(j, docs_->count(), epoch_key(o_.seed, c.epoch)) : j;
    docs_->get(d, body_);
    doc_tokens_.clear();
    if (framing_.bos >= 0) doc_tokens_.push_back(framing_.bos);
    for (int32_t t : body_) {
      TESSERA_CHECK(t >= 0 && t < o_.vocab_size, ErrorKind::kConfig,
                    "token id {} in document {} of '{}' is outside the model's vocab_size {}", t, d,
                    o_.dataset_path, o_.vocab_size);
      doc_tokens_.push_back(t);
    }
    if (framing_.eos >= 0) doc_tokens_.push_back(framing_.eos);
    loaded_ = true;
    loaded_epoch_ = c.epoch;
    loaded_doc_ = c.doc;
  }

  DataOptions o_;
  std::unique_ptr<DocumentProvider> docs_;
  Framing framing_;
  int32_t pad_;
  uint64_t per_epoch_ = 0;
  Cursor pos_;
  std::vector<int32_t> body_, doc_tokens_;
  bool loaded_ = false;
  uint64_t loaded_epoch_ = 0, loaded_doc_ = 0;
};

std::unique_ptr<DataIterator::Source> make_source(const DataOptions& o) {
  if (o.dataset_type == "synthetic") return std::make_unique<SyntheticSource>(o);
  TESSERA_CHECK(!o.dataset_path.empty(), ErrorKind::kConfig, "dataset_type={} needs a dataset_path",
                o.dataset_type);
  if (o.dataset_type == "tokens") {
    if (o.packing) return std::make_unique<WindowSource>(o);
    auto docs = std::make_unique<ShardDocuments>(o);
    const TokenSpace space = docs->space();
    return std::make_unique<DocStreamSource>(o, std::move(docs), space.bos_id, space.eos_id, space.pad_id,
                                             "the token shards' tokenizer");
  }
  if (o.dataset_type == "text") {
    auto docs = std::make_unique<TextDocuments>(o);
    const Tokenizer& t = docs->tokenizer();
    const int32_t bos = t.bos_id(), eos = t.eos_id(), pad = t.pad_id();
    return std::make_unique<DocStreamSource>(o, std::move(docs), bos, eos, pad, "the tokenizer");
  }
  fail(ErrorKind::kConfig, "dataset_type '{}': expected synthetic, tokens or text", o.dataset_type);
}

}  // namespace

DataOptions data_options_from_config(const Config& cfg, bool eval, int64_t num_shards, int64_t shard_index) {
  DataOptions o;
  o.dataset_type = cfg.dataset_type;
  o.dataset_path = eval ? cfg.eval_dataset_path : cfg.dataset_path;
  o.tokenizer_type = cfg.tokenizer_type;
  o.tokenizer_path = cfg.tokenizer_path;
  const double b =
      eval && cfg.eval_per_device_batch_size > 0 ? cfg.eval_per_device_batch_size : cfg.per_device_batch_size;
  TESSERA_CHECK(
      b >= 1 && std::floor(b) == b, ErrorKind::kConfig,
      "{}={}: each data reader delivers whole sequences (an integer >= 1)",
      eval && cfg.eval_per_device_batch_size > 0 ? "eval_per_device_batch_size" : "per_device_batch_size", b);
  o.batch = static_cast<int64_t>(b);
  o.seq = cfg.max_target_length;
  o.vocab_size = cfg.vocab_size;
  o.packing = cfg.packing;
  o.add_bos = cfg.add_bos;
  o.add_eos = cfg.add_eos;
  o.shuffle = !eval && cfg.enable_data_shuffling;
  o.seed = static_cast<uint64_t>(cfg.data_shuffle_seed);
  o.num_shards = num_shards;
  o.shard_index = shard_index;
  o.repeat = !eval;
  return o;
}

BatchBuffers::BatchBuffers(int64_t batch, int64_t seq)
    : inputs(static_cast<size_t>(batch * seq)),
      targets(inputs.size()),
      positions(inputs.size()),
      segment_ids(inputs.size()) {}

Batch BatchBuffers::view() {
  return {inputs, targets, positions, segment_ids};
}

void to_json(nlohmann::json& j, const IteratorState& s) {
  j = {{"signature", s.signature}, {"epoch", s.epoch}, {"row", s.row}, {"doc", s.doc}, {"offset", s.offset}};
}

void from_json(const nlohmann::json& j, IteratorState& s) {
  try {
    j.at("signature").get_to(s.signature);
    j.at("epoch").get_to(s.epoch);
    j.at("row").get_to(s.row);
    j.at("doc").get_to(s.doc);
    j.at("offset").get_to(s.offset);
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorKind::kIo, "data iterator state: {}", e.what());
  }
}

DataIterator::DataIterator(const DataOptions& o) : options_(o) {
  TESSERA_CHECK(o.batch >= 1 && o.seq >= 1, ErrorKind::kConfig,
                "data iterator: batch {} and seq {} must be >= 1", o.batch, o.seq);
  TESSERA_CHECK(o.num_shards >= 1 && o.shard_index >= 0 && o.shard_index < o.num_shards, ErrorKind::kConfig,
                "data iterator: reader {} of {} does not exist", o.shard_index, o.num_shards);
  TESSERA_CHECK(o.vocab_size >= 1, ErrorKind::kConfig, "data iterator: vocab_size {} must be >= 1",
                o.vocab_size);
  source_ = make_source(o);
  row_tokens_.resize(static_cast<size_t>(o.seq) + 1);
  row_docs_.resize(row_tokens_.size());
  const int32_t pad = source_->pad_id();
  pad_id_ = pad >= 0 && pad < o.vocab_size ? pad : 0;
}

DataIterator::~DataIterator() = default;

bool DataIterator::next(const Batch& out, BatchInfo* info) {
  const auto B = static_cast<size_t>(options_.batch), T = static_cast<size_t>(options_.seq);
  for (std::span<int32_t> s : {out.inputs, out.targets, out.positions, out.segment_ids})
    TESSERA_CHECK_SHAPE(s.size() == B * T,
                        "data iterator: a batch buffer holds {} values, expected B*T = {}*{}", s.size(), B,
                        T);
  BatchInfo bi;
  for (size_t b = 0; b < B; ++b) {
    const size_t n = source_->fill(row_tokens_, row_docs_);
    if (n == 0 && b == 0) return false;  // a one-pass source is done: out is untouched
    int32_t* in = out.inputs.data() + b * T;
    int32_t* tg = out.targets.data() + b * T;
    int32_t* pos = out.positions.data() + b * T;
    int32_t* seg = out.segment_ids.data() + b * T;
    const size_t valid = std::min(n, T);  // stream tokens used as inputs in this row
    int32_t segment = 0, position = 0;
    for (size_t t = 0; t < valid; ++t) {
      if (t == 0 || row_docs_[t] != row_docs_[t - 1]) {
        ++segment;
        position = 0;
      }
      in[t] = row_tokens_[t];
      pos[t] = position++;
      seg[t] = segment;
      const bool has_target = t + 1 < n && row_docs_[t + 1] == row_docs_[t];
      tg[t] = has_target ? row_tokens_[t + 1] : -1;
      bi.targets += has_target;
    }
    for (size_t t = valid; t < T; ++t) {
      in[t] = pad_id_;
      tg[t] = -1;
      pos[t] = 0;
      seg[t] = 0;
    }
    bi.rows += valid > 0;
  }
  if (info) *info = bi;
  return true;
}

IteratorState DataIterator::state() const {
  IteratorState s;
  s.signature = source_->signature();
  source_->save(s);
  return s;
}

void DataIterator::restore(const IteratorState& s) {
  const std::string mine = source_->signature();
  if (s.signature != mine)
    fail(ErrorKind::kConfig,
         "the data iterator state was saved for a different dataset or options:\n  saved: {}\n  now:   {}",
         s.signature, mine);
  source_->load(s);
}

void DataIterator::reset() {
  source_->reset();
}
int64_t DataIterator::rows_per_epoch() const {
  return source_->rows_per_epoch();
}
std::string DataIterator::describe() const {
  return source_->describe();
}

}  // namespace tessera::data
