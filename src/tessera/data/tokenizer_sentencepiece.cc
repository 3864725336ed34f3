// SentencePiece loading and training (tokenizer_sentencepiece.h).
#include "tessera/data/tokenizer_sentencepiece.h"

#include <fmt/ranges.h>
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <chrono>
#include <thread>
#include <unordered_map>

#include "tessera/core/error.h"
#include "tessera/core/file.h"
#include "tessera/data/documents.h"

namespace tessera::data {
namespace {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(std::unique_ptr<sentencepiece::SentencePieceProcessor> sp)
      : sp_(std::move(sp)) {}

  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int> ids;
    const auto st = sp_->Encode(text, &ids);
    if (!st.ok()) fail(ErrorKind::kRuntime, "SentencePiece encode failed: {}", st.ToString());
    return {ids.begin(), ids.end()};
  }
  std::string decode(std::span<const int32_t> ids) const override {
    const int64_t v = vocab_size();
    for (size_t i = 0; i < ids.size(); ++i)
      TESSERA_CHECK_SHAPE(ids[i] >= 0 && ids[i] < v, "decode: id {} at position {} is outside [0, {})",
                          ids[i], i, v);
    std::string out;
    const auto st = sp_->Decode(std::vector<int>(ids.begin(), ids.end()), &out);
    if (!st.ok()) fail(ErrorKind::kRuntime, "SentencePiece decode failed: {}", st.ToString());
    return out;
  }
  int64_t vocab_size() const override { return sp_->GetPieceSize(); }
  int32_t bos_id() const override { return sp_->bos_id(); }
  int32_t eos_id() const override { return sp_->eos_id(); }
  int32_t pad_id() const override { return sp_->pad_id(); }
  std::string_view type() const override { return "sentencepiece"; }

  const sentencepiece::SentencePieceProcessor& processor() const { return *sp_; }

 private:
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
};

// Number of Unicode characters in UTF-8 text: the bytes that do not continue a sequence.
int64_t count_chars(std::string_view s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// Feeds the trainer one line at a time from the documents, up to a character budget.
class LineIterator final : public sentencepiece::SentenceIterator {
 public:
  LineIterator(std::vector<std::filesystem::path> files, int64_t max_chars)
      : reader_(std::move(files)), max_chars_(max_chars) {
    Next();
  }
  bool done() const override { return done_; }
  const std::string& value() const override { return line_; }
  sentencepiece::util::Status status() const override { return {}; }
  void Next() override {
    while (!done_) {
      if (pos_ >= doc_.size()) {
        if (chars_ >= max_chars_ || !reader_.next(doc_)) {
          done_ = true;
          return;
        }
        pos_ = 0;
      }
      size_t end = doc_.find('\n', pos_);
      if (end == std::string::npos) end = doc_.size();
      std::string_view line(doc_.data() + pos_, end - pos_);
      pos_ = end + 1;
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
      if (chars_ >= max_chars_) {
        done_ = true;
        return;
      }
      line_.assign(line);
      chars_ += count_chars(line_);
      ++sentences_;
      return;
    }
  }
  int64_t chars() const { return chars_; }
  int64_t sentences() const { return sentences_; }

 private:
  DocumentReader reader_;
  int64_t max_chars_;
  std::string doc_, line_;
  size_t pos_ = 0;
  bool done_ = false;
  int64_t chars_ = 0, sentences_ = 0;
};

}  // namespace

std::unique_ptr<Tokenizer> load_sentencepiece(const std::filesystem::path& model_path) {
  auto sp = std::make_unique<sentencepiece::SentencePieceProcessor>();
  sentencepiece::util::Status st;
  try {
    st = sp->Load(model_path.string());
  } catch (const std::exception& e) {
    // Most malformed models come back as a status, but some reach the library's trie builder,
    // which throws instead (an empty piece: "failed to insert key: zero-length key").
    fail(ErrorKind::kIo, "cannot load the SentencePiece model '{}': {}", model_path.string(), e.what());
  }
  if (!st.ok())
    fail(ErrorKind::kIo, "cannot load the SentencePiece model '{}': {}", model_path.string(), st.ToString());
  return std::make_unique<SentencePieceTokenizer>(std::move(sp));
}

SentencePieceTrainReport train_sentencepiece(const SentencePieceTrainOptions& o) {
  TESSERA_CHECK(o.model_type == "unigram" || o.model_type == "bpe", ErrorKind::kConfig,
                "tokenizer model type '{}': expected unigram or bpe", o.model_type);
  TESSERA_CHECK(o.vocab_size >= 8, ErrorKind::kConfig, "vocab_size={} is too small for a SentencePiece model",
                o.vocab_size);
  TESSERA_CHECK(!o.model_path.empty(), ErrorKind::kConfig, "no output path for the SentencePiece model");
  const auto t0 = std::chrono::steady_clock::now();
  LineIterator lines(resolve_text_files(o.inputs), o.max_corpus_chars);
  const int threads =
      o.num_threads > 0 ? o.num_threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const std::unordered_map<std::string, std::string> args = {
      {"model_type", o.model_type},
      {"vocab_size", std::to_string(o.vocab_size)},
      {"byte_fallback", o.byte_fallback ? "true" : "false"},
      {"num_threads", std::to_string(threads)},
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"split_digits", "true"},
      {"allow_whitespace_only_pieces", "true"},
      {"max_sentence_length", "65536"},
      {"unk_id", "0"},
      {"bos_id", "1"},
      {"eos_id", "2"},
      {"pad_id", "-1"},
      {"minloglevel", o.verbose ? "0" : "2"},
  };
  std::string proto;
  const auto st = sentencepiece::SentencePieceTrainer::Train(args, &lines, &proto);
  if (!st.ok())
    fail(ErrorKind::kConfig, "SentencePiece training ({} vocab {}, {} characters of {}) failed: {}",
         o.model_type, o.vocab_size, lines.chars(), fmt::join(o.inputs, ", "), st.ToString());

  auto sp = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const auto lst = sp->LoadFromSerializedProto(proto);
  if (!lst.ok())
    fail(ErrorKind::kRuntime, "the trained SentencePiece model does not load: {}", lst.ToString());
  write_file_atomically(o.model_path, proto);
  // The .vocab file SentencePiece's own trainer writes: piece <tab> score, one per id.
  std::string vocab;
  for (int i = 0; i < sp->GetPieceSize(); ++i)
    vocab += fmt::format("{}\t{}\n", sp->IdToPiece(i), sp->GetScore(i));
  std::filesystem::path vocab_path = o.model_path;
  vocab_path.replace_extension(".vocab");
  write_file_atomically(vocab_path, vocab);

  SentencePieceTrainReport r;
  r.sentences = lines.sentences();
  r.chars = lines.chars();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace tessera::data
