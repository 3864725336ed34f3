// The pd-en corpus converter (corpus_pd_en.h).
#include "corpus/corpus_pd_en.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "corpus/corpus_rdata.h"
#include "corpus/corpus_sword.h"
#include "tessera/core/error.h"
#include "tessera/core/file.h"

extern char** environ;

namespace tessera::corpus {
namespace fs = std::filesystem;

namespace {

// The 66 books in the order the `bible` program prints them.
constexpr std::array<std::string_view, 66> kBooks = {"Genesis",
                                                     "Exodus",
                                                     "Leviticus",
                                                     "Numbers",
                                                     "Deuteronomy",
                                                     "Joshua",
                                                     "Judges",
                                                     "Ruth",
                                                     "1 Samuel",
                                                     "2 Samuel",
                                                     "1 Kings",
                                                     "2 Kings",
                                                     "1 Chronicles",
                                                     "2 Chronicles",
                                                     "Ezra",
                                                     "Nehemiah",
                                                     "Esther",
                                                     "Job",
                                                     "Psalms",
                                                     "Proverbs",
                                                     "Ecclesiastes",
                                                     "Song of Solomon",
                                                     "Isaiah",
                                                     "Jeremiah",
                                                     "Lamentations",
                                                     "Ezekiel",
                                                     "Daniel",
                                                     "Hosea",
                                                     "Joel",
                                                     "Amos",
                                                     "Obadiah",
                                                     "Jonah",
                                                     "Micah",
                                                     "Nahum",
                                                     "Habakkuk",
                                                     "Zephaniah",
                                                     "Haggai",
                                                     "Zechariah",
                                                     "Malachi",
                                                     "Matthew",
                                                     "Mark",
                                                     "Luke",
                                                     "John",
                                                     "Acts",
                                                     "Romans",
                                                     "1 Corinthians",
                                                     "2 Corinthians",
                                                     "Galatians",
                                                     "Ephesians",
                                                     "Philippians",
                                                     "Colossians",
                                                     "1 Thessalonians",
                                                     "2 Thessalonians",
                                                     "1 Timothy",
                                                     "2 Timothy",
                                                     "Titus",
                                                     "Philemon",
                                                     "Hebrews",
                                                     "James",
                                                     "1 Peter",
                                                     "2 Peter",
                                                     "1 John",
                                                     "2 John",
                                                     "3 John",
                                                     "Jude",
                                                     "Revelation"};

// The OSIS ids of the same books, for naming the World English Bible's files.
constexpr std::array<std::string_view, 66> kOsisIds = {
    "Gen",   "Exod", "Lev",  "Num",  "Deut", "Josh", "Judg",  "Ruth",   "1Sam",   "2Sam",  "1Kgs",
    "2Kgs",  "1Chr", "2Chr", "Ezra", "Neh",  "Esth", "Job",   "Ps",     "Prov",   "Eccl",  "Song",
    "Isa",   "Jer",  "Lam",  "Ezek", "Dan",  "Hos",  "Joel",  "Amos",   "Obad",   "Jonah", "Mic",
    "Nah",   "Hab",  "Zeph", "Hag",  "Zech", "Mal",  "Matt",  "Mark",   "Luke",   "John",  "Acts",
    "Rom",   "1Cor", "2Cor", "Gal",  "Eph",  "Phil", "Col",   "1Thess", "2Thess", "1Tim",  "2Tim",
    "Titus", "Phlm", "Heb",  "Jas",  "1Pet", "2Pet", "1John", "2John",  "3John",  "Jude",  "Rev"};

// The Austen novels in janeaustenr, by variable name; Persuasion is held out for validation.
constexpr std::array<std::pair<std::string_view, std::string_view>, 6> kAusten = {{
    {"emma", "austen-emma.txt"},
    {"mansfieldpark", "austen-mansfield-park.txt"},
    {"northangerabbey", "austen-northanger-abbey.txt"},
    {"prideprejudice", "austen-pride-and-prejudice.txt"},
    {"sensesensibility", "austen-sense-and-sensibility.txt"},
    {"persuasion", ""},
}};

// "Daniel (Greek)" -> "daniel-greek": lower-case letters and digits, words joined by '-'.
std::string slug(std::string_view name) {
  std::string s;
  for (char c : name) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      s += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    } else if (!s.empty() && s.back() != '-') {
      s += '-';
    }
  }
  while (!s.empty() && s.back() == '-') s.pop_back();
  return s;
}

