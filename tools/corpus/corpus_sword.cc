// SWORD zText modules (corpus_sword.h).
#include "corpus/corpus_sword.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <string_view>

#include "corpus/corpus_rdata.h"
#include "tessera/core/error.h"
#include "tessera/core/file.h"

namespace tessera::corpus {
namespace fs = std::filesystem;

namespace {

uint32_t le32(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

// The value of attribute `key` in a tag's text, or "".
std::string_view attribute(std::string_view tag, std::string_view key) {
  size_t at = 0;
  while ((at = tag.find(key, at)) != std::string_view::npos) {
    const bool starts = at > 0 && (tag[at - 1] == ' ' || tag[at - 1] == '\t' || tag[at - 1] == '\n');
    if (starts && tag.substr(at + key.size(), 2) == "=\"") {
      const size_t begin = at + key.size() + 2, end = tag.find('"', begin);
      if (end != std::string_view::npos) return tag.substr(begin, end - begin);
    }
    at += key.size();
  }
  return {};
}

std::string_view tag_name(std::string_view tag) {  // tag without '<' and '>'
  size_t end = 0;
  while (end < tag.size() && tag[end] != ' ' && tag[end] != '/' && tag[end] != '\t' && tag[end] != '\n')
    ++end;
  return tag.substr(0, end);
}

// Appends text with XML's five named entities and numeric references decoded.
void append_text(std::string& out, std::string_view s) {
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '&') {
      out += s[i];
      continue;
    }
    const size_t semi = s.find(';', i);
    if (semi == std::string_view::npos || semi - i > 10) {
      out += '&';
      continue;
    }
    const std::string_view e = s.substr(i + 1, semi - i - 1);
    if (e == "amp")
      out += '&';
    else if (e == "lt")
      out += '<';
    else if (e == "gt")
      out += '>';
    else if (e == "quot")
      out += '"';
    else if (e == "apos")
      out += '\'';
    else if (!e.empty() && e[0] == '#') {
      const uint32_t cp = static_cast<uint32_t>(e.size() > 1 && e[1] == 'x'
                                                    ? std::stoul(std::string(e.substr(2)), nullptr, 16)
                                                    : std::stoul(std::string(e.substr(1))));
      if (cp < 0x80) {
        out += static_cast<char>(cp);
      } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
      } else {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
      }
    } else {
      out.append(s.substr(i, semi - i + 1));
      i = semi;
      continue;
    }
    i = semi;
  }
}

// Collapses runs of whitespace to one space and trims the ends.
std::string collapse(std::string_view s) {
  std::string out;
  bool space = false;
  for (char c : s) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      space = !out.empty();
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += c;
  }
  return out;
}

class Testament {
 public:
  Testament(const fs::path& dir, std::string_view t, std::vector<SwordBook>& books) : books_(books) {
    const fs::path bzs = dir / (std::string(t) + ".bzs"), bzz = dir / (std::string(t) + ".bzz"),
                   bzv = dir / (std::string(t) + ".bzv");
    MappedFile s(bzs), z(bzz), v(bzv);
    for (size_t i = 0; i + 12 <= s.size(); i += 12) {
      const uint32_t off = le32(s.data() + i), size = le32(s.data() + i + 4), raw = le32(s.data() + i + 8);
      if (uint64_t{off} + size > z.size())
        fail(ErrorKind::kIo, "'{}': block {} at offset {} points past the end of '{}'", bzs.string(), i / 12,
             i, bzz.string());
      blocks_.push_back(zlib_inflate(std::string_view(reinterpret_cast<const char*>(z.data()) + off, size),
                                     raw, fmt::format("{} block {}", bzz.string(), i / 12)));
    }
    for (size_t i = 0; i + 10 <= v.size(); i += 10) {
      const uint32_t block = le32(v.data() + i), off = le32(v.data() + i + 4);
      const uint32_t size = uint32_t{v.data()[i + 8]} | uint32_t{v.data()[i + 9]} << 8;
      if (size == 0) continue;
      if (block >= blocks_.size() || uint64_t{off} + size > blocks_[block].size())
        fail(ErrorKind::kIo, "'{}': entry {} at offset {} points outside its block", bzv.string(), i / 10, i);
      entry(std::string_view(blocks_[block]).substr(off, size));
    }
  }

