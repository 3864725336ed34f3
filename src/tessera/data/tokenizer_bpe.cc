// Byte-level BPE: the pre-tokeniser (PCRE2), the merge loop, and the .tiktoken / Hugging Face
// loaders (tokenizer_bpe.h).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tessera/data/tokenizer_bpe.h"

#include <pcre2.h>

#include <array>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "tessera/core/error.h"
#include "tessera/core/file.h"

namespace tessera::data {
namespace fs = std::filesystem;

namespace {

constexpr uint32_t kNoRank = std::numeric_limits<uint32_t>::max();

// Hash maps keyed by std::string that accept std::string_view lookups without a copy.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <typename V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

// ---- GPT-2's byte <-> unicode table ----
// Printable Latin-1 bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') stand for themselves; the other 68 bytes
// are given the code points 256, 257, ... in byte order.
std::array<uint32_t, 256> make_byte_to_codepoint() {
  std::array<uint32_t, 256> cp{};
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    cp[b] = printable ? b : next++;
  }
  return cp;
}
const std::array<uint32_t, 256>& byte_to_codepoint() {
  static const auto table = make_byte_to_codepoint();
  return table;
}

void append_utf8(std::string& s, uint32_t cp) {
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// The raw bytes a byte-level string spells; false when it has a character outside the table.
bool unicode_to_bytes(std::string_view s, std::string& out) {
  static const auto inverse = [] {
    std::unordered_map<uint32_t, uint8_t> m;
    for (uint32_t b = 0; b < 256; ++b) m[byte_to_codepoint()[b]] = static_cast<uint8_t>(b);
    return m;
  }();
  out.clear();
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<uint8_t>(s[i]);
    uint32_t cp;
    size_t len;
    if (c < 0x80) {
      cp = c, len = 1;
    } else if ((c & 0xE0) == 0xC0 && i + 1 < s.size()) {
      cp = ((c & 0x1Fu) << 6) | (static_cast<uint8_t>(s[i + 1]) & 0x3Fu), len = 2;
    } else {
      return false;  // the table's code points are all below 0x800: two UTF-8 bytes at most
    }
    auto it = inverse.find(cp);
    if (it == inverse.end()) return false;
    out += static_cast<char>(it->second);
    i += len;
  }
  return true;
}

// ---- base64 (RFC 4648, with padding), for .tiktoken lines ----
bool base64_decode(std::string_view in, std::string& out) {
  static const auto value = [] {
    std::array<int8_t, 256> v{};
    v.fill(-1);
    const char* a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int i = 0; i < 64; ++i) v[static_cast<uint8_t>(a[i])] = static_cast<int8_t>(i);
    return v;
  }();
  out.clear();
  uint32_t acc = 0;
  int bits = 0;
  size_t i = 0;
  for (; i < in.size() && in[i] != '='; ++i) {
    const int8_t d = value[static_cast<uint8_t>(in[i])];
    if (d < 0) return false;
    acc = (acc << 6) | static_cast<uint32_t>(d);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xFF);
    }
  }
  for (; i < in.size(); ++i)
    if (in[i] != '=') return false;
  return true;
}

// ---- the pre-tokeniser ----
class Pretokenizer {
 public:
  explicit Pretokenizer(std::string pattern) : pattern_(std::move(pattern)) {
    int err = 0;
    PCRE2_SIZE offset = 0;
    // UTF + UCP: \s, \p{L}, case folding are Unicode-aware as in Python's `regex`. MATCH_INVALID_UTF:
    // invalid UTF-8 never matches instead of failing the whole call; encode() keeps those bytes.
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern_.data()), pattern_.size(),
                          PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &offset, nullptr);
    if (!code_) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof(msg));
      fail(ErrorKind::kConfig, "pre-tokeniser regex does not compile at offset {}: {}", offset,
           reinterpret_cast<const char*>(msg));
    }
    pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);  // falls back to the interpreter when JIT is missing
  }
  ~Pretokenizer() { pcre2_code_free(code_); }
  Pretokenizer(const Pretokenizer&) = delete;
  Pretokenizer& operator=(const Pretokenizer&) = delete;

  // Calls f(piece) for each match and each run of bytes between matches, in order; together the
  // pieces are exactly `text`.
  template <typename F>
  void split(std::string_view text, F&& f) const {
    // Owned here: f may throw (a piece the vocabulary cannot spell), and the match data must not
    // leak then.
    const std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> md(
        pcre2_match_data_create_from_pattern(code_, nullptr),
        [](pcre2_match_data* m) { pcre2_match_data_free(m); });
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t pos = 0;
    while (pos < text.size()) {
      const int rc = pcre2_match(code_, subject, text.size(), pos, 0, md.get(), nullptr);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0)
        fail(ErrorKind::kRuntime, "pre-tokeniser regex failed with PCRE2 error {} at byte {}", rc, pos);
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
      size_t begin = ov[0], end = ov[1];
      if (begin > pos) f(text.substr(pos, begin - pos));
      if (end == begin) {  // an empty match: step over one byte so the loop advances
        end = begin + 1;
        f(text.substr(begin, 1));
      } else {
        f(text.substr(begin, end - begin));
      }
      pos = end;
    }
    if (pos < text.size()) f(text.substr(pos));
  }

  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  pcre2_code* code_ = nullptr;
};

