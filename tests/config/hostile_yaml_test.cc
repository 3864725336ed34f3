// The YAML loader against input a careless or hostile user writes: a second document, a quote
// never closed, NUL characters in strings, and a config path that is a FIFO, a device or too big.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstring>
#include <fstream>

#include "config_test_util.h"
#include "tessera/core/file.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using testing::expect_config_error;
using testing::load;

fs::path write_config(const fs::path& dir, const std::string& text) {
  const fs::path p = dir / "run.yml";
  write_file_atomically(p, text);
  return p;
}

TEST(HostileYaml, ASecondDocumentIsRefusedWithItsLine) {
  const fs::path dir = testing::make_temp_dir();
  const fs::path p = write_config(dir, "steps: 3\n---\nsteps: 4\n");
  expect_config_error([&] { load(p); }, {p.string() + ":", "a second YAML document"});
  // A lone end-of-document marker is not a second document.
  EXPECT_EQ(load(write_config(dir, "steps: 3\n...\n")).steps, 3);
  fs::remove_all(dir);
}

// A ',' at the top level made yaml-cpp 0.7's LoadAll return empty documents forever (the config
// fuzzer's timeout, 2 GB in 14 s): the loader asks for two documents at most.
TEST(HostileYaml, AStrayCommaAtTheTopLevelEndsWithAnError) {
  const fs::path dir = testing::make_temp_dir();
  for (const char* text : {", a\n", ", 'fsdp'], ['mlp', [load_parameters_path:\nsteps: 3\n"}) {
    const fs::path p = write_config(dir, text);
    expect_config_error([&] { load(p); }, {p.string() + ":1"});
  }
  fs::remove_all(dir);
}

TEST(HostileYaml, AnUnterminatedQuoteIsRefusedWhereItOpens) {
  const fs::path dir = testing::make_temp_dir();
  for (const char* text : {"run_name: \"abc\nsteps: 3\n", "steps: 3\nrun_name: 'abc\n", "run_name: \"abc"}) {
    const fs::path p = write_config(dir, text);
    const std::string msg = expect_config_error([&] { load(p); }, {p.string() + ":"});
    EXPECT_TRUE(msg.find("never closed") != std::string::npos ||
                msg.find("malformed YAML") != std::string::npos)
        << msg;
  }
  // Closed quotes, escapes and a doubled single quote still load.
  EXPECT_EQ(load(write_config(dir, "run_name: \"a\\\"b\"\n")).run_name, "a\"b");
  EXPECT_EQ(load(write_config(dir, "run_name: 'it''s'\n")).run_name, "it's");
  fs::remove_all(dir);
}

TEST(HostileYaml, NulInAStringIsRefused) {
  const fs::path dir = testing::make_temp_dir();
  const fs::path escaped = write_config(dir, "run_name: \"run\\0x\"\n");
  expect_config_error([&] { load(escaped); }, {"run_name", "NUL character at offset 3"});
  const fs::path raw = write_config(dir, std::string("steps: 3\nrun_name: ab\0c\n", 24));
  expect_config_error([&] { load(raw); }, {raw.string() + ":2:", "a NUL byte at offset"});
  expect_config_error([&] { load(testing::base_config(), {std::string("run_name=a\0b", 12)}); },
                      {"run_name", "NUL character"});
  fs::remove_all(dir);
}

TEST(HostileYaml, AConfigPathThatIsNotARegularFileIsAClearError) {
  const fs::path dir = testing::make_temp_dir();
  const fs::path fifo = dir / "fifo.yml";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  expect_config_error([&] { load(fifo); },
                      {fifo.string(), "is a FIFO (named pipe); expected a regular file"});
  expect_config_error([&] { load("/dev/zero"); }, {"'/dev/zero' is a character device"});
  expect_config_error([&] { load(dir); }, {"is a folder"});
  // Far past any config's size: refused before it is read.
  const fs::path big = dir / "big.yml";
  {
    std::ofstream out(big);
    out << "steps: 3\n";
    out.seekp((std::streamoff{17} << 20));
    out << "#\n";
  }
  expect_config_error([&] { load(big); }, {"more than the 16777216 bytes"});
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tessera
