// R serialisation and lazy-load databases (corpus_rdata.h), and the gzip/zlib helpers.
#include "corpus/corpus_rdata.h"

#include <zlib.h>

#include <bit>
#include <cstring>

#include "tessera/core/error.h"
#include "tessera/core/file.h"

namespace tessera::corpus {
namespace {

// Serialisation codes of the special objects and references (R's serialize.c).
enum : int {
  kRefSxp = 255,
  kNilValueSxp = 254,
  kGlobalEnvSxp = 253,
  kUnboundValueSxp = 252,
  kMissingArgSxp = 251,
  kBaseNamespaceSxp = 250,
  kNamespaceSxp = 249,
  kPackageSxp = 248,
  kPersistSxp = 247,
  kEmptyEnvSxp = 242,
  kBaseEnvSxp = 241,
  kAttrLangSxp = 240,
  kAttrListSxp = 239,
  kAltrepSxp = 238,
};
// SEXP types read structurally.
enum : int {
  kClosSxp = 3,
  kEnvSxp = 4,
  kPromSxp = 5,
  kLangSxp = 6,
  kSpecialSxp = 7,
  kBuiltinSxp = 8,
  kCplxSxp = 15,
  kDotSxp = 17,
  kExprSxp = 20,
  kExtPtrSxp = 22,
  kWeakRefSxp = 23,
  kRawSxp = 24,
  kS4Sxp = 25,
};
constexpr int kLatin1Mask = 1 << 2;  // gp bit of a CHARSXP in Latin-1
constexpr int kMaxDepth = 10000;     // nesting (not length) of the tree, to refuse hostile input

std::string latin1_to_utf8(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (c < 0x80) {
      out += static_cast<char>(c);
    } else {
      out += static_cast<char>(0xC0 | (c >> 6));
      out += static_cast<char>(0x80 | (c & 0x3F));
    }
  }
  return out;
}

class XdrReader {
 public:
  XdrReader(std::string_view bytes, std::string_view where) : b_(bytes), where_(where) {}

  RObject parse() {
    if (b_.size() < 2 || b_.substr(0, 2) != "X\n")
      fail(ErrorKind::kIo, "{}: not an R XDR serialisation (expected \"X\\n\" at offset 0)", where_);
    pos_ = 2;
    const int32_t version = i32();
    i32();  // writer's R version
    i32();  // minimal reader version
    if (version == 3) {
      const int32_t n = i32();
      bytes(static_cast<size_t>(n));  // native encoding name
    } else if (version != 2) {
      fail(ErrorKind::kIo, "{}: serialisation version {} at offset 2 (this reader knows 2 and 3)", where_,
           version);
    }
    return item(0);
  }

