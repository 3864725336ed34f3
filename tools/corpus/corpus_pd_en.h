// The pd-en corpus: public-domain English prose from Debian packages, converted to plain text.
//
//   package                    text                               output (under out_dir)
//   bible-kjv-text + bible-kjv King James Bible                   train/kjv-NN-<book>.txt (66 files)
//   sword-text-web             World English Bible + Deuterocanon train/web-NN-<book>.txt (81 files)
//   r-cran-janeaustenr         Austen's six novels                train/austen-<novel>.txt (5 files),
//                                                                 validation/persuasion.txt
//   r-cran-tokenizers          Melville, Moby-Dick                train/moby-dick.txt
//   dict-devil                 Bierce, The Devil's Dictionary     train/devils-dictionary.txt
//   jargon-text                The Jargon File 4.4.7              train/jargon-file.txt
// plus SOURCES.md: each output, its package and version, and its licence. Every text is in the
// public domain (the R packages' code is MIT; the texts they carry are public domain).
//
// `unpacked_dir` holds the packages' files as `dpkg-deb -x` lays them out (scripts/
// prepare_corpus.sh downloads and unpacks them; nothing is installed on the system). Conversion:
//   - KJV: the package's own `bible` program, run from the unpacked tree (`usr/bin/bible -p usr/lib
//     -f Gen1:1-Rev22:21`), prints one verse a line ("Ge1:1 In the beginning..."); the reference is
//     dropped, chapters are separated by a blank line and a heading, one file per book;
//   - WEB: the SWORD zText module (corpus_sword.h), one verse a line, footnotes and markup dropped;
//   - Austen and Moby-Dick: the R lazy-load databases (corpus_rdata.h); Moby-Dick is cut between
//     Project Gutenberg's "*** START OF" and "*** END OF" lines, and line ends become \n;
//   - Devil's Dictionary: the dictd database (gzip), without dictd's own 00-database-* entries;
//   - Jargon File: the gzipped text as it is.
// Versions come from unpacked_dir/PACKAGES ("<package> <version>" lines) when the script wrote it.
// Output files are written atomically, so running it again replaces them.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace tessera::corpus {

struct CorpusFile {
  std::filesystem::path path;  // relative to out_dir
  uint64_t bytes = 0;
  std::string package;
};

struct CorpusReport {
  std::vector<CorpusFile> files;
  uint64_t train_bytes = 0, validation_bytes = 0;
};

// Converts the unpacked packages under unpacked_dir into out_dir. Throws kIo naming the missing or
// malformed file (or the `bible` program's failure).
CorpusReport build_pd_en(const std::string& unpacked_dir, const std::string& out_dir);

}  // namespace tessera::corpus
