// Native stack traces of every thread of the process, and the process's "where am I" state that
// goes with them (rank, host, step, graph node, collective).
//
// Unwinding is libunwind's (local unwinding, usable inside a signal handler); symbolization is
// elfutils' libdw (function names from the symbol tables, file:line from DWARF when the binary
// has it), demangled by the C++ runtime. To capture the other threads, the dumping thread sends
// each one (listed in /proc/self/task) a real-time signal whose handler unwinds its own stack
// into a preallocated slot; the dumper then symbolizes the slots. Nothing here allocates inside a
// signal handler except the fatal-signal path's symbolization, which is best effort: the process
// is about to die, and a second fault inside it ends the dump (the default action runs).
//
// Leaves out: other processes (each rank dumps itself), Python frames, and inlined frames' own
// names (the enclosing function is printed).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace tessera {

// What this process is doing, written by the threads that do it and read by the dumpers (from a
// watchdog thread or a signal handler): plain atomics, pointers to strings that outlive the run.
struct Activity {
  std::atomic<int> rank{0};
  std::atomic<int> world_size{1};
  std::atomic<int64_t> step{-1};    // the optimizer step being run; -1 before the first
  std::atomic<int> node_index{-1};  // the graph node being run; -1 between nodes
  std::atomic<const char*> node_name{nullptr};
  std::atomic<const char*> node_phase{nullptr};  // "forward", "recompute", "backward", "optimizer"
  std::atomic<const char*> collective{nullptr};  // the collective call in progress, e.g. "MPI_Allreduce"
  std::atomic<bool> in_collective_wait{false};   // inside the MPI call itself (waiting for peers)
  std::atomic<const char*> region{nullptr};      // "data loader", "checkpoint save", ... or nullptr
  // Called after each collective call with its steady-clock start and end (ns), when set (the
  // trace profiler).
  std::atomic<void (*)(const char* call, int64_t t0_ns, int64_t t1_ns)> on_collective{nullptr};
};
// The steady clock in nanoseconds, the time base of on_collective and the traces.
int64_t steady_ns();
Activity& activity();

// This host's name (gethostname), cached at the first call.
const char* host_name();

// Marks a collective call for the dumps and the hang watchdog: constructed before the MPI call,
// destroyed after it. The test hook TESSERA_TEST_SLEEP_IN_COLLECTIVE="RANK:STEP:SECONDS" makes
// rank RANK sleep SECONDS inside its first collective of step STEP, before the MPI call (how the
// hang watchdog is tested under mpirun); unset, it costs one relaxed load.
class CollectiveScope {
 public:
  explicit CollectiveScope(const char* call);
  ~CollectiveScope();
  CollectiveScope(const CollectiveScope&) = delete;
  CollectiveScope& operator=(const CollectiveScope&) = delete;

 private:
  const char* previous_;
  const char* call_;
  int64_t t0_ns_ = 0;
};

// One line describing the activity: "rank 1 of 2 on host h, step 12, node layers.0.mlp.wo
// (backward), collective MPI_Allreduce (waiting in MPI)".
std::string describe_activity();

// Every thread's symbolized stack, headed by describe_activity() and `reason`.
std::string dump_all_thread_stacks(const std::string& reason);

// Installs handlers for SIGSEGV, SIGBUS, SIGFPE, SIGILL and SIGABRT (on an alternate stack) that
// write the dump to `fd` and then re-raise the signal with its default action (so the exit status
// and core dump are those of the signal). Also installs the capture signal's handler, which
// dump_all_thread_stacks needs; calling it again replaces `fd`.
void install_stack_trace_handlers(int fd);

}  // namespace tessera
