// tessera-corpus UNPACKED_DIR OUT_DIR: the pd-en corpus from unpacked Debian packages
// (scripts/prepare_corpus.sh downloads and unpacks them, then runs this). A tool of its own, apart
// from the training library, so that Tessera itself carries no zlib and runs no subprocess for
// corpus building.
//
// Exit codes: 0 done, 1 an error (the message names the file), 2 bad arguments.
#include <fmt/format.h>
#include <fmt/ostream.h>

#include <iostream>
#include <string_view>

#include "corpus/corpus_pd_en.h"
#include "tessera/core/error.h"

int main(int argc, char** argv) {
  if (argc != 3 || std::string_view(argv[1]) == "--help" || std::string_view(argv[1]) == "-h") {
    fmt::print(stderr,
               "usage: tessera-corpus UNPACKED_DIR OUT_DIR\n"
               "  Converts the Debian packages unpacked under UNPACKED_DIR (dpkg-deb -x) into the pd-en\n"
               "  corpus: OUT_DIR/train/*.txt, OUT_DIR/validation/persuasion.txt, OUT_DIR/SOURCES.md.\n");
    return argc == 2 ? 0 : 2;
  }
  try {
    const tessera::corpus::CorpusReport r = tessera::corpus::build_pd_en(argv[1], argv[2]);
    for (const auto& f : r.files)
      fmt::print("  {:<48} {:>10} bytes  ({})\n", f.path.string(), f.bytes, f.package);
    fmt::print("tessera-corpus: pd-en written to {}: {:.1f} MB train, {:.1f} MB validation\n", argv[2],
               static_cast<double>(r.train_bytes) / 1e6, static_cast<double>(r.validation_bytes) / 1e6);
    return 0;
  } catch (const tessera::Error& e) {
    fmt::print(stderr, "tessera-corpus: error: {}\n", e.what());
    return 1;
  }
}