// ---- the tokenizer ----
class ByteBpeTokenizer final : public Tokenizer {
 public:
  enum class Ranking { kTokenRank, kMergeList };

  // tokens[id] = the token's bytes ("" for unused ids); merges (kMergeList) maps the concatenated
  // bytes of a merge to (length of its left part, rank).
  struct Vocab {
    std::vector<std::string> tokens;
    std::vector<bool> special;
    StringMap<int32_t> ids;  // ordinary tokens only
    StringMap<std::vector<std::pair<uint32_t, uint32_t>>> merges;
  };

  ByteBpeTokenizer(std::string_view type, Ranking ranking, Vocab vocab, std::string pattern,
                   bool whole_piece_first, int32_t bos, int32_t eos, int32_t pad)
      : type_(type),
        ranking_(ranking),
        v_(std::move(vocab)),
        pre_(std::move(pattern)),
        whole_piece_first_(whole_piece_first),
        bos_(bos),
        eos_(eos),
        pad_(pad) {
    for (uint32_t b = 0; b < 256; ++b) {
      const char c = static_cast<char>(b);
      if (!v_.ids.count(std::string_view(&c, 1)))
        fail(ErrorKind::kIo,
             "byte-level BPE vocabulary has no token for byte 0x{:02X}: not a byte-level vocabulary", b);
    }
  }

  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> out;
    std::vector<uint32_t> starts, ranks;  // reused across pieces
    pre_.split(text, [&](std::string_view piece) { encode_piece(piece, starts, ranks, out); });
    return out;
  }

  std::string decode(std::span<const int32_t> ids) const override {
    std::string out;
    for (size_t i = 0; i < ids.size(); ++i) {
      TESSERA_CHECK_SHAPE(ids[i] >= 0 && ids[i] < vocab_size(),
                          "decode: id {} at position {} is outside [0, {})", ids[i], i, vocab_size());
      out += v_.tokens[static_cast<size_t>(ids[i])];
    }
    return out;
  }
  int64_t vocab_size() const override { return static_cast<int64_t>(v_.tokens.size()); }
  int32_t bos_id() const override { return bos_; }
  int32_t eos_id() const override { return eos_; }
  int32_t pad_id() const override { return pad_; }
  std::string_view type() const override { return type_; }

 private:
  // Rank of merging parts [a, b) and [b, c) of `piece`; kNoRank when they do not merge.
  uint32_t pair_rank(std::string_view piece, uint32_t a, uint32_t b, uint32_t c) const {
    const std::string_view joined = piece.substr(a, c - a);
    if (ranking_ == Ranking::kTokenRank) {
      auto it = v_.ids.find(joined);
      return it == v_.ids.end() ? kNoRank : static_cast<uint32_t>(it->second);
    }
    auto it = v_.merges.find(joined);
    if (it == v_.merges.end()) return kNoRank;
    for (const auto& [left_len, rank] : it->second)
      if (left_len == b - a) return rank;
    return kNoRank;
  }

  // The merge loop over one piece: parts are byte ranges [starts[i], starts[i+1]); ranks[i] is the
  // rank of merging part i with part i+1. Quadratic in the piece length, like tiktoken's; pieces are
  // words, so they are short.
  void encode_piece(std::string_view piece, std::vector<uint32_t>& starts, std::vector<uint32_t>& ranks,
                    std::vector<int32_t>& out) const {
    if (whole_piece_first_ || piece.size() == 1) {
      auto it = v_.ids.find(piece);
      if (it != v_.ids.end()) {
        out.push_back(it->second);
        return;
      }
    }
    const auto n = static_cast<uint32_t>(piece.size());
    starts.resize(n + 1);
    for (uint32_t i = 0; i <= n; ++i) starts[i] = i;
    ranks.assign(n, kNoRank);
    for (uint32_t i = 0; i + 1 < n; ++i) ranks[i] = pair_rank(piece, i, i + 1, i + 2);
    while (starts.size() > 2) {
      size_t best = 0;
      uint32_t best_rank = kNoRank;
      for (size_t i = 0; i + 2 < starts.size(); ++i)
        if (ranks[i] < best_rank) best_rank = ranks[i], best = i;
      if (best_rank == kNoRank) break;
      starts.erase(starts.begin() + static_cast<ptrdiff_t>(best) + 1);
      ranks.erase(ranks.begin() + static_cast<ptrdiff_t>(best) + 1);
      const size_t parts = starts.size() - 1;
      ranks[best] =
          best + 1 < parts ? pair_rank(piece, starts[best], starts[best + 1], starts[best + 2]) : kNoRank;
      if (best > 0) ranks[best - 1] = pair_rank(piece, starts[best - 1], starts[best], starts[best + 1]);
    }
    for (size_t i = 0; i + 1 < starts.size(); ++i) {
      auto it = v_.ids.find(piece.substr(starts[i], starts[i + 1] - starts[i]));
      TESSERA_ASSERT(it != v_.ids.end());  // every merge result and every byte is a token
      out.push_back(it->second);
    }
  }

  std::string type_;
  Ranking ranking_;
  Vocab v_;
  Pretokenizer pre_;
  bool whole_piece_first_;
  int32_t bos_, eos_, pad_;
};

