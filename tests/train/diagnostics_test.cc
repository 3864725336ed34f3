// The training run's diagnostics (train/diagnostics.h): the trace profiler's file parses as Chrome
// trace-event JSON and covers exactly the profiled steps with every plan node (its phase and
// layer), the data loader and the checkpoint writes; stack dumps name every thread's functions,
// periodically into the run folder and on a fatal signal; goodput counts the steps a resume
// recomputes; the keys that cannot work are refused naming the key. The hang watchdog under
// mpirun is tests/dist/hang_watchdog_test.cc.
#include "tessera/train/diagnostics.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "tessera/config/config.h"
#include "tessera/core/error.h"
#include "tessera/core/file.h"
#include "tessera/core/source_dir.h"
#include "tessera/core/stack_trace.h"
#include "tessera/graph/graph.h"
#include "tessera/train/trainer.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    std::string templ = (fs::temp_directory_path() / "tessera-diag-XXXXXX").string();
    path = mkdtemp(templ.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

Config diag_config(const fs::path& out, std::vector<std::string> extra) {
  std::vector<std::string> o = {"model_name=llama-test",
                                "run_name=d",
                                "base_output_directory=" + out.string(),
                                "per_device_batch_size=2",
                                "max_target_length=16",
                                "steps=6",
                                "log_period=1",
                                "device_peak_tflops=0.5",
                                "enable_checkpointing=false",
                                "enable_tensorboard=false"};
  for (const std::string& e : extra) {
    const std::string key = e.substr(0, e.find('='));
    std::erase_if(o, [&](const std::string& x) { return x.substr(0, x.find('=')) == key; });
    o.push_back(e);
  }
  return load_config(tessera::source_dir().string() + "/configs/base.yml", o);
}

std::string config_error(const Config& cfg) {
  std::ostringstream log;
  try {
    train::Trainer t(cfg, log);
    t.run();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig) << e.what();
    return e.what();
  }
  return "";
}

TEST(Profiler, TraceCoversTheProfiledStepsWithEveryNode) {
  TempDir dir;
  std::ostringstream log;
  Config cfg =
      diag_config(dir.path, {"profiler=trace", "skip_first_n_steps_for_profiler=2", "profiler_steps=3",
                             "enable_checkpointing=true", "checkpoint_period=3", "async_checkpointing=true"});
  train::Trainer t(cfg, log);
  // Time for the background checkpoint write (started after step 2) to finish inside the profile.
  t.run([](const train::StepMetrics&) { std::this_thread::sleep_for(std::chrono::milliseconds(150)); });
  const fs::path file = dir.path / "d" / "profile" / "trace.rank0.json";
  ASSERT_TRUE(fs::exists(file)) << log.str();
  const nlohmann::json j = nlohmann::json::parse(read_file(file));
  ASSERT_TRUE(j.at("traceEvents").is_array());
  const auto& nodes = t.plan().graph().nodes();
  std::set<int64_t> steps;
  std::map<int64_t, std::set<int>> nodes_by_step;
  std::set<std::string> kinds;
  for (const auto& e : j.at("traceEvents")) {
    ASSERT_TRUE(e.contains("ph") && e.contains("pid") && e.contains("tid") && e.contains("name")) << e.dump();
    if (e.at("ph") != "X") continue;
    ASSERT_TRUE(e.at("ts").is_number() && e.at("dur").is_number() && e.at("dur").get<double>() >= 0)
        << e.dump();
    const auto& args = e.at("args");
    const int64_t step = args.value("step", int64_t{-1});
    if (e.at("name") == "step") steps.insert(step);
    if (args.contains("node")) {
      const int n = args.at("node").get<int>();
      ASSERT_LT(n, static_cast<int>(nodes.size()));
      if (e.at("cat") != "sync") {
        EXPECT_EQ(e.at("name"), nodes[static_cast<size_t>(n)].name);
      }
      EXPECT_EQ(args.at("layer").get<int>(), nodes[static_cast<size_t>(n)].layer);
      EXPECT_TRUE(args.contains("phase") && args.contains("op"));
      if (e.at("cat") != "sync") nodes_by_step[step].insert(n);
    }
    kinds.insert(e.at("name").get<std::string>());
  }
  EXPECT_EQ(steps, (std::set<int64_t>{2, 3, 4}));
  ASSERT_EQ(nodes_by_step.size(), 3u);
  for (const auto& [step, seen] : nodes_by_step) {
    EXPECT_TRUE(step >= 2 && step <= 4) << step;
    EXPECT_EQ(seen.size(), nodes.size()) << "step " << step << ": every plan node once";
  }
  EXPECT_TRUE(kinds.count("data loader"));
  EXPECT_TRUE(kinds.count("checkpoint save"));   // the step loop's part, after step 2 (3 steps done)
  EXPECT_TRUE(kinds.count("checkpoint write"));  // the background writer's
  EXPECT_NE(log.str().find("profiler: steps 2 to 4 written to"), std::string::npos) << log.str();
}

