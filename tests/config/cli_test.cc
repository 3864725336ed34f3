// The tessera program, run as a user runs it: exit codes (0 ok, 1 failure, 2 usage or config
// error, 3 not in this build yet) and what it prints. The binary comes from $TESSERA_BINARY (set
// by ctest), else from beside this test program.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "config_test_util.h"
#include "testing/process_util.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

using testing::shell_quote;
using testing::tessera_binary;

std::string read_all(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Result {
  int code = -1;
  std::string out, err;
};

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::is_regular_file(tessera_binary())) {
      // Under ctest the path is given and must exist; a bare run of this program may lack it.
      if (std::getenv("TESSERA_BINARY")) FAIL() << "TESSERA_BINARY=" << tessera_binary() << " is not a file";
      GTEST_SKIP() << "no tessera binary at " << tessera_binary();
    }
    dir_ = testing::make_temp_dir();
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  Result run(const std::vector<std::string>& args) {
    std::string cmd = shell_quote(tessera_binary().string());
    for (const std::string& a : args) cmd.append(" ").append(shell_quote(a));
    cmd.append(" >").append(shell_quote((dir_ / "out").string()));
    cmd.append(" 2>").append(shell_quote((dir_ / "err").string()));
    int status = std::system(cmd.c_str());
    Result r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = read_all(dir_ / "out");
    r.err = read_all(dir_ / "err");
    return r;
  }

  std::string base() const { return testing::base_config().string(); }
  std::string outputs() const { return "base_output_directory=" + (dir_ / "runs").string(); }

  fs::path dir_;
};

TEST_F(Cli, HelpAndVersion) {
  Result r = run({"--help"});
  EXPECT_EQ(r.code, 0);
  for (const char* cmd : {"train", "decode", "serve", "compile", "convert", "prepare-data", "train-tokenizer",
                          "show-config", "help-config", "version", "Exit codes"})
    EXPECT_NE(r.out.find(cmd), std::string::npos) << cmd;
  r = run({"train", "--help"});
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("CONFIG"), std::string::npos);
  r = run({"version"});
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out.rfind("tessera 0.", 0), 0u) << r.out;
}

TEST_F(Cli, UsageErrorsExitTwo) {
  Result r = run({});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err.rfind("tessera: error: ", 0), 0u) << r.err;
  r = run({"fly", base()});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err.rfind("tessera: error: ", 0), 0u) << r.err;
  r = run({"train"});  // CONFIG missing
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("CONFIG"), std::string::npos) << r.err;
  r = run({"show-config", base(), "--bogus"});
  EXPECT_EQ(r.code, 2);
}

