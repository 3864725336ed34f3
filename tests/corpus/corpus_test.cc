// Corpus conversion: the R serialisation reader on streams written here byte by byte (XDR), a
// lazy-load database built the way R lays it out, the SWORD zText reader on a module written here,
// build_pd_en on a miniature unpacked tree (a stand-in `bible` program, a zText module, R databases,
// a dictd file, a gzipped text), and, when TESSERA_PD_EN_UNPACKED
// names the real unpacked packages, the real conversion (with TESSERA_PD_EN_OUT it writes there).
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "corpus/corpus_pd_en.h"
#include "corpus/corpus_rdata.h"
#include "corpus/corpus_sword.h"
#include "data/data_test_util.h"
#include "tessera/core/error.h"
#include "tessera/core/file.h"

namespace tessera::corpus {
namespace {

namespace fs = std::filesystem;

using data::testing::TempDir;

// Writes R's XDR serialisation (R Internals, "Serialization formats"): big-endian ints, each item a
// flags word (type | has-attribute 1<<9 | has-tag 1<<10 | gp levels << 12) and its payload.
class RWriter {
 public:
  explicit RWriter(int version = 2) {
    out_ = "X\n";
    i32(version);
    i32(0x040201);  // written by R 4.2.1
    i32(0x020300);  // readable by R >= 2.3.0
    if (version == 3) {
      i32(5);
      out_ += "UTF-8";
    }
  }
  RWriter& i32(int32_t v) {
    for (int s = 24; s >= 0; s -= 8) out_ += static_cast<char>((static_cast<uint32_t>(v) >> s) & 0xFF);
    return *this;
  }
  RWriter& chars(std::string_view s, int levels = 0x40) {  // 0x40: ASCII; 4: Latin-1
    i32(9 | (levels << 12)).i32(static_cast<int32_t>(s.size()));
    out_ += s;
    return *this;
  }
  RWriter& na_string() { return i32(9).i32(-1); }
  RWriter& strings_header(size_t n, bool attr = false) {
    return i32(16 | (attr ? 1 << 9 : 0)).i32(static_cast<int32_t>(n));
  }
  RWriter& strings(const std::vector<std::string>& v, bool attr = false) {
    strings_header(v.size(), attr);
    for (const std::string& s : v) chars(s);
    return *this;
  }
  RWriter& ints(const std::vector<int32_t>& v) {
    i32(13).i32(static_cast<int32_t>(v.size()));
    for (int32_t x : v) i32(x);
    return *this;
  }
  RWriter& logical(bool b) { return i32(10).i32(1).i32(b ? 1 : 0); }
  RWriter& list_header(size_t n, bool attr) {
    return i32(19 | (attr ? 1 << 9 : 0)).i32(static_cast<int32_t>(n));
  }
  // The attribute pairlist list(names = <names>) that follows a vector with has-attribute set. The
  // symbol `names` is written in full the first time and as a reference (REFSXP) afterwards.
  RWriter& names_attribute(const std::vector<std::string>& names) {
    i32(2 | (1 << 10));  // LISTSXP with a tag
    if (names_ref_ == 0) {
      i32(1).chars("names");  // SYMSXP
      names_ref_ = ++refs_;
    } else {
      i32((names_ref_ << 8) | 255);
    }
    strings(names);
    return i32(254);  // CDR: NULL
  }
  const std::string& bytes() const { return out_; }