// The executor's per-op table (train_bench --profile): one row per op kind and phase the plan runs,
// one call per node per step, and the optimizer step's work outside the nodes once per step.
TEST(Profiler, ExecutorTableCoversEveryNodeAndTheOptimizerStep) {
  TempDir dir;
  std::ostringstream log;
  train::Trainer t(diag_config(dir.path, {"steps=2"}), log);
  t.executor().set_profiling(true);
  t.run();
  const std::string report = t.executor().profile_report();
  std::map<std::pair<std::string, std::string>, int64_t> calls, want;  // (op, phase) -> calls
  std::istringstream in(report);
  std::string line;
  std::getline(in, line);  // the header
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string op, phase;
    int64_t n = 0;
    fields >> op >> phase >> n;
    calls[{op, phase}] = n;
  }
  static const char* kPhase[] = {"forward", "recompute", "backward", "optimizer"};
  for (const graph::Node& n : t.plan().graph().nodes())
    want[{graph::op_name(n.op), kPhase[static_cast<int>(n.phase)]}] += 2;
  want[{"zero_grads", "optimizer"}] = 2;
  want[{"grad_norm", "optimizer"}] = 2;
  EXPECT_EQ(calls, want) << report;
}

TEST(Profiler, RefusesWhatItCannotDo) {
  TempDir dir;
  // MaxText's other profilers are refused when the config is read, naming the key and the value.
  for (const char* p : {"xplane", "nsys"}) {
    try {
      diag_config(dir.path, {std::string("profiler=") + p});
      ADD_FAILURE() << "profiler=" << p << " accepted";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("'profiler'"), std::string::npos) << what;
      EXPECT_NE(what.find(std::string("'") + p + "' is not supported"), std::string::npos) << what;
      EXPECT_NE(what.find("trace"), std::string::npos) << what;
    }
  }
  const std::string e =
      config_error(diag_config(dir.path, {"profiler=trace", "skip_first_n_steps_for_profiler=6"}));
  EXPECT_NE(e.find("skip_first_n_steps_for_profiler=6 leaves no step to profile"), std::string::npos) << e;
  EXPECT_THROW(diag_config(dir.path, {"profiler=perfetto"}), Error);
  const std::string g = config_error(diag_config(dir.path, {"monitor_goodput=true"}));
  EXPECT_NE(g.find("monitor_goodput=true needs enable_goodput_recording=true"), std::string::npos) << g;
}

[[gnu::noinline]] void parked_in_a_named_function(std::future<void> stop) {
  stop.wait();
}

TEST(StackTrace, DumpsEveryThreadSymbolized) {
  std::promise<void> stop;
  std::thread other(parked_in_a_named_function, stop.get_future());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  activity().step.store(7);
  const std::string dump = dump_all_thread_stacks("test");
  stop.set_value();
  other.join();
  activity().step.store(-1);
  EXPECT_NE(dump.find("=== stack traces (test) of rank 0 of 1 on host "), std::string::npos) << dump;
  EXPECT_NE(dump.find(", step 7"), std::string::npos) << dump;
  EXPECT_NE(dump.find("parked_in_a_named_function"), std::string::npos) << dump;
  EXPECT_NE(dump.find("DumpsEveryThreadSymbolized"), std::string::npos) << dump;  // the dumping thread
  EXPECT_EQ(dump.find("did not answer"), std::string::npos) << dump;
}

