// Dataset path resolution (files.h).
#include "tessera/data/files.h"

#include <glob.h>

#include <algorithm>
#include <memory>

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

// A data file that is not a regular file (a shard replaced by a folder, a device, a FIFO) is an
// error naming it, not a file silently left out of the dataset.
void add_data_file(const fs::path& p, std::vector<fs::path>& out) {
  std::error_code ec;
  const fs::file_status st = fs::status(p, ec);
  if (fs::is_regular_file(st)) {
    out.push_back(p);
    return;
  }
  const char* what = fs::is_directory(st)                                 ? "a folder"
                     : fs::is_fifo(st)                                    ? "a FIFO (named pipe)"
                     : fs::is_character_file(st) || fs::is_block_file(st) ? "a device"
                     : ec                                                 ? "unreadable"
                                                                          : "not a regular file";
  fail(ErrorKind::kIo, "data file '{}' is {}; expected a regular file", p.string(), what);
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
      if (has_extension(e.path(), extensions)) add_data_file(e.path(), out);
    if (ec) fail(ErrorKind::kIo, "cannot list the folder '{}': {}", p.string(), ec.message());
    return;
  }
  if (fs::exists(p, ec)) add_data_file(p, out);  // named exactly but neither file nor folder: refused
  // add_data_file throws for a match that is not a regular file: the matches are freed either way.
  const std::unique_ptr<glob_t, void (*)(glob_t*)> g(new glob_t{}, [](glob_t* x) {
    ::globfree(x);
    delete x;
  });
  if (::glob(std::string(spec).c_str(), 0, nullptr, g.get()) != 0) return;
  for (size_t i = 0; i < g->gl_pathc; ++i) {
    fs::path m(g->gl_pathv[i]);
    if (has_extension(m, extensions)) add_data_file(m, out);
  }
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