// The largest token id a vocabulary file may give. The table is dense (one entry per id up to the
// largest), so one huge id in a crafted file would allocate gigabytes; the largest published
// vocabularies hold about 256k tokens, 16 times fewer.
constexpr int64_t kMaxTokenId = (int64_t{1} << 22) - 1;

void set_token(ByteBpeTokenizer::Vocab& v, int64_t id, std::string bytes, bool special,
               const std::string& where) {
  if (id < 0 || id > kMaxTokenId)
    fail(ErrorKind::kIo, "{}: token id {} is out of range [0, {}]", where, id, kMaxTokenId);
  const auto i = static_cast<size_t>(id);
  if (v.tokens.size() <= i) {
    v.tokens.resize(i + 1);
    v.special.resize(i + 1);
  }
  if (!special) {
    auto [it, inserted] = v.ids.emplace(bytes, static_cast<int32_t>(id));
    if (!inserted && it->second != id)
      fail(ErrorKind::kIo, "{}: the same bytes have two ids ({} and {})", where, it->second, id);
  }
  v.tokens[i] = std::move(bytes);
  v.special[i] = special;
}

// The known tiktoken encodings, by number of ranks.
ByteBpeOptions tiktoken_preset(size_t ranks) {
  ByteBpeOptions o;
  switch (ranks) {
    case 50256:
      o.pattern = kGpt2Pattern;
      o.special_tokens = {{"<|endoftext|>", 50256}};
      o.bos_id = o.eos_id = 50256;
      break;
    case 100256:
      o.pattern = kCl100kPattern;
      o.special_tokens = {{"<|endoftext|>", 100257},
                          {"<|fim_prefix|>", 100258},
                          {"<|fim_middle|>", 100259},
                          {"<|fim_suffix|>", 100260},
                          {"<|endofprompt|>", 100276}};
      o.bos_id = o.eos_id = 100257;
      break;
    case 199998:
      o.pattern = kO200kPattern;
      o.special_tokens = {{"<|endoftext|>", 199999}, {"<|endofprompt|>", 200018}};
      o.bos_id = o.eos_id = 199999;
      break;
    case 128000: {
      o.pattern = kLlama3Pattern;
      const std::vector<std::string> named = {"<|begin_of_text|>",
                                              "<|end_of_text|>",
                                              "<|reserved_special_token_0|>",
                                              "<|reserved_special_token_1|>",
                                              "<|finetune_right_pad_id|>",
                                              "<|reserved_special_token_2|>",
                                              "<|start_header_id|>",
                                              "<|end_header_id|>",
                                              "<|eom_id|>",
                                              "<|eot_id|>",
                                              "<|python_tag|>"};
      for (int i = 0; i < 256; ++i) {
        std::string text =
            i < static_cast<int>(named.size())
                ? named[static_cast<size_t>(i)]
                : fmt::format("<|reserved_special_token_{}|>", i - static_cast<int>(named.size()) + 3);
        o.special_tokens.push_back({std::move(text), 128000 + i});
      }
      o.bos_id = 128000;
      o.eos_id = 128001;
      break;
    }
    default:
      o.pattern = kGpt2Pattern;
  }
  return o;
}

}  // namespace

