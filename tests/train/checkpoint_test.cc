// Checkpoints in process: a run resumed from a checkpoint gives bit-identical float32 losses to an
// uninterrupted one; a truncated or corrupt checkpoint is reported and the previous one used; an
// incomplete save (*.tmp) is removed; load_parameters_path and load_full_state_path restore what
// they promise; a checkpoint of another model is a kConfig error naming the file and the tensor;
// max_num_checkpoints_to_keep deletes the oldest. The kill-and-resume test of the real program is
// in checkpoint_cli_test.cc.
#include "tessera/checkpoint/checkpoint.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tessera/config/config.h"
#include "tessera/core/error.h"
#include "tessera/core/file.h"
#include "tessera/core/safetensors.h"
#include "tessera/core/source_dir.h"
#include "tessera/train/trainer.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

fs::path make_temp_dir() {
  std::string tmpl = (fs::path(::testing::TempDir()) / "tessera_ckpt_XXXXXX").string();
  char* dir = mkdtemp(tmpl.data());
  EXPECT_NE(dir, nullptr);
  return dir ? fs::path(dir) : fs::path();
}

class Checkpoints : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = make_temp_dir(); }
  void TearDown() override { fs::remove_all(dir_); }

  // llama-test at a tiny batch. The schedule length is fixed at 20 steps so that a run of
  // steps=10 followed by steps=20 follows the same learning rates as one run of steps=20.
  Config config(const std::string& run, std::vector<std::string> extra = {}) {
    std::vector<std::string> o = {
        "run_name=" + run,       "base_output_directory=" + (dir_ / "runs").string(),
        "model_name=llama-test", "per_device_batch_size=2",
        "max_target_length=16",  "learning_rate_schedule_steps=20",
        "learning_rate=1e-3",    "checkpoint_period=5",
        "log_period=5",          "enable_tensorboard=false",
        "device_peak_tflops=1",  "num_threads=1"};
    o.insert(o.end(), extra.begin(), extra.end());
    return load_config(tessera::source_dir() / "configs" / "base.yml", o);
  }

  // Runs a trainer to the config's `steps`; returns the metrics of the steps it ran.
  std::vector<train::StepMetrics> run(const Config& cfg, std::string* log = nullptr,
                                      int64_t* start = nullptr) {
    std::ostringstream out;
    train::Trainer t(cfg, out);
    if (start) *start = t.current_step();
    std::vector<train::StepMetrics> ms;
    t.run([&](const train::StepMetrics& m) { ms.push_back(m); });
    if (log) *log = out.str();
    return ms;
  }

  fs::path ckpt(const std::string& run, int64_t step) const {
    return dir_ / "runs" / run / "checkpoints" / std::to_string(step);
  }

  fs::path dir_;
};

TEST_F(Checkpoints, ResumedRunIsBitIdenticalToAStraightOne) {
  const std::vector<train::StepMetrics> straight = run(config("straight", {"steps=20"}));
  ASSERT_EQ(straight.size(), 20u);
  // First half with async saves at 5 and a synchronous final save at 10; second half resumes.
  std::string log;
  int64_t start = -1;
  run(config("split", {"steps=10", "async_checkpointing=true"}), &log, &start);
  EXPECT_EQ(start, 0);
  EXPECT_NE(log.find("checkpoint 5: saved to"), std::string::npos) << log;
  EXPECT_NE(log.find("background write"), std::string::npos) << log;
  EXPECT_NE(log.find("checkpoint 10: saved to"), std::string::npos) << log;
  const std::vector<train::StepMetrics> second = run(config("split", {"steps=20"}), &log, &start);
  EXPECT_EQ(start, 10);
  EXPECT_NE(log.find("resumed from checkpoint"), std::string::npos) << log;
  ASSERT_EQ(second.size(), 10u);
  for (size_t i = 0; i < second.size(); ++i) {
    SCOPED_TRACE(second[i].step);
    EXPECT_EQ(second[i].step, straight[10 + i].step);
    // Bitwise: the same parameters, moments, step counter, learning rate and batch.
    EXPECT_EQ(second[i].loss, straight[10 + i].loss);
    EXPECT_EQ(second[i].grad_norm, straight[10 + i].grad_norm);
    EXPECT_EQ(second[i].learning_rate, straight[10 + i].learning_rate);
  }
  // The final parameters agree byte for byte too.
  SafetensorsFile a((ckpt("straight", 20) / "params.safetensors").string());
  SafetensorsFile b((ckpt("split", 20) / "params.safetensors").string());
  ASSERT_EQ(a.names(), b.names());
  for (const std::string& n : a.names())
    EXPECT_EQ(std::memcmp(a.get(n).data(), b.get(n).data(), a.get(n).nbytes()), 0) << n;
}

