// Dataset path resolution (files.h).
#include "tessera/data/files.h"

#include <glob.h>

#include <algorithm>

#include "tessera/core/error.h"

namespace tessera::data {
namespace fs = std::filesystem;

namespace {

bool has_extension(const fs::path& p, std::span<const std::string_view> extensions) {
  const std::string name = p.filename().string();
  for (std::string_view ext : extensions)
    if (name.size() >= ext.size() && name.compare(name.size() - ext.size(), ext.size(), ext) == 0)
      return true;
  return false;
}

void resolve_one(std::string_view spec, std::span<const std::string_view> extensions,
                 std::vector<fs::path>& out) {
  const fs::path p{std::string(spec)};
  std::error_code ec;
  if (fs::is_regular_file(p, ec)) {
    out.push_back(p);
    return;
  }
  if (fs::is_directory(p, ec)) {
    for (const fs::directory_entry& e : fs::directory_iterator(p, ec))
      if (e.is_regular_file() && has_extension(e.path(), extensions)) out.push_back(e.path());
    if (ec) fail(ErrorKind::kIo, "cannot list the folder '{}': {}", p.string(), ec.message());
    return;
  }
  glob_t g{};
  const int rc = ::glob(std::string(spec).c_str(), 0, nullptr, &g);
  if (rc == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) {
      fs::path m(g.gl_pathv[i]);
      if (fs::is_regular_file(m, ec) && has_extension(m, extensions)) out.push_back(m);
    }
  ::globfree(&g);
}

}  // namespace

std::vector<fs::path> resolve_data_files(std::string_view spec,
                                         std::span<const std::string_view> extensions) {
  std::vector<fs::path> out;
  size_t begin = 0;
  while (begin <= spec.size()) {
    size_t end = std::min(spec.find(',', begin), spec.size());
    std::string_view one = spec.substr(begin, end - begin);
    if (!one.empty()) resolve_one(one, extensions, out);
    begin = end + 1;
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  if (out.empty()) {
    std::string exts;
    for (std::string_view e : extensions) exts += fmt::format("{}*{}", exts.empty() ? "" : ", ", e);
    fail(ErrorKind::kIo, "'{}' names no data files: expected a file, a folder or a glob matching {}", spec,
         exts);
  }
  return out;
}

}  // namespace tessera::data
