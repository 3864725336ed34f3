// safetensors files: the tensor format of Tessera's checkpoints and of Hugging Face models.
//
// Layout: an 8-byte little-endian header length n, n bytes of JSON
// {"name": {"dtype": "F32"|"BF16"|"I32"|..., "shape": [...], "data_offsets": [begin, end]}, ...,
//  "__metadata__": {string: string}}, then the raw little-endian data; offsets are relative to the
// end of the header. Reading maps the file and checks every entry (dtype known, offsets in range,
// size = product of shape x element size) so that a truncated or corrupt file is reported with its
// name and the offending entry, never read past. Writing goes to a temporary name, is fsynced and
// renamed, so a crash never leaves a half-written file under the final name.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera {

class SafetensorsFile {
 public:
  // Maps `path`; throws kIo naming the file and what is wrong.
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  bool contains(const std::string& name) const { return entries_.count(name) > 0; }
  // A read-only view of the tensor's bytes in the mapping; throws kIo when absent.
  Tensor get(const std::string& name) const;
  std::vector<std::string> names() const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  void* map_ = nullptr;
  size_t size_ = 0;
  std::map<std::string, Tensor> entries_;
  std::map<std::string, std::string> metadata_;
};

struct NamedTensor {
  std::string name;
  Tensor tensor;  // contiguous
};

// Writes `tensors` to `path` atomically (temporary name, fsync, rename). Throws kIo.
void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace tessera