 private:
  [[noreturn]] void bad(std::string_view what) const {
    fail(ErrorKind::kIo, "{}: {} at offset {}", where_, what, pos_);
  }
  std::string_view bytes(size_t n) {
    if (n > b_.size() - pos_) bad("truncated serialisation");
    std::string_view s = b_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  int32_t i32() {
    uint32_t v;
    std::memcpy(&v, bytes(4).data(), 4);
    return static_cast<int32_t>(__builtin_bswap32(v));  // XDR is big-endian
  }
  double f64() {
    uint64_t v;
    std::memcpy(&v, bytes(8).data(), 8);
    return std::bit_cast<double>(__builtin_bswap64(v));
  }
  size_t length() {
    const int32_t n = i32();
    if (n >= 0) return static_cast<size_t>(n);
    if (n != -1) bad("negative vector length");
    const auto hi = static_cast<uint64_t>(static_cast<uint32_t>(i32()));
    const auto lo = static_cast<uint64_t>(static_cast<uint32_t>(i32()));
    const uint64_t len = (hi << 32) | lo;
    if (len > b_.size()) bad("vector length beyond the data");
    return static_cast<size_t>(len);
  }

  RObject item(int depth) {
    if (depth > kMaxDepth) bad("nesting too deep");
    const int32_t flags = i32();
    const int type = flags & 0xFF;
    switch (type) {
      case kNilValueSxp:
        return {};
      case kEmptyEnvSxp:
      case kBaseEnvSxp:
      case kGlobalEnvSxp:
      case kUnboundValueSxp:
      case kMissingArgSxp:
      case kBaseNamespaceSxp:
        return other();
      case kRefSxp:
        return reference(flags);
      case kPersistSxp:
      case kPackageSxp:
      case kNamespaceSxp:
        return named_string_vector(depth);
      case kRSymbol:
        return symbol(depth);
      case kEnvSxp:
        return environment(depth);
      case kRPairlist:
      case kLangSxp:
      case kClosSxp:
      case kPromSxp:
      case kDotSxp:
      case kAttrLangSxp:
      case kAttrListSxp:
        return pairlist(flags, depth);
      case kAltrepSxp:
        return altrep(depth);
      case kRChar:
        return chars(flags >> 12);  // a CHARSXP never carries attributes in a stream
      default:
        break;
    }
    RObject o = vector_or_other(type, depth);
    if (flags & (1 << 9)) set_attributes(o, item(depth + 1));
    return o;
  }

  static RObject other() {
    RObject o;
    o.type = kROther;
    return o;
  }
  RObject reference(int32_t flags) {
    int32_t index = flags >> 8;
    if (index == 0) index = i32();
    if (index < 1 || static_cast<size_t>(index) > refs_.size()) bad("reference to an unknown object");
    return refs_[static_cast<size_t>(index) - 1];
  }
  // PERSISTSXP, PACKAGESXP, NAMESPACESXP: a string vector naming the object; becomes a reference.
  RObject named_string_vector(int depth) {
    if (i32() != 0) bad("unexpected string vector header");
    RObject o = other();
    const size_t n = static_cast<size_t>(i32());
    for (size_t i = 0; i < n; ++i) o.items.push_back(item(depth + 1));
    refs_.push_back(o);
    return o;
  }
  RObject symbol(int depth) {
    RObject o;
    o.type = kRSymbol;
    o.strings = item(depth + 1).strings;
    refs_.push_back(o);
    return o;
  }
  RObject environment(int depth) {
    i32();  // locked
    RObject o = other();
    refs_.push_back(o);                           // registered first: the environment may refer to itself
    for (int k = 0; k < 4; ++k) item(depth + 1);  // enclosure, frame, hash table, attributes
    return o;
  }
  // ALTREP: info (class, package, type), state, attributes. The state holds the data in a form the
  // class defines; it stands in for the object, so strings inside are still found.
  RObject altrep(int depth) {
    item(depth + 1);
    RObject o = item(depth + 1);
    set_attributes(o, item(depth + 1));
    return o;
  }
  RObject chars(int levels) {
    RObject o;
    o.type = kRChar;
    const int32_t n = i32();
    if (n == -1) {
      o.strings.emplace_back();  // NA
    } else {
      std::string_view s = bytes(static_cast<size_t>(n));
      o.strings.push_back((levels & kLatin1Mask) ? latin1_to_utf8(s) : std::string(s));
    }
    return o;
  }

  // The payload of a vector (or of an object read only to step over it); attributes follow it.
  RObject vector_or_other(int type, int depth) {
    RObject o;
    switch (type) {
      case kRLogical:
      case kRInteger:
        o.type = type;
        o.ints.resize(length());
        for (int32_t& v : o.ints) v = i32();
        return o;
      case kRReal:
        o.type = kRReal;
        o.reals.resize(length());
        for (double& v : o.reals) v = f64();
        return o;
      case kRString: {
        o.type = kRString;
        const size_t n = length();
        o.strings.reserve(n);
        for (size_t i = 0; i < n; ++i) {
          RObject c = item(depth + 1);
          if (c.type != kRChar) bad("a string vector element that is not a string");
          o.strings.push_back(std::move(c.strings[0]));
        }
        return o;
      }
      case kRList:
      case kExprSxp: {
        o.type = kRList;
        const size_t n = length();
        for (size_t i = 0; i < n; ++i) o.items.push_back(item(depth + 1));
        return o;
      }
      case kCplxSxp:
        bytes(16 * length());
        return other();
      case kRawSxp:
        bytes(length());
        return other();
      case kSpecialSxp:
      case kBuiltinSxp:
        bytes(static_cast<size_t>(i32()));
        return other();
      case kExtPtrSxp:
        refs_.push_back(other());
        item(depth + 1);  // protected value
        item(depth + 1);  // tag
        return other();
      case kWeakRefSxp:
        refs_.push_back(other());
        return other();
      case kS4Sxp:
        return other();
      default:
        bad(fmt::format("unsupported object type {}", type));
    }
  }

  // Pairlist-like cells: [attributes] [tag] CAR CDR, with the CDR chain read iteratively.
  RObject pairlist(int32_t flags, int depth) {
    RObject o;
    o.type = (flags & 0xFF) == kRPairlist || (flags & 0xFF) == kAttrListSxp ? kRPairlist : kROther;
    RObject first_attr;
    bool first = true;
    for (;;) {
      const bool has_attr = flags & (1 << 9), has_tag = flags & (1 << 10);
      RObject attr = has_attr ? item(depth + 1) : RObject{};
      if (first) first_attr = std::move(attr);
      std::string tag;
      if (has_tag) {
        RObject t = item(depth + 1);
        if (!t.strings.empty()) tag = t.strings[0];
      }
      o.tags.push_back(std::move(tag));
      o.items.push_back(item(depth + 1));
      first = false;
      // The CDR: another cell of the same kind continues the list; anything else ends it.
      const size_t mark = pos_;
      flags = i32();
      const int next = flags & 0xFF;
      if (next == kRPairlist || next == kLangSxp || next == kAttrListSxp || next == kAttrLangSxp) continue;
      pos_ = mark;
      item(depth + 1);  // the terminating CDR (normally NULL)
      break;
    }
    set_attributes(o, first_attr);
    return o;
  }

  static void set_attributes(RObject& o, const RObject& attr) {
    if (attr.type != kRPairlist) return;
    o.attribute_names = attr.tags;
    o.attribute_values = attr.items;
  }

  std::string_view b_;
  std::string where_;
  size_t pos_ = 0;
  std::vector<RObject> refs_;
};

}  // namespace

const RObject* RObject::attribute(std::string_view name) const {
  for (size_t i = 0; i < attribute_names.size(); ++i)
    if (attribute_names[i] == name) return &attribute_values[i];
  return nullptr;
}

RObject r_unserialize(std::string_view bytes, std::string_view where) {
  return XdrReader(bytes, where).parse();
}

std::string gunzip(std::string_view data, std::string_view where) {
  z_stream z{};
  if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) fail(ErrorKind::kRuntime, "zlib: inflateInit2 failed");
  std::string out;
  char buf[1 << 16];
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    z.next_out = reinterpret_cast<Bytef*>(buf);
    z.avail_out = sizeof(buf);
    rc = inflate(&z, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END) {
      const uint64_t at = z.total_in;
      inflateEnd(&z);
      fail(ErrorKind::kIo, "{}: corrupt or truncated gzip data near compressed offset {}", where, at);
    }
    out.append(buf, sizeof(buf) - z.avail_out);
    if (rc == Z_STREAM_END && z.avail_in > 0) {  // concatenated gzip members continue
      inflateReset(&z);
      rc = Z_OK;
    }
  }
  inflateEnd(&z);
  return out;
}

