#include "tessera/core/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "tessera/core/error.h"
#include "tessera/core/file.h"

namespace tessera {

namespace {

const char* st_dtype_name(DType d) {
  switch (d) {
    case DType::kF32:
      return "F32";
    case DType::kBF16:
      return "BF16";
    case DType::kI32:
      return "I32";
    case DType::kI64:
      return "I64";
    case DType::kU8:
      return "U8";
  }
  return "?";
}

bool st_dtype(const std::string& s, DType* out) {
  if (s == "F32")
    *out = DType::kF32;
  else if (s == "BF16")
    *out = DType::kBF16;
  else if (s == "I32")
    *out = DType::kI32;
  else if (s == "I64")
    *out = DType::kI64;
  else if (s == "U8")
    *out = DType::kU8;
  else
    return false;
  return true;
}

}  // namespace

// A function-try-block: a header entry of the wrong JSON type (a shape of strings, offsets missing)
// throws from nlohmann, which becomes kIo naming the file.
SafetensorsFile::SafetensorsFile(const std::string& path) try : path_(path) {
  int fd = open_regular_file(path, "safetensors file");
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    ::close(fd);
    fail(ErrorKind::kIo, "{}: cannot stat: {}", path, std::strerror(errno));
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ < 8) {
    ::close(fd);
    fail(ErrorKind::kIo, "{}: truncated: {} bytes, shorter than the 8-byte header length", path, size_);
  }
  map_ = mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    fail(ErrorKind::kIo, "{}: cannot map: {}", path, std::strerror(errno));
  }
  // The destructor does not run when the constructor throws: the mapping is released here then.
  struct Unmap {
    void*& map;
    size_t size;
    bool armed = true;
    ~Unmap() {
      if (armed && map) munmap(map, size), map = nullptr;
    }
  } unmap{map_, size_};
  const auto* bytes = static_cast<const uint8_t*>(map_);
  uint64_t n = 0;
  std::memcpy(&n, bytes, 8);
  if (n > size_ - 8)
    fail(ErrorKind::kIo, "{}: header length {} at offset 0 runs past the end of the file ({} bytes)", path, n,
         size_);
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes + 8, bytes + 8 + n);
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorKind::kIo, "{}: the JSON header (bytes 8..{}) does not parse: {}", path, 8 + n, e.what());
  }
  const size_t data_begin = 8 + n, data_size = size_ - data_begin;
  struct Span {
    uint64_t begin, end;
    std::string name;
  };
  std::vector<Span> spans;  // every tensor's bytes, to refuse two that share some
  for (auto& [name, e] : header.items()) {
    if (name == "__metadata__") {
      if (!e.is_object()) fail(ErrorKind::kIo, "{}: __metadata__ is {}; expected an object", path, e.dump());
      for (auto& [k, v] : e.items())
        if (v.is_string()) metadata_[k] = v.get<std::string>();
      continue;
    }
    DType dt;
    if (!e.contains("dtype") || !e["dtype"].is_string() || !st_dtype(e["dtype"].get<std::string>(), &dt))
      fail(ErrorKind::kIo,
           "{}: tensor '{}' has an unsupported or missing dtype (Tessera reads F32, BF16, I32, I64, U8)",
           path, name);
    if (!e.at("shape").is_array() || e["shape"].size() > static_cast<size_t>(kMaxDims))
      fail(ErrorKind::kIo, "{}: tensor '{}' has shape {}; expected a list of at most {} sizes", path, name,
           e["shape"].dump(), kMaxDims);
    Shape shape = Shape::of_rank(static_cast<int>(e["shape"].size()));
    int64_t elements = 1, bytes_needed = 0;  // checked: a product that wraps would pass the size check below
    for (size_t i = 0; i < e["shape"].size(); ++i) {
      // Only JSON integers: nlohmann converts a float by a cast, undefined for 1e300.
      const int64_t dim = e["shape"][i].is_number_integer() ? e["shape"][i].get<int64_t>() : -1;
      if (dim < 0 || __builtin_mul_overflow(elements, dim, &elements) ||
          __builtin_mul_overflow(elements, static_cast<int64_t>(dtype_size(dt)), &bytes_needed))
        fail(ErrorKind::kIo, "{}: tensor '{}' has shape {}, which is negative or too large", path, name,
             e["shape"].dump());
      shape[static_cast<int>(i)] = dim;
    }
    auto off = e.at("data_offsets");
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      fail(ErrorKind::kIo, "{}: tensor '{}' has data_offsets {}; expected [begin, end]", path, name,
           off.dump());
    uint64_t b = off.at(0).get<uint64_t>(), en = off.at(1).get<uint64_t>();
    uint64_t want = static_cast<uint64_t>(shape.numel()) * dtype_size(dt);
    if (b > en || en > data_size)
      fail(ErrorKind::kIo,
           "{}: tensor '{}' spans bytes [{}, {}) of the data section, which has {} (truncated file?)", path,
           name, data_begin + b, data_begin + en, data_size);
    if (en - b != want)
      fail(ErrorKind::kIo, "{}: tensor '{}' has {} bytes at offset {} but its shape {} x {} needs {}", path,
           name, en - b, data_begin + b, shape.str(), dtype_name(dt), want);
    if (en > b) spans.push_back({b, en, name});
    entries_.emplace(name, Tensor(const_cast<uint8_t*>(bytes + data_begin + b), shape, dt));
  }
  // Tensors own disjoint bytes: a crafted or hand-edited file whose tensors overlap would make
  // writes through one visible in another (a restored parameter aliasing its optimizer moment).
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < spans.size(); ++i)
    if (spans[i].begin < spans[i - 1].end)
      fail(ErrorKind::kIo,
           "{}: tensors '{}' (bytes [{}, {})) and '{}' (bytes [{}, {})) overlap; each tensor needs bytes of "
           "its own",
           path, spans[i - 1].name, data_begin + spans[i - 1].begin, data_begin + spans[i - 1].end,
           spans[i].name, data_begin + spans[i].begin, data_begin + spans[i].end);
  unmap.armed = false;  // opened: the destructor unmaps from now on
} catch (const nlohmann::json::exception& e) {
  fail(ErrorKind::kIo, "{}: malformed safetensors header: {}", path, e.what());
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) munmap(map_, size_);
}

Tensor SafetensorsFile::get(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) fail(ErrorKind::kIo, "{}: no tensor named '{}'", path_, name);
  return it->second;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  for (auto& [k, v] : entries_) out.push_back(k);
  return out;
}

void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  uint64_t off = 0;
  for (const auto& [name, t] : tensors) {
    TESSERA_CHECK(t.is_contiguous(), ErrorKind::kInternal, "write_safetensors: '{}' is not contiguous", name);
    std::vector<int64_t> shape;
    for (int i = 0; i < t.rank(); ++i) shape.push_back(t.dim(i));
    header[name] = {
        {"dtype", st_dtype_name(t.dtype())}, {"shape", shape}, {"data_offsets", {off, off + t.nbytes()}}};
    off += t.nbytes();
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');  // data starts 8-byte aligned
  // Written through a temporary name and renamed into place (core/file.h): a crash leaves the old
  // file or the whole new one.
  AtomicFileWriter out(path);
  uint64_t n = h.size();
  out.append(&n, 8);
  out.append(h);
  for (const auto& nt : tensors) out.append(nt.tensor.data(), nt.tensor.nbytes());
  out.commit();
}

}  // namespace tessera