TEST_F(Checkpoints, SynchronousSavesResumeExactlyToo) {
  const std::vector<train::StepMetrics> straight = run(config("straight", {"steps=12"}));
  run(config("sync", {"steps=7", "async_checkpointing=false"}));  // saves 5 and 7
  const std::vector<train::StepMetrics> second =
      run(config("sync", {"steps=12", "async_checkpointing=false"}));
  ASSERT_EQ(second.size(), 5u);
  for (size_t i = 0; i < second.size(); ++i) EXPECT_EQ(second[i].loss, straight[7 + i].loss) << i;
}

TEST_F(Checkpoints, ManifestDescribesTheCheckpoint) {
  run(config("m", {"steps=5"}));
  const nlohmann::json m = checkpoint::verify_checkpoint(ckpt("m", 5));
  EXPECT_EQ(m["format_version"], checkpoint::kCheckpointFormatVersion);
  EXPECT_EQ(m["step"], 5);
  // The data iterator's state: 5 steps of per_device_batch_size rows drawn in epoch 0.
  const int64_t rows = 5 * 2;  // per_device_batch_size=2
  EXPECT_EQ(m["data_iterator"]["row"], rows) << m["data_iterator"].dump();
  EXPECT_NE(m["data_iterator"]["signature"].get<std::string>().find("synthetic"), std::string::npos)
      << m["data_iterator"].dump();
  EXPECT_EQ(m["mesh"]["ici"]["fsdp"], 1);
  EXPECT_EQ(m["optimizer"], "adamw");
  EXPECT_NE(m["config_yaml"].get<std::string>().find("\nsteps: 5\n"), std::string::npos);
  for (const char* f : {"params.safetensors", "opt_state.safetensors"}) {
    ASSERT_TRUE(m["files"].contains(f)) << f;
    EXPECT_EQ(m["files"][f]["bytes"].get<uint64_t>(), fs::file_size(ckpt("m", 5) / f));
    EXPECT_EQ(m["files"][f]["crc32c"].get<std::string>().size(), 8u);
  }
  SafetensorsFile opt((ckpt("m", 5) / "opt_state.safetensors").string());
  EXPECT_TRUE(opt.contains("decoder.layers_0.self_attention.query.kernel.adam_m")) << opt.names()[0];
  EXPECT_TRUE(opt.contains("decoder.layers_0.self_attention.query.kernel.adam_v"));
}