std::string gunzip_file(const std::filesystem::path& path) {
  return gunzip(read_file(path), path.string());
}

std::string zlib_inflate(std::string_view data, uint64_t size, std::string_view where) {
  std::string out(size, '\0');
  uLongf n = static_cast<uLongf>(size);
  const int rc = uncompress(reinterpret_cast<Bytef*>(out.data()), &n,
                            reinterpret_cast<const Bytef*>(data.data()), static_cast<uLong>(data.size()));
  if (rc != Z_OK || n != size) fail(ErrorKind::kIo, "{}: corrupt zlib record (zlib error {})", where, rc);
  return out;
}

RLazyLoadDb::RLazyLoadDb(const std::filesystem::path& prefix) : prefix_(prefix) {
  std::filesystem::path rdx = prefix;
  rdx += ".rdx";
  const RObject index = r_unserialize(gunzip_file(rdx), rdx.string());
  const RObject* vars = nullptr;
  const RObject* compressed = nullptr;
  if (const RObject* names = index.attribute("names"); names && index.type == kRList)
    for (size_t i = 0; i < names->strings.size() && i < index.items.size(); ++i) {
      if (names->strings[i] == "variables") vars = &index.items[i];
      if (names->strings[i] == "compressed") compressed = &index.items[i];
    }
  if (!vars)
    fail(ErrorKind::kIo, "'{}' is not a lazy-load index: it has no \"variables\" list", rdx.string());
  if (compressed && !compressed->ints.empty() && compressed->ints[0] != 1)
    fail(ErrorKind::kIo, "'{}': compression type {} (bzip2 or xz); this reader takes zlib (compress = TRUE)",
         rdx.string(), compressed->ints[0]);
  const RObject* names = vars->attribute("names");
  for (size_t i = 0; names && i < vars->items.size() && i < names->strings.size(); ++i) {
    const RObject& v = vars->items[i];
    if (v.ints.size() != 2 || v.ints[0] < 0 || v.ints[1] < 4)
      fail(ErrorKind::kIo, "'{}': variable {} has no (offset, length) pair", rdx.string(), names->strings[i]);
    index_[names->strings[i]] = {static_cast<uint64_t>(v.ints[0]), static_cast<uint64_t>(v.ints[1])};
  }
}

std::vector<std::string> RLazyLoadDb::names() const {
  std::vector<std::string> out;
  for (const auto& [name, where] : index_) out.push_back(name);
  return out;
}

RObject RLazyLoadDb::get(const std::string& name) const {
  auto it = index_.find(name);
  std::filesystem::path rdb = prefix_;
  rdb += ".rdb";
  if (it == index_.end()) fail(ErrorKind::kIo, "'{}' has no variable {}", rdb.string(), name);
  const auto [offset, length] = it->second;
  MappedFile f(rdb);
  if (offset + length > f.size())
    fail(ErrorKind::kIo, "'{}' is truncated: variable {} needs bytes {}..{} of {}", rdb.string(), name,
         offset, offset + length, f.size());
  const uint8_t* p = f.data() + offset;
  const uint64_t size = (uint64_t{p[0]} << 24) | (uint64_t{p[1]} << 16) | (uint64_t{p[2]} << 8) | p[3];
  const std::string where = fmt::format("{} (variable {} at offset {})", rdb.string(), name, offset);
  const std::string bytes =
      zlib_inflate(std::string_view(reinterpret_cast<const char*>(p + 4), length - 4), size, where);
  return r_unserialize(bytes, where);
}

}  // namespace tessera::corpus
