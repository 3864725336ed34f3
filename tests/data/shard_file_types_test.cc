// A dataset whose token shard was replaced by a folder, a FIFO or a device: an error naming the
// shard, never a dataset silently smaller than the one prepared.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstring>
#include <filesystem>

#include "data_test_util.h"
#include "tessera/core/error.h"
#include "tessera/core/file.h"
#include "tessera/data/files.h"
#include "tessera/data/shard.h"

namespace tessera::data {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

std::string resolve_error(const std::string& spec) {
  const std::string_view ext[] = {kShardExtension};
  try {
    resolve_data_files(spec, ext);
  } catch (const Error& e) {
    EXPECT_EQ(static_cast<int>(e.kind()), static_cast<int>(ErrorKind::kIo)) << e.what();
    return e.what();
  }
  return "resolved";
}

TEST(ShardFileTypes, AShardReplacedByAFolderOrAFifoIsAnError) {
  TempDir dir("shard_types");
  const std::string_view ext[] = {kShardExtension};
  const fs::path good = dir.path() / "shard-00000.tokens";
  write_file_atomically(good, "x");  // resolve only looks at names and types
  EXPECT_EQ(resolve_data_files(dir.path().string(), ext).size(), 1u);

  fs::create_directory(dir.path() / "shard-00001.tokens");
  std::string msg = resolve_error(dir.path().string());
  EXPECT_NE(msg.find("shard-00001.tokens' is a folder; expected a regular file"), std::string::npos) << msg;
  msg = resolve_error((dir.path() / "*.tokens").string());  // through a glob too
  EXPECT_NE(msg.find("shard-00001.tokens' is a folder"), std::string::npos) << msg;
  fs::remove(dir.path() / "shard-00001.tokens");

  ASSERT_EQ(::mkfifo((dir.path() / "shard-00002.tokens").c_str(), 0600), 0) << std::strerror(errno);
  msg = resolve_error(dir.path().string());
  EXPECT_NE(msg.find("shard-00002.tokens' is a FIFO"), std::string::npos) << msg;
  fs::remove(dir.path() / "shard-00002.tokens");

  // A device named directly, and a folder entry without the extension (ignored as before).
  msg = resolve_error("/dev/null");
  EXPECT_NE(msg.find("'/dev/null' is a device"), std::string::npos) << msg;
  fs::create_directory(dir.path() / "notes");
  EXPECT_EQ(resolve_data_files(dir.path().string(), ext).size(), 1u);
}

}  // namespace
}  // namespace tessera::data