 private:
  std::string out_;
  int refs_ = 0, names_ref_ = 0;
};

std::string zlib_compress(const std::string& s) {
  uLongf n = compressBound(static_cast<uLong>(s.size()));
  std::string out(n, '\0');
  EXPECT_EQ(compress2(reinterpret_cast<Bytef*>(out.data()), &n, reinterpret_cast<const Bytef*>(s.data()),
                      static_cast<uLong>(s.size()), 6),
            Z_OK);
  out.resize(n);
  return out;
}

std::string gzip(const std::string& s) {
  z_stream z{};
  deflateInit2(&z, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&z, static_cast<uLong>(s.size())) + 32, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(s.data()));
  z.avail_in = static_cast<uInt>(s.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// A lazy-load database of character vectors at `prefix` (.rdb records and the gzipped .rdx index).
void write_lazyload(const fs::path& prefix,
                    const std::vector<std::pair<std::string, std::vector<std::string>>>& vars) {
  std::string rdb;
  std::vector<std::pair<int32_t, int32_t>> where;
  for (const auto& [name, lines] : vars) {
    RWriter w(3);
    w.strings(lines);
    const std::string z = zlib_compress(w.bytes());
    const auto n = static_cast<uint32_t>(w.bytes().size());
    std::string rec = {static_cast<char>(n >> 24), static_cast<char>(n >> 16), static_cast<char>(n >> 8),
                       static_cast<char>(n)};
    where.emplace_back(static_cast<int32_t>(rdb.size()), static_cast<int32_t>(rec.size() + z.size()));
    rdb += rec + z;
  }
  RWriter idx(3);
  idx.list_header(3, true);
  idx.list_header(vars.size(), true);
  for (const auto& [off, len] : where) idx.ints({off, len});
  std::vector<std::string> names;
  for (const auto& v : vars) names.push_back(v.first);
  idx.names_attribute(names);
  idx.list_header(0, false);  // references
  idx.logical(true);          // compressed
  idx.names_attribute({"variables", "references", "compressed"});
  fs::create_directories(prefix.parent_path());
  write_file_atomically(fs::path(prefix.string() + ".rdb"), rdb);
  write_file_atomically(fs::path(prefix.string() + ".rdx"), gzip(idx.bytes()));
}

TEST(RData, ReadsVectorsAttributesReferencesAndEncodings) {
  RWriter w(2);
  w.list_header(2, true);
  w.strings_header(4).chars("plain").chars("caf\xE9", 4).na_string().chars("");  // Latin-1 e-acute
  w.list_header(1, true).ints({7, -8}).names_attribute({"inner"});
  w.names_attribute({"text", "nested"});  // `names` is a reference this time
  const RObject o = r_unserialize(w.bytes(), "test");
  ASSERT_EQ(o.type, kRList);
  ASSERT_EQ(o.items.size(), 2u);
  EXPECT_EQ(o.items[0].strings, (std::vector<std::string>{"plain", "caf\xC3\xA9", "", ""}));
  EXPECT_EQ(o.items[1].items[0].ints, (std::vector<int32_t>{7, -8}));
  ASSERT_NE(o.items[1].attribute("names"), nullptr);
  EXPECT_EQ(o.items[1].attribute("names")->strings, std::vector<std::string>{"inner"});
  EXPECT_EQ(o.attribute("names")->strings, (std::vector<std::string>{"text", "nested"}));
}

TEST(RData, MalformedStreamsNameTheOffset) {
  const std::string good = RWriter(2).strings({"abc"}).bytes();
  for (size_t cut : {size_t{1}, size_t{10}, good.size() - 1}) {
    try {
      r_unserialize(std::string_view(good).substr(0, cut), "cut");
      ADD_FAILURE() << "expected an error at " << cut;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kIo);
      EXPECT_NE(std::string(e.what()).find("offset"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(r_unserialize(RWriter(2).i32(21).bytes(), "bytecode"), Error);  // BCODESXP: unsupported
}

TEST(RData, LazyLoadDatabase) {
  TempDir dir("rdata_db");
  write_lazyload(dir.path() / "Rdata", {{"first", {"a", "b"}}, {"second", {"c"}}});
  RLazyLoadDb db(dir.path() / "Rdata");
  EXPECT_EQ(db.names(), (std::vector<std::string>{"first", "second"}));
  EXPECT_EQ(db.get("second").strings, std::vector<std::string>{"c"});
  EXPECT_EQ(db.get("first").strings, (std::vector<std::string>{"a", "b"}));
  EXPECT_THROW(db.get("third"), Error);
  fs::resize_file(dir.path() / "Rdata.rdb", 10);
  EXPECT_THROW(db.get("second"), Error);
}

// A zText module: `entries` are the OSIS fragments in versification order, stored two per block.
void write_ztext(const fs::path& dir, std::string_view testament, const std::vector<std::string>& entries) {
  auto le = [](std::string& s, uint32_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) s += static_cast<char>((v >> (8 * i)) & 0xFF);
  };
  std::string bzs, bzz, bzv;
  for (size_t b = 0; b < entries.size(); b += 2) {
    std::string block;
    for (size_t e = b; e < std::min(b + 2, entries.size()); ++e) {
      le(bzv, static_cast<uint32_t>(b / 2), 4);
      le(bzv, static_cast<uint32_t>(block.size()), 4);
      le(bzv, static_cast<uint32_t>(entries[e].size()), 2);
      block += entries[e];
    }
    const std::string z = zlib_compress(block);
    le(bzs, static_cast<uint32_t>(bzz.size()), 4);
    le(bzs, static_cast<uint32_t>(z.size()), 4);
    le(bzs, static_cast<uint32_t>(block.size()), 4);
    bzz += z;
  }
  fs::create_directories(dir);
  const std::string t(testament);
  write_file_atomically(dir / (t + ".bzs"), bzs);
  write_file_atomically(dir / (t + ".bzz"), bzz);
  write_file_atomically(dir / (t + ".bzv"), bzv);
}

// Two books in the shapes the World English Bible module has: a preface outside any book, notes
// and non-canonical titles to drop, a canonical title to keep, a book whose div is missing (only its
// chapter says where it starts), and a glossary after the last chapter's end.
const std::vector<std::string> kZText = {
    "",  // an empty entry (module heading)
    R"(<div sID="p1" type="front"/><milestone n="Preface" type="x-usfm-toc2"/> Preface text.)",
    R"(<div osisID="Gen" sID="b1" type="book"/><milestone n="Genesis" type="x-usfm-toc2"/>)"
    R"(<title type="main">The First Book</title>)",
    R"(<chapter n="1" osisID="Gen.1" sID="Gen.1"/>)",
    R"(<w lemma="x">In</w> <w>the</w> beginning, <w>God</w><note placement="foot"><reference>1:1 </reference>)"
    R"(A note.</note><w>created</w> it.)",
    R"(<title canonical="true" type="psalm">A Psalm.</title> The earth &amp; <l>the</l><lb/>sky<note>n</note>.)",
    R"(<chapter eID="Gen.1"/><div eID="b1" osisID="Gen" type="book"/><chapter n="1" osisID="Hos.1" sID="Hos.1"/>)",
    R"(Hosea's word. <chapter eID="Hos.1"/> <div sID="g" type="glossary"/>)"
    R"(<milestone n="Glossary" type="x-usfm-toc2"/> Abba means father.)",
};

TEST(Sword, ReadsBooksChaptersAndVerses) {
  TempDir dir("sword");
  write_ztext(dir.path(), "ot", kZText);
  const std::vector<SwordBook> books = read_sword_ztext(dir.path());
  ASSERT_EQ(books.size(), 2u);
  EXPECT_EQ(books[0].osis_id, "Gen");
  EXPECT_EQ(books[0].name, "Genesis");
  ASSERT_EQ(books[0].chapters.size(), 1u);
  EXPECT_EQ(books[0].chapters[0].number, "1");
  EXPECT_EQ(books[0].chapters[0].verses,
            (std::vector<std::string>{"In the beginning, God created it.", "A Psalm. The earth & the sky."}));
  EXPECT_EQ(books[1].osis_id, "Hos");
  EXPECT_EQ(books[1].name, "Hos");  // no table of contents entry: the OSIS id
  EXPECT_EQ(books[1].chapters[0].verses, std::vector<std::string>{"Hosea's word."});
  EXPECT_THROW(read_sword_ztext(dir.path() / "none"), Error);
  fs::resize_file(dir.path() / "ot.bzz", 20);
  EXPECT_THROW(read_sword_ztext(dir.path()), Error);
}

// A miniature of the unpacked packages: two books of verses, six tiny novels, Moby-Dick with its
// Gutenberg header and footer, a dictd database, a gzipped Jargon File.
void write_mini_tree(const fs::path& root) {
  fs::create_directories(root / "usr/bin");
  const fs::path bible = root / "usr/bin/bible";
  std::ofstream(bible) << "#!/bin/sh\n"
                          "[ \"$1\" = -p ] && [ -d \"$2\" ] || exit 2\n"
                          "printf 'Ge1:1 In the beginning.\\nGe1:2 And the earth.\\nGe2:1 Thus.\\n"
                          "1Sa1:1 Now there was a man.\\n'\n";
  fs::permissions(bible, fs::perms::owner_all);
  fs::create_directories(root / "usr/lib");
  write_ztext(root / "usr/share/sword/modules/texts/ztext/engWEB2015eb", "ot", kZText);
  const std::string austen = root / "usr/lib/R/site-library/janeaustenr/data/Rdata";
  std::vector<std::pair<std::string, std::vector<std::string>>> novels;
  for (const char* n :
       {"emma", "mansfieldpark", "northangerabbey", "persuasion", "prideprejudice", "sensesensibility"})
    novels.push_back({n, {"", fmt::format("{} begins", n), "", "and ends.", ""}});
  write_lazyload(austen, novels);
  write_lazyload(
      root / "usr/lib/R/site-library/tokenizers/data/Rdata",
      {{"mobydick",
        {"\xEF\xBB\xBFThe Project Gutenberg EBook\r\n*** START OF THIS EBOOK ***\r\n\r\nCall me Ishmael.\r\n"
         "End of Project Gutenberg's Moby Dick\r\n*** END OF THIS EBOOK ***\r\nlicence"}}});
  fs::create_directories(root / "usr/share/dictd");
  const std::string dict =
      "00-database-dictfmt-1.13.0\nhttp://example/devils.txt\nPREFACE\nABILITY, n.  Equipment.\n\n "
      "alphabet\n";
  write_file_atomically(root / "usr/share/dictd/devil.dict.dz", gzip(dict));
  // headword, base64 offset, base64 length: dictfmt 0+27, url 27+26, info 53+8, ability 61+25,
  // alphabet 86+10.
  std::ofstream(root / "usr/share/dictd/devil.index")
      << "00databasedictfmt1130\tA\tb\n00databaseurl\tb\ta\n"
      << "00databaseinfo\t1\tI\nability\t9\tZ\n00databasealphabet\tBW\tK\n";
  fs::create_directories(root / "usr/share/doc/jargon-text");
  write_file_atomically(root / "usr/share/doc/jargon-text/jargon.txt.gz",
                        gzip("The Jargon File\n\nhacker: n.\n"));
  std::ofstream(root / "PACKAGES") << "bible-kjv-text 4.38\nr-cran-janeaustenr 1.0.0-1\n";
}

TEST(Corpus, BuildsPdEnFromAMiniatureTree) {
  TempDir dir("corpus_mini");
  write_mini_tree(dir.path() / "unpacked");
  const fs::path out = dir.path() / "pd-en";
  const CorpusReport r = build_pd_en((dir.path() / "unpacked").string(), out.string());
  EXPECT_EQ(read_file(out / "train/kjv-01-genesis.txt"),
            "Genesis\n\nChapter 1\n\nIn the beginning.\nAnd the earth.\n\nChapter 2\n\nThus.\n");
  EXPECT_EQ(read_file(out / "train/kjv-02-exodus.txt"), "Exodus\n\nChapter 1\n\nNow there was a man.\n");
  EXPECT_EQ(read_file(out / "train/web-01-genesis.txt"),
            "Genesis\n\nChapter 1\n\nIn the beginning, God created it.\nA Psalm. The earth & the sky.\n");
  EXPECT_EQ(read_file(out / "train/web-02-hosea.txt"), "Hosea\n\nChapter 1\n\nHosea's word.\n");
  EXPECT_EQ(read_file(out / "train/austen-emma.txt"), "emma begins\n\nand ends.\n");
  EXPECT_EQ(read_file(out / "validation/persuasion.txt"), "persuasion begins\n\nand ends.\n");
  EXPECT_FALSE(fs::exists(out / "train/austen-persuasion.txt"));
  EXPECT_EQ(read_file(out / "train/moby-dick.txt"), "Call me Ishmael.\n");
  EXPECT_EQ(read_file(out / "train/devils-dictionary.txt"), "PREFACE\nABILITY, n.  Equipment.\n");
  EXPECT_EQ(read_file(out / "train/jargon-file.txt"), "The Jargon File\n\nhacker: n.\n");
  const std::string sources = read_file(out / "SOURCES.md");
  EXPECT_NE(sources.find("| train/kjv-NN-<book>.txt | 2 | "), std::string::npos) << sources;
  EXPECT_NE(sources.find("| bible-kjv-text | 4.38 |"), std::string::npos);
  EXPECT_NE(sources.find("| train/austen-emma.txt, train/austen-mansfield-park.txt, "), std::string::npos);
  EXPECT_NE(sources.find("| dict-devil | unknown |"), std::string::npos);
  EXPECT_EQ(r.files.size(), 2u + 2u + 6u + 3u);
  uint64_t train = 0;
  for (const CorpusFile& f : r.files)
    if (f.path.begin()->string() == "train") train += f.bytes;
  EXPECT_EQ(train, r.train_bytes);
  // Running again gives the same files.
  build_pd_en((dir.path() / "unpacked").string(), out.string());
  EXPECT_EQ(read_file(out / "train/moby-dick.txt"), "Call me Ishmael.\n");
}

TEST(Corpus, MissingPackagesAreNamed) {
  TempDir dir("corpus_missing");
  try {
    build_pd_en((dir.path() / "nothing").string(), (dir.path() / "out").string());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    EXPECT_NE(std::string(e.what()).find("bible"), std::string::npos) << e.what();
  }
}

// The real packages, unpacked by scripts/prepare_corpus.sh.
TEST(Corpus, RealPdEn) {
  const char* unpacked = std::getenv("TESSERA_PD_EN_UNPACKED");
  if (!unpacked || !fs::is_directory(unpacked))
    GTEST_SKIP() << "set TESSERA_PD_EN_UNPACKED to the folder scripts/prepare_corpus.sh unpacks the Debian "
                    "packages into (build/pd-en-debs/unpacked) to convert the real corpus";
  const char* out_env = std::getenv("TESSERA_PD_EN_OUT");
  TempDir tmp("corpus_real");
  const fs::path out = out_env ? fs::path(out_env) : tmp.path() / "pd-en";
  const CorpusReport r = build_pd_en(unpacked, out.string());
  EXPECT_EQ(r.files.size(), 66u + 81u + 6u + 3u);
  EXPECT_TRUE(read_file(out / "train/kjv-01-genesis.txt")
                  .starts_with("Genesis\n\nChapter 1\n\nIn the beginning God created "));
  EXPECT_NE(read_file(out / "train/kjv-66-revelation.txt")
                .find("The grace of our Lord Jesus Christ be with you all. Amen.\n"),
            std::string::npos);
  const std::string moby = read_file(out / "train/moby-dick.txt");
  EXPECT_NE(moby.find("Call me Ishmael."), std::string::npos);
  EXPECT_EQ(moby.find("*** START OF"), std::string::npos);
  EXPECT_EQ(moby.find("End of Project Gutenberg"), std::string::npos);
  EXPECT_NE(read_file(out / "validation/persuasion.txt").find("Sir Walter Elliot"), std::string::npos);
  EXPECT_NE(read_file(out / "train/devils-dictionary.txt").find("ABILITY, n."), std::string::npos);
  EXPECT_EQ(read_file(out / "train/devils-dictionary.txt").find("00-database"), std::string::npos);
  const std::string web = read_file(out / "train/web-01-genesis.txt");
  EXPECT_TRUE(
      web.starts_with("Genesis\n\nChapter 1\n\nIn the beginning, God created the heavens and the earth.\n"));
  EXPECT_EQ(web.find('<'), std::string::npos);
  EXPECT_EQ(read_file(out / "train/web-81-revelation.txt").find("Glossary"), std::string::npos);
  // About 16 MB of training text (WEB 5.0, KJV 4.2, Austen 3.6, Jargon 1.7, Moby-Dick 1.2, Bierce 0.4).
  EXPECT_GT(r.train_bytes, 15'000'000u);
  EXPECT_LT(r.train_bytes, 17'000'000u);
  EXPECT_GT(r.validation_bytes, 400'000u);
  std::cout << fmt::format("pd-en: {} files, {} bytes of training text, {} bytes of validation text in {}\n",
                           r.files.size(), r.train_bytes, r.validation_bytes, out.string());
}

}  // namespace
}  // namespace tessera::corpus