std::string byte_to_unicode(uint8_t b) {
  std::string s;
  append_utf8(s, byte_to_codepoint()[b]);
  return s;
}

std::unique_ptr<Tokenizer> load_tiktoken(const fs::path& path, const ByteBpeOptions& options) {
  ByteBpeTokenizer::Vocab v;
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorKind::kIo, "cannot open the tiktoken file '{}'", path.string());
  std::string line, bytes;
  size_t lineno = 0, ranks = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty()) continue;
    const std::string where = fmt::format("{}:{}", path.string(), lineno);
    const size_t sp = line.find(' ');
    if (sp == std::string::npos || !base64_decode(std::string_view(line).substr(0, sp), bytes) ||
        bytes.empty())
      fail(ErrorKind::kIo, "{}: expected \"<base64 token> <rank>\"", where);
    int64_t rank = 0;
    try {
      rank = std::stoll(line.substr(sp + 1));
    } catch (const std::exception&) {
      fail(ErrorKind::kIo, "{}: the rank is not an integer", where);
    }
    set_token(v, rank, bytes, false, where);
    ++ranks;
  }
  if (ranks == 0) fail(ErrorKind::kIo, "the tiktoken file '{}' holds no tokens", path.string());
  ByteBpeOptions o =
      options.pattern.empty() && options.special_tokens.empty() ? tiktoken_preset(ranks) : options;
  if (o.pattern.empty()) o.pattern = kGpt2Pattern;
  for (const SpecialToken& s : o.special_tokens) set_token(v, s.id, s.text, true, path.string());
  return std::make_unique<ByteBpeTokenizer>("tiktoken", ByteBpeTokenizer::Ranking::kTokenRank, std::move(v),
                                            o.pattern, /*whole_piece_first=*/true, o.bos_id, o.eos_id,
                                            o.pad_id);
}

namespace {

using nlohmann::json;

json read_json(const fs::path& p) {
  json j = json::parse(read_file(p), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) fail(ErrorKind::kIo, "'{}' is not valid JSON", p.string());
  return j;
}

// Fills ordinary tokens from a vocab object {"byte-level string": id}; `specials` (content -> id)
// are stored with their raw text.
void add_vocab(ByteBpeTokenizer::Vocab& v, const json& vocab, const StringMap<int32_t>& specials,
               const std::string& where) {
  if (!vocab.is_object()) fail(ErrorKind::kIo, "{}: the vocabulary is not a JSON object", where);
  std::string bytes;
  for (const auto& [text, id] : vocab.items()) {
    if (!id.is_number_integer()) fail(ErrorKind::kIo, "{}: the id of \"{}\" is not an integer", where, text);
    if (specials.count(text)) continue;
    if (!unicode_to_bytes(text, bytes))
      fail(ErrorKind::kIo, "{}: \"{}\" is not spelt in GPT-2's byte-level alphabet", where, text);
    set_token(v, id.get<int64_t>(), bytes, false, where);
  }
  for (const auto& [text, id] : specials) set_token(v, id, text, true, where);
}

// Merges given as "left right" strings or [left, right] pairs, highest priority first.
void add_merges(ByteBpeTokenizer::Vocab& v, const std::vector<std::pair<std::string, std::string>>& merges,
                const std::string& where) {
  std::string left, right;
  for (size_t r = 0; r < merges.size(); ++r) {
    if (!unicode_to_bytes(merges[r].first, left) || !unicode_to_bytes(merges[r].second, right))
      fail(ErrorKind::kIo, "{}: merge {} (\"{} {}\") is not spelt in the byte-level alphabet", where, r + 1,
           merges[r].first, merges[r].second);
    v.merges[left + right].push_back({static_cast<uint32_t>(left.size()), static_cast<uint32_t>(r)});
  }
}

std::vector<std::pair<std::string, std::string>> read_merges_txt(const fs::path& p) {
  std::vector<std::pair<std::string, std::string>> out;
  std::ifstream in(p, std::ios::binary);
  if (!in) fail(ErrorKind::kIo, "cannot open '{}'", p.string());
  std::string line;
  size_t lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (lineno == 1 && line.rfind("#version", 0) == 0)) continue;
    const size_t sp = line.find(' ');
    if (sp == std::string::npos || line.find(' ', sp + 1) != std::string::npos)
      fail(ErrorKind::kIo, "{}:{}: expected \"<left> <right>\"", p.string(), lineno);
    out.emplace_back(line.substr(0, sp), line.substr(sp + 1));
  }
  return out;
}

