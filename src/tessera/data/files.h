// Resolving a dataset path (a file, a folder or a glob) to a sorted list of files. Mapping, reading
// and durable writing of files are core's (core/file.h).
//
// Every failure throws tessera::Error(kIo) naming the file and what went wrong.
#pragma once

#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::data {

// The files a dataset path names, sorted by path so every process sees the same order:
//   - an existing regular file: itself (whatever its extension);
//   - a folder: the regular files directly in it whose names end in one of `extensions`
//     (".txt", ".tokens", ...); sub-folders are not searched;
//   - anything else is a glob pattern (glob(3): *, ?, [...]) whose matches are filtered by
//     extension like a folder's files.
// Several specs may be joined with commas. Throws kIo when nothing matches, saying what was looked
// for.
std::vector<std::filesystem::path> resolve_data_files(std::string_view spec,
                                                      std::span<const std::string_view> extensions);

}  // namespace tessera::data