// Runs argv[0] with stdin from /dev/null and returns its standard output. Throws kIo when it cannot
// start or exits non-zero.
std::string run_program(const std::vector<std::string>& argv) {
  int out[2];
  if (::pipe(out) != 0) fail(ErrorKind::kIo, "cannot create a pipe to run '{}'", argv[0]);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_addclose(&actions, out[0]);
  posix_spawn_file_actions_addclose(&actions, out[1]);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, argv[0].c_str(), &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(out[1]);
  if (rc != 0) {
    ::close(out[0]);
    fail(ErrorKind::kIo, "cannot run '{}': {}", argv[0], std::strerror(rc));
  }
  std::string text;
  char buf[1 << 16];
  for (ssize_t n; (n = ::read(out[0], buf, sizeof(buf))) != 0;) {
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(out[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    fail(ErrorKind::kIo, "'{}' failed (exit status {})", argv[0],
         WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  return text;
}

std::vector<std::string_view> lines_of(std::string_view text) {
  std::vector<std::string_view> lines;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(begin, end - begin);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    lines.push_back(line);
    begin = end + 1;
  }
  return lines;
}

class Converter {
 public:
  Converter(fs::path unpacked, fs::path out) : in_(std::move(unpacked)), out_(std::move(out)) {
    std::ifstream versions(in_ / "PACKAGES");
    std::string name, version;
    while (versions >> name >> version) versions_[name] = version;
  }

  void kjv() {
    const fs::path bible = in_ / "usr" / "bin" / "bible";
    const std::string text =
        run_program({bible.string(), "-p", (in_ / "usr" / "lib").string(), "-f", "Gen1:1-Rev22:21"});
    std::string book_text, book_abbrev, chapter;
    size_t book = 0;
    auto flush = [&] {
      if (book_text.empty()) return;
      write(fs::path("train") / fmt::format("kjv-{:02d}-{}.txt", book, slug(kBooks[book - 1])), book_text,
            "bible-kjv-text");
      book_text.clear();
    };
    for (std::string_view line : lines_of(text)) {
      if (line.empty()) continue;
      // "1Sa3:10 And the LORD came...": book abbreviation, chapter, ':', verse, ' ', text.
      const size_t space = line.find(' '), colon = line.find(':');
      if (space == std::string_view::npos || colon == std::string_view::npos || colon > space)
        fail(ErrorKind::kIo, "'{}' printed an unexpected line: \"{}\"", bible.string(), line.substr(0, 60));
      size_t digits = colon;
      while (digits > 1 && std::isdigit(static_cast<unsigned char>(line[digits - 1]))) --digits;
      const std::string_view abbrev = line.substr(0, digits), ch = line.substr(digits, colon - digits);
      if (abbrev != book_abbrev) {
        flush();
        if (++book > kBooks.size()) fail(ErrorKind::kIo, "'{}' printed more than 66 books", bible.string());
        book_abbrev = abbrev;
        book_text = fmt::format("{}\n", kBooks[book - 1]);
        chapter.clear();
      }
      if (ch != chapter) {
        chapter = ch;
        book_text += fmt::format("\n{} {}\n\n", book == 19 ? "Psalm" : "Chapter", chapter);
      }
      book_text += line.substr(space + 1);
      book_text += '\n';
    }
    flush();
    if (book == 0) fail(ErrorKind::kIo, "'{}' printed no verses", bible.string());
  }

  void web() {
    const auto books = read_sword_ztext(in_ / "usr/share/sword/modules/texts/ztext/engWEB2015eb");
    for (size_t i = 0; i < books.size(); ++i) {
      const SwordBook& b = books[i];
      const auto* canon = std::find(kOsisIds.begin(), kOsisIds.end(), b.osis_id);
      const std::string name(canon != kOsisIds.end() ? kBooks[static_cast<size_t>(canon - kOsisIds.begin())]
                                                     : b.name);
      std::string text = name + "\n";
      for (const SwordChapter& c : b.chapters) {
        text += fmt::format("\n{} {}\n\n", b.osis_id == "Ps" ? "Psalm" : "Chapter", c.number);
        for (const std::string& v : c.verses) (text += v) += '\n';
      }
      write(fs::path("train") / fmt::format("web-{:02d}-{}.txt", i + 1, slug(name)), text, "sword-text-web");
    }
  }

  void austen() {
    const RLazyLoadDb db(in_ / "usr/lib/R/site-library/janeaustenr/data/Rdata");
    for (const auto& [name, file] : kAusten) {
      const RObject book = db.get(std::string(name));
      if (book.type != kRString) fail(ErrorKind::kIo, "janeaustenr: {} is not a character vector", name);
      std::string text;
      for (const std::string& line : book.strings) text += line + "\n";
      const fs::path path =
          file.empty() ? fs::path("validation") / "persuasion.txt" : fs::path("train") / file;
      write(path, trim_blank_lines(text), "r-cran-janeaustenr");
    }
  }

  void moby_dick() {
    const RLazyLoadDb db(in_ / "usr/lib/R/site-library/tokenizers/data/Rdata");
    const RObject m = db.get("mobydick");
    if (m.type != kRString || m.strings.empty()) fail(ErrorKind::kIo, "tokenizers: mobydick is not a string");
    std::string text;
    bool inside = false;
    for (std::string_view line : lines_of(m.strings[0])) {
      if (line.starts_with("*** START OF")) {
        inside = true;
        continue;
      }
      if (line.starts_with("*** END OF")) break;
      if (line.starts_with("End of Project Gutenberg") || line.starts_with("End of the Project Gutenberg"))
        continue;
      if (inside) (text += line) += '\n';
    }
    if (text.empty()) fail(ErrorKind::kIo, "tokenizers: mobydick has no \"*** START OF\" line");
    write(fs::path("train") / "moby-dick.txt", trim_blank_lines(text), "r-cran-tokenizers");
  }

  void devils_dictionary() {
    const fs::path dir = in_ / "usr/share/dictd";
    std::string text = gunzip_file(dir / "devil.dict.dz");
    // dictd's own entries (headwords 00database*, except the info text that holds the preface)
    // are byte ranges given by the index in base64 offset/length; blank them out.
    std::vector<std::pair<uint64_t, uint64_t>> drop;
    std::ifstream index(dir / "devil.index");
    if (!index) fail(ErrorKind::kIo, "cannot open '{}'", (dir / "devil.index").string());
    std::string line;
    while (std::getline(index, line)) {
      const size_t t1 = line.find('\t'), t2 = line.find('\t', t1 + 1);
      if (t1 == std::string::npos || t2 == std::string::npos) continue;
      const std::string head = line.substr(0, t1);
      if (!head.starts_with("00database") || head == "00databaseinfo") continue;
      drop.emplace_back(dict_number(line.substr(t1 + 1, t2 - t1 - 1)), dict_number(line.substr(t2 + 1)));
    }
    std::sort(drop.rbegin(), drop.rend());
    for (const auto& [offset, length] : drop)
      if (offset + length <= text.size()) text.erase(offset, length);
    write(fs::path("train") / "devils-dictionary.txt", trim_blank_lines(text), "dict-devil");
  }

  void jargon() {
    write(fs::path("train") / "jargon-file.txt",
          trim_blank_lines(gunzip_file(in_ / "usr/share/doc/jargon-text/jargon.txt.gz")), "jargon-text");
  }

  // SOURCES.md: one row per package (the KJV's 66 books share one), then the totals.
  void sources() const {
    struct Group {
      std::string files;
      size_t count = 0;
      uint64_t bytes = 0;
    };
    std::vector<std::pair<std::string, Group>> groups;  // in output order
    for (const CorpusFile& f : report_.files) {
      auto it =
          std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == f.package; });
      if (it == groups.end()) it = groups.insert(groups.end(), {f.package, {}});
      Group& g = it->second;
      if (g.count == 0)
        g.files = f.path.generic_string();
      else if (f.package == "bible-kjv-text")
        g.files = "train/kjv-NN-<book>.txt";
      else if (f.package == "sword-text-web")
        g.files = "train/web-NN-<book>.txt";
      else
        g.files += ", " + f.path.generic_string();
      ++g.count;
      g.bytes += f.bytes;
    }
    const std::map<std::string, std::string> what = {
        {"bible-kjv-text",
         "King James Bible (1769 text), one file per book; read with the `bible` program of bible-kjv"},
        {"sword-text-web",
         "World English Bible with the Deuterocanon (2015 text), one file per book; footnotes and "
         "markup removed, wording unchanged"},
        {"r-cran-janeaustenr", "Jane Austen's six novels; Persuasion is the validation split"},
        {"r-cran-tokenizers",
         "Herman Melville, Moby-Dick (Project Gutenberg #2701), without the Gutenberg header and licence"},
        {"dict-devil", "Ambrose Bierce, The Devil's Dictionary (1911)"},
        {"jargon-text", "The Jargon File 4.4.7"},
    };
    std::string md =
        "# pd-en: public-domain English prose\n\n"
        "Written by Tessera's corpus converter (tools/corpus/corpus_pd_en.cc) from Debian packages that\n"
        "scripts/prepare_corpus.sh downloads and unpacks. Every text here is in the public domain; the\n"
        "packages' own code and packaging carry their own licences (usr/share/doc/<package>/copyright).\n\n"
        "| files | count | bytes | Debian package | version | text | licence of the text |\n"
        "| --- | ---: | ---: | --- | --- | --- | --- |\n";
    for (const auto& [package, g] : groups) {
      auto v = versions_.find(package);
      md += fmt::format("| {} | {} | {} | {} | {} | {} | public domain |\n", g.files, g.count, g.bytes,
                        package, v == versions_.end() ? "unknown" : v->second, what.at(package));
    }
    md += fmt::format(
        "\nTotal: {} bytes of training text (train/), {} bytes of validation text (validation/).\n",
        report_.train_bytes, report_.validation_bytes);
    write_file_atomically(out_ / "SOURCES.md", md);
  }

  CorpusReport report() const { return report_; }

 private:
  void write(const fs::path& rel, const std::string& text, std::string_view package) {
    write_file_atomically(out_ / rel, text);
    report_.files.push_back({rel, text.size(), std::string(package)});
    (rel.begin()->string() == "validation" ? report_.validation_bytes : report_.train_bytes) += text.size();
  }
  static std::string trim_blank_lines(std::string text) {
    const size_t first = text.find_first_not_of("\r\n");
    if (first == std::string::npos) return {};
    const size_t last = text.find_last_not_of("\r\n \t");
    return text.substr(first, last - first + 1) + "\n";
  }
  // dictd index numbers: base64 digits, most significant first.
  static uint64_t dict_number(std::string_view s) {
    static constexpr std::string_view kDigits =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    uint64_t v = 0;
    for (char c : s) {
      const size_t d = kDigits.find(c);
      if (d == std::string_view::npos) fail(ErrorKind::kIo, "devil.index: bad number \"{}\"", s);
      v = v * 64 + d;
    }
    return v;
  }

  fs::path in_, out_;
  std::map<std::string, std::string> versions_;
  CorpusReport report_;
};

}  // namespace

CorpusReport build_pd_en(const std::string& unpacked_dir, const std::string& out_dir) {
  Converter c(unpacked_dir, out_dir);
  c.kjv();
  c.web();
  c.austen();
  c.moby_dick();
  c.devils_dictionary();
  c.jargon();
  c.sources();
  return c.report();
}

}  // namespace tessera::corpus