// A special token named in tokenizer_config.json: a string or {"content": string}.
std::string config_token(const json& cfg, const char* key) {
  auto it = cfg.find(key);
  if (it == cfg.end()) return {};
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) return (*it)["content"];
  return {};
}

int32_t find_token(const ByteBpeTokenizer::Vocab& v, std::string_view text) {
  for (size_t i = 0; i < v.tokens.size(); ++i)
    if (v.tokens[i] == text) return static_cast<int32_t>(i);
  return -1;
}

// bos/eos/pad: tokenizer_config.json beside the files when it names them, else the usual tokens.
void find_control_ids(const ByteBpeTokenizer::Vocab& v, const fs::path& dir, int32_t& bos, int32_t& eos,
                      int32_t& pad) {
  const fs::path cfg_path = dir / "tokenizer_config.json";
  std::error_code ec;
  if (fs::is_regular_file(cfg_path, ec)) {
    const json cfg = read_json(cfg_path);
    if (cfg.is_object()) {
      if (auto s = config_token(cfg, "bos_token"); !s.empty()) bos = find_token(v, s);
      if (auto s = config_token(cfg, "eos_token"); !s.empty()) eos = find_token(v, s);
      if (auto s = config_token(cfg, "pad_token"); !s.empty()) pad = find_token(v, s);
    }
  }
  for (const char* b : {"<|begin_of_text|>", "<s>", "<|endoftext|>"})
    if (bos < 0) bos = find_token(v, b);
  for (const char* e : {"<|end_of_text|>", "</s>", "<|endoftext|>"})
    if (eos < 0) eos = find_token(v, e);
}

// The regex of a tokenizer.json pre_tokenizer: ByteLevel (GPT-2's regex unless use_regex is false)
// and Split{Regex} steps, alone or in a Sequence; "" when it has none.
std::string pretokenizer_pattern(const json& pre, const std::string& where) {
  if (pre.is_null()) return {};
  const std::string type = pre.value("type", "");
  if (type == "Sequence") {
    std::string pattern;
    for (const json& step : pre.value("pretokenizers", json::array())) {
      std::string p = pretokenizer_pattern(step, where);
      if (!p.empty() && !pattern.empty())
        fail(ErrorKind::kIo, "{}: more than one splitting step in the pre-tokenizer is not supported", where);
      if (!p.empty()) pattern = std::move(p);
    }
    return pattern;
  }
  if (type == "ByteLevel") return pre.value("use_regex", true) ? std::string(kGpt2Pattern) : std::string();
  if (type == "Split") {
    const json& pat = pre.value("pattern", json::object());
    if (pat.contains("Regex") && pat["Regex"].is_string()) return pat["Regex"];
    fail(ErrorKind::kIo, "{}: a Split pre-tokenizer without a Regex pattern is not supported", where);
  }
  fail(ErrorKind::kIo, "{}: pre-tokenizer type \"{}\" is not supported (ByteLevel, Split, Sequence)", where,
       type);
}

std::unique_ptr<Tokenizer> load_vocab_and_merges(const fs::path& vocab_json, const fs::path& merges_txt);

// Runs a loader of Hugging Face JSON files: a field of the wrong JSON type (a number where an
// object or a string belongs) throws from nlohmann, and becomes kIo naming the file.
template <typename Load>
std::unique_ptr<Tokenizer> with_json_errors_as_io(const fs::path& path, Load load) {
  try {
    return load();
  } catch (const json::exception& e) {
    fail(ErrorKind::kIo, "{}: malformed tokenizer file: {}", path.string(), e.what());
  }
}