 private:
  // One entry: a verse, or headings and markup around chapters and books.
  void entry(std::string_view xml) {
    std::string text;
    size_t pos = 0;
    int skip = 0;  // depth inside elements whose text is dropped (notes, non-canonical titles)
    bool after_note = false;
    while (pos < xml.size()) {
      const size_t lt = xml.find('<', pos);
      const std::string_view chunk = xml.substr(pos, (lt == std::string_view::npos ? xml.size() : lt) - pos);
      if (skip == 0 && !chunk.empty()) {
        // The OSIS export drops the space after a footnote: "God<note>..</note>created".
        if (after_note && word_char(chunk.front()) && !text.empty() && word_char(text.back())) text += ' ';
        append_text(text, chunk);
        after_note = false;
      }
      if (lt == std::string_view::npos) break;
      const size_t gt = xml.find('>', lt);
      if (gt == std::string_view::npos) break;
      const std::string_view tag = xml.substr(lt + 1, gt - lt - 1);
      pos = gt + 1;
      const bool closing = !tag.empty() && tag[0] == '/', empty = !tag.empty() && tag.back() == '/';
      const std::string_view name = tag_name(closing ? tag.substr(1) : tag);
      const bool dropped = name == "note" || (name == "title" && attribute(tag, "canonical") != "true");
      if (dropped && !empty) skip = std::max(0, skip + (closing ? -1 : 1));
      if (name == "note" && closing && skip == 0) after_note = true;
      // Line and block elements separate words; inline ones (w, q, seg, ...) do not: "<w>word</w>,".
      const bool breaks = name == "lb" || name == "l" || name == "lg" || name == "div" || name == "p" ||
                          name == "chapter" || name == "title" || name == "item" || name == "list";
      if (breaks && skip == 0) text += ' ';
      if (closing || skip > 0) continue;
      const bool start = !attribute(tag, "sID").empty(), end = !attribute(tag, "eID").empty();
      if (name == "div" && attribute(tag, "type") == "book" && start) {
        flush(text);
        begin_book(attribute(tag, "osisID"));
      } else if (name == "milestone" && attribute(tag, "type") == "x-usfm-toc2") {
        name_book(attribute(tag, "n"));
      } else if (name == "chapter" && start) {
        flush(text);
        begin_chapter(attribute(tag, "osisID"));
      } else if ((name == "chapter" || (name == "div" && attribute(tag, "type") == "book")) && end) {
        flush(text);  // what follows the end of a chapter or book (a glossary, say) is not verse text
        in_chapter_ = false;
      }
    }
    flush(text);
  }

  static bool word_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || (c & 0x80); }

  // The text gathered so far as a verse of the current chapter (none outside chapters).
  void flush(std::string& text) {
    std::string verse = collapse(text);
    text.clear();
    if (!verse.empty() && in_chapter_) books_.back().chapters.back().verses.push_back(std::move(verse));
  }

  void begin_book(std::string_view osis_id) {
    if (!books_.empty() && books_.back().osis_id == osis_id) return;
    books_.push_back({std::string(osis_id), std::string(osis_id), {}});
    in_chapter_ = false;
    named_ = false;
  }
  void name_book(std::string_view name) {
    if (!books_.empty() && !named_ && books_.back().chapters.empty() && !name.empty()) {
      books_.back().name = name;
      named_ = true;
    }
  }
  // osisID "Gen.1": a chapter of the current book, or (when the module left out the book's div) of
  // a new book.
  void begin_chapter(std::string_view osis_id) {
    const size_t dot = osis_id.rfind('.');
    const std::string_view book = osis_id.substr(0, dot);
    if (books_.empty() || books_.back().osis_id != book) begin_book(book);
    books_.back().chapters.push_back(
        {std::string(dot == std::string_view::npos ? "" : osis_id.substr(dot + 1)), {}});
    in_chapter_ = true;
  }

  std::vector<SwordBook>& books_;
  std::vector<std::string> blocks_;
  bool in_chapter_ = false;  // verses go to books_.back().chapters.back()
  bool named_ = false;
};

}  // namespace

std::vector<SwordBook> read_sword_ztext(const fs::path& module_dir) {
  std::vector<SwordBook> books;
  bool any = false;
  for (std::string_view t : {"ot", "nt"}) {
    std::error_code ec;
    if (!fs::exists(module_dir / (std::string(t) + ".bzv"), ec)) continue;
    any = true;
    Testament(module_dir, t, books);
  }
  if (!any) fail(ErrorKind::kIo, "'{}' holds no zText module (ot.bzv / nt.bzv)", module_dir.string());
  std::erase_if(books, [](const SwordBook& b) { return b.chapters.empty(); });
  return books;
}

}  // namespace tessera::corpus