TEST_F(Checkpoints, TruncatedOrCorruptCheckpointFallsBackToThePreviousOne) {
  run(config("t", {"steps=15"}));  // checkpoints 5, 10, 15
  // 15: truncated parameters; 10: one flipped byte in the optimizer state (same size).
  fs::resize_file(ckpt("t", 15) / "params.safetensors",
                  fs::file_size(ckpt("t", 15) / "params.safetensors") / 2);
  {
    std::fstream f(ckpt("t", 10) / "opt_state.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(1000);
    char c;
    f.get(c);
    f.seekp(1000);
    f.put(static_cast<char>(c ^ 0x10));
  }
  fs::create_directories(dir_ / "runs" / "t" / "checkpoints" / "20.tmp");  // a save that never finished
  std::string log;
  int64_t start = -1;
  run(config("t", {"steps=16"}), &log, &start);
  EXPECT_EQ(start, 5);
  EXPECT_NE(log.find("skipping checkpoint 15: " + (ckpt("t", 15) / "params.safetensors").string()),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("truncated"), std::string::npos) << log;
  EXPECT_NE(log.find("skipping checkpoint 10: " + (ckpt("t", 10) / "opt_state.safetensors").string()),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("CRC32C"), std::string::npos) << log;
  EXPECT_NE(log.find("20.tmp (a save that did not finish)"), std::string::npos) << log;
  EXPECT_FALSE(fs::exists(dir_ / "runs" / "t" / "checkpoints" / "20.tmp"));
  // The resumed run saved 10, 15 and 16 again over the bad ones; they verify now.
  for (int64_t s : {10, 15, 16}) EXPECT_NO_THROW(checkpoint::verify_checkpoint(ckpt("t", s))) << s;
}

// The manifest carries the step and the data iterator's position: an edit of either (here the row
// cursor, which would make a resume read other batches) fails the manifest's own CRC32C and the
// resume falls back to the previous checkpoint.
TEST_F(Checkpoints, AnEditedManifestFailsItsOwnChecksum) {
  run(config("mc", {"steps=10"}));  // checkpoints 5, 10
  const fs::path mpath = ckpt("mc", 10) / "manifest.json";
  nlohmann::json m = nlohmann::json::parse(read_file(mpath));
  ASSERT_TRUE(m.contains("manifest_crc32c")) << m.dump();
  m["data_iterator"]["row"] = m["data_iterator"]["row"].get<int64_t>() + 2;
  write_file_atomically(mpath, m.dump(2));
  try {
    checkpoint::verify_checkpoint(ckpt("mc", 10));
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    EXPECT_NE(std::string(e.what()).find(mpath.string() + ": CRC32C"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("does not match its \"manifest_crc32c\""), std::string::npos)
        << e.what();
  }
  m.erase("manifest_crc32c");  // dropping the checksum is no way round it
  write_file_atomically(mpath, m.dump(2));
  EXPECT_THROW(checkpoint::verify_checkpoint(ckpt("mc", 10)), Error);
  // Layout alone (indentation) does not change the checksum.
  const fs::path m5 = ckpt("mc", 5) / "manifest.json";
  write_file_atomically(m5, nlohmann::json::parse(read_file(m5)).dump(4));
  EXPECT_NO_THROW(checkpoint::verify_checkpoint(ckpt("mc", 5)));
  std::string log;
  int64_t start = -1;
  run(config("mc", {"steps=11"}), &log, &start);
  EXPECT_EQ(start, 5);
  EXPECT_NE(log.find("skipping checkpoint 10: " + mpath.string()), std::string::npos) << log;
}

// The lines of the steps a checkpoint covers are on disk before the checkpoint is: a process killed
// (no destructor, no flush) right after a save still leaves steps 0..9 in the metrics file, and the
// resumed run then writes each later step once. The killed run is this binary again, running the
// disabled test below in a fresh process (forking a process with OpenMP threads is not safe).
const char* kKillDirVar = "TESSERA_TEST_KILL_DIR";

TEST_F(Checkpoints, DISABLED_MetricsKillChild) {
  const char* dir = std::getenv(kKillDirVar);
  if (!dir) GTEST_SKIP() << "run by MetricsOfCheckpointedStepsSurviveAKill";
  dir_ = dir;
  const Config cfg = config(
      "mk", {"steps=20", "async_checkpointing=false", "metrics_file=" + (dir_ / "metrics.jsonl").string()});
  std::ostringstream out;
  train::Trainer t(cfg, out);
  t.run([&](const train::StepMetrics& m) {
    // Step 9 completes checkpoint 10 (saved before this call); die at once, mid-run.
    if (m.step == 9) ::_exit(fs::exists(ckpt("mk", 10) / "manifest.json") ? 0 : 2);
  });
  ::_exit(1);
}

TEST_F(Checkpoints, MetricsOfCheckpointedStepsSurviveAKill) {
  const fs::path metrics = dir_ / "metrics.jsonl";
  const std::string cmd = fmt::format(
      "{}='{}' /proc/{}/exe --gtest_also_run_disabled_tests "
      "--gtest_filter=Checkpoints.DISABLED_MetricsKillChild "
      ">/dev/null 2>&1",
      kKillDirVar, dir_.string(), ::getpid());
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << cmd << ": " << status;
  auto steps = [&] {
    std::vector<int64_t> out;
    std::istringstream in(read_file(metrics));
    for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line)["step"]);
    return out;
  };
  std::vector<int64_t> want(10);
  for (int64_t i = 0; i < 10; ++i) want[static_cast<size_t>(i)] = i;
  EXPECT_EQ(steps(), want);  // every step of checkpoint 10: 6..9 came after the last log-step flush (5)
  run(config("mk", {"steps=12", "metrics_file=" + metrics.string()}));
  want.push_back(10);
  want.push_back(11);
  EXPECT_EQ(steps(), want);
}

TEST_F(Checkpoints, NoIntactCheckpointIsAnError) {
  run(config("bad", {"steps=5"}));
  fs::resize_file(ckpt("bad", 5) / "params.safetensors", 100);
  try {
    run(config("bad", {"steps=6"}));
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    EXPECT_NE(std::string(e.what()).find("none of the 1 checkpoints"), std::string::npos) << e.what();
  }
}

