// The training run's diagnostics (docs/diagnostics.md): stack traces, the hang watchdog, the
// trace profiler and goodput, driven by the trainer through a few calls:
//
//   Diagnostics d(cfg, rank, world_size, log);   // after start-up; installs signal handlers
//   d.begin_run(first_step);                     // before the loop
//   per step: d.step_begin(step); ... d.step_end(step, seconds);
//   around data reads, checkpoint saves and restores: auto r = d.region(Region::kData);
//   the executor calls d.at(node, stage) around every node (graph::NodeObserver).
//
// - collect_stack_trace: every thread's stack (core/stack_trace.h) every
//   stack_trace_interval_seconds and on fatal signals, to stderr or to
//   {run}/diagnostics/stack_traces.rank<R>.txt (stack_trace_to_cloud).
// - The hang watchdog (hang_watchdog_step_multiple > 0): a thread that sees the current step run
//   longer than max(hang_watchdog_min_seconds, multiple x median step) (the first step: multiple
//   x hang_watchdog_min_seconds) dumps this rank's stacks,
//   writes {run}/diagnostics/hang.rank<R>.json (where it is: node, collective, whether it is
//   inside MPI waiting for the others), waits briefly for the other ranks' files, names the slow
//   rank (the one not waiting inside MPI, else the one furthest behind, else one that never wrote
//   its file) and calls the on_hang callback, which ends the process (cli/ chooses the exit code).
//   It uses the file system, not MPI: the MPI library is used by the main thread only, and that
//   thread is the one that is stuck.
// - profiler=trace: a Chrome trace-event JSON per rank, {run}/profile/trace.rank<R>.json, for
//   the steps [first + skip_first_n_steps_for_profiler, + profiler_steps - 1]: one track each for
//   the steps, the plan's nodes (name, op, phase, layer), the collectives (ParamSync's work around
//   a node and each MPI call inside it), the data loader and checkpoint saves and writes.
// - Goodput (goodput.h).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "tessera/config/config.h"
#include "tessera/graph/executor.h"
#include "tessera/train/goodput.h"

namespace tessera::train {

enum class Region { kData, kCheckpointSave, kCheckpointRestore, kCheckpointWrite, kEval };

class TraceRecorder;

class Diagnostics final : public graph::NodeObserver {
 public:
  // Checks the diagnostics keys (kConfig errors name them) and starts the diagnostics thread
  // when collect_stack_trace or the watchdog is on.
  Diagnostics(const Config& cfg, const graph::Graph& graph, int rank, int world_size, std::ostream& log);
  ~Diagnostics() override;

  // on_hang(message): called on the watchdog thread when a hang is found; it should end the
  // process (cli/ does, with the exit code it chooses). Unset: the report is printed, nothing more.
  static void set_hang_handler(std::function<void(const std::string&)> on_hang);
  // The live instance (nullptr when none): for the checkpoint writer thread's trace spans.
  static Diagnostics* current();

  // The run starts at `first_step` (after a resume: the restored step). Checks that the profiler
  // has steps to record.
  void begin_run(int64_t first_step);
  void step_begin(int64_t step);
  void step_end(int64_t step, double seconds);
  // Called after the loop (and by the destructor): writes a trace still being recorded.
  void end_run();

  // A scope: marks the activity for the dumps, records a trace span and goodput time.
  class Scope {
   public:
    Scope(Diagnostics* d, Region r);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Diagnostics* d_;
    Region r_;
    int64_t t0_;
    const char* previous_;
  };
  Scope region(Region r) { return Scope(this, r); }

  void at(int node, graph::NodeStage stage) override;

  Goodput* goodput() { return goodput_.get(); }
  bool profiling_now() const;

  // The folder of the run's diagnostics files: {base_output_directory}/{run_name}/diagnostics.
  static std::filesystem::path folder(const Config& cfg);

 private:
  void thread_main();
  void check_hang(int64_t now_ns);
  void report_hang(int64_t step, double elapsed, double limit, double median);
  void write_stacks(const std::string& reason);
  double median_step() const;

  const Config cfg_;
  const graph::Graph& graph_;
  int rank_, world_size_;
  std::ostream& log_;
  std::filesystem::path run_dir_;
  int stack_fd_ = 2;  // stderr, or this rank's stack trace file
  std::unique_ptr<TraceRecorder> trace_;
  std::unique_ptr<Goodput> goodput_;
  int64_t profile_first_ = -1, profile_last_ = -2;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::vector<double> step_seconds_;       // completed steps, for the median (under mu_)
  std::atomic<int64_t> step_start_ns_{0};  // 0 between steps
  std::atomic<int64_t> current_step_{-1};
  bool hang_reported_ = false;
  std::thread thread_;
};

}  // namespace tessera::train
