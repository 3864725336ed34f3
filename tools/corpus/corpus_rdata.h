// R data files, read without R: the serialisation format (XDR, versions 2 and 3) and the lazy-load
// databases that R packages ship their data sets in (data/Rdata.rdx + data/Rdata.rdb). Tessera
// uses it to take public-domain books out of Debian's r-cran-* packages (corpus_pd_en.h).
//
// A lazy-load database: the .rdx file is a gzip-compressed serialisation of
//   list(variables = list(<name> = c(offset, length), ...), references = list(...), compressed = TRUE)
// and each variable is a record of the .rdb file at [offset, offset + length): a 4-byte big-endian
// uncompressed length, then a zlib stream of the variable's serialisation.
//
// The reader builds a plain tree (RObject) of the vector, pairlist and attribute types data sets
// use. Strings are returned as UTF-8 (Latin-1 strings are converted; NA strings read as empty).
// Left out: byte code, environments' contents beyond reading past them, and bzip2/xz-compressed
// databases (R's compress = 2 or 3), which are refused with a message saying so.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::corpus {

// SEXP types (R Internals, "Serialization formats").
enum RType : int {
  kRNil = 0,
  kRSymbol = 1,
  kRPairlist = 2,
  kRChar = 9,
  kRLogical = 10,
  kRInteger = 13,
  kRReal = 14,
  kRString = 16,
  kRList = 19,
  kROther = 255,  // anything the reader skips over (environments, closures, ...)
};

struct RObject {
  int type = kRNil;
  std::vector<std::string> strings;  // kRString elements; kRChar / kRSymbol: the one string
  std::vector<int32_t> ints;         // kRInteger, kRLogical
  std::vector<double> reals;         // kRReal
  std::vector<RObject> items;        // kRList elements; kRPairlist values
  std::vector<std::string> tags;     // kRPairlist: each value's tag ("" when none)
  std::vector<std::string> attribute_names;
  std::vector<RObject> attribute_values;

  // The attribute called `name`, or nullptr.
  const RObject* attribute(std::string_view name) const;
};

// Parses one serialisation ("X\n" header, XDR). `where` names the source in error messages. Throws
// kIo for a malformed or unsupported stream, with the byte offset.
RObject r_unserialize(std::string_view bytes, std::string_view where);

// A lazy-load database given by its path without extension (".../data/Rdata").
class RLazyLoadDb {
 public:
  explicit RLazyLoadDb(const std::filesystem::path& prefix);
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return index_.count(name) > 0; }
  // Reads and parses one variable. Throws kIo.
  RObject get(const std::string& name) const;

 private:
  std::filesystem::path prefix_;
  std::map<std::string, std::pair<uint64_t, uint64_t>> index_;  // name -> (offset, length) in .rdb
};

// Decompresses a gzip (or dictzip) file or buffer; a zlib stream of known size. Throw kIo.
std::string gunzip_file(const std::filesystem::path& path);
std::string gunzip(std::string_view data, std::string_view where);
std::string zlib_inflate(std::string_view data, uint64_t size, std::string_view where);

}  // namespace tessera::corpus