TEST_F(Checkpoints, KeepsOnlyTheNewest) {
  std::string log;
  run(config("keep", {"steps=20", "max_num_checkpoints_to_keep=2", "async_checkpointing=false"}), &log);
  EXPECT_EQ(checkpoint::list_checkpoints(dir_ / "runs" / "keep" / "checkpoints"),
            (std::vector<int64_t>{15, 20}));
  EXPECT_NE(log.find("checkpoints: deleted 5"), std::string::npos) << log;
}

TEST_F(Checkpoints, LoadParametersAndFullState) {
  run(config("src", {"steps=5", "enable_checkpointing=true"}));
  SafetensorsFile params((ckpt("src", 5) / "params.safetensors").string());
  SafetensorsFile opt((ckpt("src", 5) / "opt_state.safetensors").string());
  const std::string name = "decoder.layers_1.mlp.wo.kernel";
  auto same = [](const Tensor& a, const Tensor& b) {
    return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
  };
  auto find = [](train::Trainer& t, const std::string& n) {
    for (size_t id = 0; id < t.plan().graph().values().size(); ++id)
      if (t.plan().graph().values()[id].name == n) return t.plan().view(static_cast<graph::ValueId>(id));
    return Tensor();
  };
  std::ostringstream log;
  {  // Parameters only: step 0, fresh moments. A folder or the bare file both work.
    for (fs::path p : {ckpt("src", 5), ckpt("src", 5) / "params.safetensors"}) {
      Config c = config("p", {"steps=5", "load_parameters_path=" + p.string(), "enable_checkpointing=false"});
      train::Trainer t(c, log);
      EXPECT_EQ(t.current_step(), 0);
      EXPECT_TRUE(same(find(t, name), params.get(name)));
      const Tensor m = find(t, name + ".adam_m");
      EXPECT_TRUE(std::all_of(m.ptr<float>(), m.ptr<float>() + m.numel(), [](float x) { return x == 0; }));
    }
  }
  {  // Full state: step 5 and the moments.
    Config c = config("f", {"steps=5", "load_full_state_path=" + ckpt("src", 5).string()});
    train::Trainer t(c, log);
    EXPECT_EQ(t.current_step(), 5);
    EXPECT_TRUE(same(find(t, name), params.get(name)));
    EXPECT_TRUE(same(find(t, name + ".adam_v"), opt.get(name + ".adam_v")));
  }
  {  // The run's own checkpoint wins over load_parameters_path.
    run(config("own", {"steps=5"}));
    Config c = config("own", {"steps=7", "load_parameters_path=" + ckpt("src", 5).string()});
    train::Trainer t(c, log);
    EXPECT_EQ(t.current_step(), 5);
  }
}

TEST_F(Checkpoints, AnotherModelIsAConfigErrorNamingFileAndTensor) {
  run(config("src", {"steps=5"}));
  auto expect_config_error = [&](std::vector<std::string> o, const std::vector<std::string>& parts) {
    std::ostringstream log;
    try {
      train::Trainer t(config("dst", o), log);
      ADD_FAILURE() << "expected an error";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kConfig) << e.what();
      for (const std::string& p : parts)
        EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    }
  };
  const std::string params = (ckpt("src", 5) / "params.safetensors").string();
  // Wider MLP: same names, other shapes.
  expect_config_error(
      {"load_parameters_path=" + ckpt("src", 5).string(), "override_model_config=true", "base_mlp_dim=96"},
      {params, "decoder.layers_0.mlp.wi_0.kernel", "has shape [64, 160] in the file but [64, 96]"});
  // More layers: a tensor the file lacks.
  expect_config_error({"load_full_state_path=" + ckpt("src", 5).string(), "override_model_config=true",
                       "base_num_decoder_layers=3"},
                      {params, "has no tensor 'decoder.layers_2."});
  // SGD has no moments: the file's are extra.
  expect_config_error({"load_full_state_path=" + ckpt("src", 5).string(), "opt_type=sgd"},
                      {"opt_state.safetensors", ".adam_m' is not an optimizer state tensor"});
  // A missing folder is kIo.
  try {
    std::ostringstream log;
    train::Trainer t(config("dst", {"load_full_state_path=" + (dir_ / "nowhere").string()}), log);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    EXPECT_NE(std::string(e.what()).find("nowhere: no such checkpoint folder"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tessera