std::unique_ptr<Tokenizer> load_tokenizer_json(const fs::path& path) {
  const std::string where = path.string();
  const json j = read_json(path);
  const json& model = j.value("model", json::object());
  if (model.value("type", "") != "BPE")
    fail(ErrorKind::kIo, "{}: model type \"{}\"; Tessera reads byte-level BPE tokenizer.json files", where,
         model.value("type", ""));
  if (model.value("byte_fallback", false))
    fail(ErrorKind::kIo, "{}: byte_fallback BPE is SentencePiece-style; use the tokenizer's .model file",
         where);
  StringMap<int32_t> specials;
  for (const json& t : j.value("added_tokens", json::array())) {
    if (!t.value("special", false)) continue;
    const std::string content = t.value("content", "");
    const json& id = t.value("id", json());
    if (!id.is_number_integer())
      fail(ErrorKind::kIo, "{}: the id of added token \"{}\" is not an integer", where, content);
    const int64_t value = id.get<int64_t>();
    if (value < 0 || value > kMaxTokenId)
      fail(ErrorKind::kIo, "{}: added token \"{}\" has id {}, outside [0, {}]", where, content, value,
           kMaxTokenId);
    specials.emplace(content, static_cast<int32_t>(value));
  }
  ByteBpeTokenizer::Vocab v;
  add_vocab(v, model.value("vocab", json::object()), specials, where);
  std::vector<std::pair<std::string, std::string>> merges;
  for (const json& m : model.value("merges", json::array())) {
    if (m.is_string()) {
      const std::string s = m;
      const size_t sp = s.find(' ');
      if (sp == std::string::npos) fail(ErrorKind::kIo, "{}: merge \"{}\" has no space", where, s);
      merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else if (m.is_array() && m.size() == 2) {
      merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      fail(ErrorKind::kIo, "{}: a merge is neither \"a b\" nor [a, b]", where);
    }
  }
  add_merges(v, merges, where);
  std::string pattern = pretokenizer_pattern(j.value("pre_tokenizer", json()), where);
  if (pattern.empty()) pattern = kGpt2Pattern;
  int32_t bos = -1, eos = -1, pad = -1;
  find_control_ids(v, path.parent_path(), bos, eos, pad);
  return std::make_unique<ByteBpeTokenizer>("huggingface", ByteBpeTokenizer::Ranking::kMergeList,
                                            std::move(v), std::move(pattern),
                                            model.value("ignore_merges", false), bos, eos, pad);
}

}  // namespace

std::unique_ptr<Tokenizer> load_huggingface_bpe(const fs::path& vocab_json, const fs::path& merges_txt) {
  return with_json_errors_as_io(vocab_json, [&] { return load_vocab_and_merges(vocab_json, merges_txt); });
}

namespace {

std::unique_ptr<Tokenizer> load_vocab_and_merges(const fs::path& vocab_json, const fs::path& merges_txt) {
  ByteBpeTokenizer::Vocab v;
  add_vocab(v, read_json(vocab_json), {}, vocab_json.string());
  // Tokens spelt like control tokens are special: never produced from text, decoded verbatim.
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    const std::string& t = v.tokens[i];
    if (t.size() > 4 && t.front() == '<' && t.back() == '>' && (t[1] == '|' || t == "<s>" || t == "</s>")) {
      v.ids.erase(t);
      v.special[i] = true;
    }
  }
  add_merges(v, read_merges_txt(merges_txt), merges_txt.string());
  int32_t bos = -1, eos = -1, pad = -1;
  find_control_ids(v, vocab_json.parent_path(), bos, eos, pad);
  return std::make_unique<ByteBpeTokenizer>("huggingface", ByteBpeTokenizer::Ranking::kMergeList,
                                            std::move(v), std::string(kGpt2Pattern), false, bos, eos, pad);
}

}  // namespace

std::unique_ptr<Tokenizer> load_huggingface_bpe(const fs::path& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    if (fs::is_regular_file(path / "tokenizer.json", ec))
      return with_json_errors_as_io(path / "tokenizer.json",
                                    [&] { return load_tokenizer_json(path / "tokenizer.json"); });
    if (fs::is_regular_file(path / "vocab.json", ec) && fs::is_regular_file(path / "merges.txt", ec))
      return load_huggingface_bpe(path / "vocab.json", path / "merges.txt");
    fail(ErrorKind::kIo, "the folder '{}' holds neither tokenizer.json nor vocab.json + merges.txt",
         path.string());
  }
  if (!fs::is_regular_file(path, ec)) fail(ErrorKind::kIo, "no tokenizer at '{}'", path.string());
  if (path.filename() == "vocab.json") return load_huggingface_bpe(path, path.parent_path() / "merges.txt");
  return with_json_errors_as_io(path, [&] { return load_tokenizer_json(path); });
}

}  // namespace tessera::data