TEST(StackTraceDeathTest, SegfaultDumpsTheStacksThenDies) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  EXPECT_EXIT(
      {
        install_stack_trace_handlers(2);
        activity().step.store(3);
        raise(SIGSEGV);
      },
      testing::KilledBySignal(SIGSEGV), "SIGSEGV.*stack traces of rank 0 of 1 on host .*, step 3.*main");
}

TEST(StackTraceDeathTest, AbortDumpsTheStacksThenDies) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  EXPECT_EXIT(
      {
        install_stack_trace_handlers(2);
        std::abort();
      },
      testing::KilledBySignal(SIGABRT), "SIGABRT.*stack traces of.*main");
}

TEST(StackTrace, PeriodicDumpsGoToTheRunFolderPerRank) {
  TempDir dir;
  std::ostringstream log;
  Config cfg = diag_config(dir.path, {"collect_stack_trace=true", "stack_trace_to_cloud=true",
                                      "stack_trace_interval_seconds=0.1", "steps=8"});
  train::Trainer t(cfg, log);
  t.run([](const train::StepMetrics&) { std::this_thread::sleep_for(std::chrono::milliseconds(60)); });
  const fs::path file = dir.path / "d" / "diagnostics" / "stack_traces.rank0.txt";
  ASSERT_TRUE(fs::exists(file));
  const std::string text = read_file(file);
  EXPECT_NE(text.find("every 0.1 s (stack_trace_interval_seconds)"), std::string::npos) << text;
  EXPECT_NE(text.find("Trainer::run"), std::string::npos) << text;
}

// A run of 6 steps checkpointed at 3 and 6; the checkpoint at 6 is removed, so the resume restores
// step 3 and recomputes 3 steps: goodput.json counts them as lost, and the log says so.
TEST(Goodput, CountsTheStepsAResumeRecomputes) {
  TempDir dir;
  const std::vector<std::string> keys = {"enable_goodput_recording=true", "monitor_goodput=true",
                                         "enable_tensorboard=true",       "enable_checkpointing=true",
                                         "checkpoint_period=3",           "async_checkpointing=false"};
  {
    std::ostringstream log;
    train::Trainer t(diag_config(dir.path, keys), log);
    t.run();
    EXPECT_NE(log.str().find("final goodput: "), std::string::npos) << log.str();
  }
  fs::remove_all(dir.path / "d" / "checkpoints" / "6");
  const nlohmann::json first = nlohmann::json::parse(read_file(dir.path / "d" / "goodput.json"));
  EXPECT_EQ(first.at("max_step_reached"), 6);
  EXPECT_EQ(first.at("productive_steps"), 6);
  EXPECT_EQ(first.at("lost_steps"), 0);
  std::ostringstream log;
  std::vector<std::string> more = keys;
  more.push_back("steps=7");
  train::Trainer t(diag_config(dir.path, more), log);
  EXPECT_EQ(t.current_step(), 3);
  t.run();
  const nlohmann::json j = nlohmann::json::parse(read_file(dir.path / "d" / "goodput.json"));
  EXPECT_EQ(j.at("lost_steps"), 3);
  EXPECT_EQ(j.at("productive_steps"), 3 + 4);
  EXPECT_EQ(j.at("max_step_reached"), 7);
  EXPECT_GT(j.at("lost_seconds").get<double>(), 0);
  EXPECT_GT(j.at("total_seconds").get<double>(), first.at("total_seconds").get<double>());
  EXPECT_GT(j.at("checkpoint_save_seconds").get<double>(), 0);
  EXPECT_NE(log.str().find("(3 steps recomputed after a resume)"), std::string::npos) << log.str();
  // The TensorBoard scalars (monitor_goodput): the tag is in the event file.
  bool tagged = false;
  for (const auto& f : fs::directory_iterator(dir.path / "d" / "tensorboard"))
    tagged = tagged || read_file(f.path()).find("goodput/goodput_percent") != std::string::npos;
  EXPECT_TRUE(tagged);
}

}  // namespace
}  // namespace tessera