TEST_F(Cli, ShowConfigPrintsTheResolvedYaml) {
  Result r = run({"show-config", base(), "model_name=llama-test", "steps=42"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\nsteps: 42\n"), std::string::npos);
  EXPECT_NE(r.out.find("\nbase_emb_dim: 64\n"), std::string::npos);
  EXPECT_NE(r.out.find("# emb_dim: 64\n"), std::string::npos);
  EXPECT_TRUE(r.err.empty()) << r.err;
}

TEST_F(Cli, ConfigErrorsExitTwoWithOneLine) {
  Result r = run({"show-config", base(), "stpes=3"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "tessera: error: unknown config key 'stpes' (command line); did you mean 'steps'?\n");
  r = run({"train", base(), "run_name=x", outputs(), "adam_b1=2"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("'adam_b1' (command line): 2 is out of range; allowed: [0, 1)"), std::string::npos)
      << r.err;
  r = run({"show-config", testing::fixture("bad_syntax.yml").string()});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("bad_syntax.yml:"), std::string::npos) << r.err;
  r = run({"show-config", (dir_ / "missing.yml").string()});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("No such file or directory"), std::string::npos) << r.err;
  r = run({"show-config", base(), "steps"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("not a key=value override"), std::string::npos) << r.err;
  r = run({"train", base(), outputs()});  // no run_name
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("run_name is empty"), std::string::npos) << r.err;
}

TEST_F(Cli, HelpConfig) {
  Result r = run({"help-config"});
  ASSERT_EQ(r.code, 0);
  for (const config::FieldSpec& f : config::schema())
    EXPECT_NE(r.out.find("  " + std::string(f.name) + " ("), std::string::npos) << f.name;
  r = run({"help-config", "adam_b1"});
  ASSERT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("type:     float"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("default:  0.9"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("allowed:  [0, 1)"), std::string::npos) << r.out;
  r = run({"help-config", "opt_type"});
  EXPECT_NE(r.out.find("does not support: adam_pax, muon"), std::string::npos) << r.out;
  r = run({"help-config", "adam_b"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("did you mean"), std::string::npos) << r.err;
  // --yaml prints configs/base.yml's content: every key at its default.
  r = run({"help-config", "--yaml"});
  ASSERT_EQ(r.code, 0);
  EXPECT_EQ(r.out, read_all(testing::base_config())) << "configs/base.yml is stale: regenerate it with "
                                                        "`tessera help-config --yaml > configs/base.yml`";
}

TEST_F(Cli, TrainRunsAndLogsEachStep) {
  Result r = run({"train", base(), "run_name=train_small", outputs(), "model_name=llama-test", "steps=3",
                  "per_device_batch_size=2", "max_target_length=16", "log_period=1", "device_peak_tflops=1"});
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* want : {"completed step: 0", "completed step: 2", "TFLOP/s/device", "Tokens/s/device",
                           "loss:", "MFU:", "plan: memory:", "peak 1000.0 GFLOP/s"})
    EXPECT_NE(r.out.find(want), std::string::npos) << want << " in\n" << r.out;
  EXPECT_TRUE(fs::is_regular_file(dir_ / "runs" / "train_small" / "config.yml"));
}

TEST_F(Cli, TrainRefusesOptionsNotBuiltYet) {
  for (std::vector<std::string> opts : std::vector<std::vector<std::string>>{
           {"eval_interval=5", "eval_steps=2", "per_device_batch_size=2", "eval_per_device_batch_size=3"},
           {"scan_layers=true"},
           {"adam_eps_root=1e-8"},
           {"attention_type=chunk"}}) {
    SCOPED_TRACE(opts[0]);
    std::vector<std::string> argv = {"train", base(), "run_name=refuse", outputs(), "model_name=llama-test"};
    argv.insert(argv.end(), opts.begin(), opts.end());
    Result r = run(argv);
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_NE(r.err.find("is not in this build yet"), std::string::npos) << r.err;
  }
}

// Hostile values on the command line: a path that cannot be what its key says (a plan file that is
// not a plan, a FIFO), a model far larger than the machine, a dimension whose sizes overflow
// 64 bits, a thread count near the documented maximum. Each is a one-line error and exit 2, never a
// crash, a hang or an ignored key.
TEST_F(Cli, TrainRefusesHostileValuesWithTheirKey) {
  std::ofstream(dir_ / "not_a_plan.json") << "{\"hello\": 1}\n";
  // A version that no int holds (reading it as int was undefined behaviour).
  std::ofstream(dir_ / "float_version.json")
      << R"({"format": "tessera.compiled_trainstep", "version": 2.6e90})";
  ASSERT_EQ(::mkfifo((dir_ / "fifo").c_str(), 0600), 0);
  const std::vector<std::string> common = {"train",
                                           base(),
                                           "run_name=hostile",
                                           outputs(),
                                           "model_name=llama-test",
                                           "steps=1",
                                           "per_device_batch_size=1",
                                           "max_target_length=16",
                                           "override_model_config=true"};
  struct Case {
    std::vector<std::string> args;
    std::vector<std::string> says;
  };
  for (const Case& c : std::vector<Case>{
           {{"compiled_trainstep_file=" + (dir_ / "not_a_plan.json").string()},
            {"compiled_trainstep_file", "is not a plan written by `tessera compile`"}},
           {{"compiled_trainstep_file=" + (dir_ / "float_version.json").string()},
            {"compiled_trainstep_file", "is not a plan written by `tessera compile`"}},
           {{"compiled_trainstep_file=" + (dir_ / "fifo").string()}, {"is a FIFO"}},
           {{"compiled_trainstep_file=" + dir_.string()}, {"is a folder"}},
           {{"vocab_size=1099511627776"}, {"the plan needs", "vocab_size", "of memory"}},
           {{"base_emb_dim=4611686018427387904"},
            {"more elements than fit in 64 bits", "come from base_emb_dim"}},
           {{"num_threads=65536"}, {"num_threads=65536 is more than"}},
       }) {
    std::vector<std::string> argv = common;
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    SCOPED_TRACE(c.args[0]);
    const Result r = run(argv);
    EXPECT_TRUE(r.code == 1 || r.code == 2) << r.code << "\n" << r.err;
    for (const std::string& s : c.says) EXPECT_NE(r.err.find(s), std::string::npos) << s << " in\n" << r.err;
  }
}

}  // namespace
}  // namespace tessera
