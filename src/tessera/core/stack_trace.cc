// Stack dumps with libunwind and libdw (stack_trace.h).
#include "tessera/core/stack_trace.h"

#define UNW_LOCAL_ONLY
#include <cxxabi.h>
#include <dirent.h>
#include <elfutils/libdwfl.h>
#include <fmt/format.h>
#include <libunwind.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

namespace tessera {

Activity& activity() {
  static Activity a;
  return a;
}

const char* host_name() {
  static char name[256] = {0};
  static std::once_flag once;
  std::call_once(once, [] {
    if (gethostname(name, sizeof name - 1) != 0) std::strcpy(name, "unknown");
  });
  return name;
}

namespace {

// TESSERA_TEST_SLEEP_IN_COLLECTIVE, parsed once: rank, step, seconds (-1: unset).
struct InjectedSleep {
  int rank = -1;
  int64_t step = -1;
  double seconds = 0;
  std::atomic<bool> done{false};
};
InjectedSleep& injected_sleep() {
  static InjectedSleep s;
  static std::once_flag once;
  std::call_once(once, [] {
    const char* v = std::getenv("TESSERA_TEST_SLEEP_IN_COLLECTIVE");
    long long step = -1;
    if (v && std::sscanf(v, "%d:%lld:%lf", &s.rank, &step, &s.seconds) == 3)
      s.step = step;
    else
      s.rank = -1;
  });
  return s;
}

}  // namespace

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

CollectiveScope::CollectiveScope(const char* call) : call_(call) {
  Activity& a = activity();
  if (a.on_collective.load(std::memory_order_relaxed)) t0_ns_ = steady_ns();
  previous_ = a.collective.exchange(call, std::memory_order_relaxed);
  InjectedSleep& s = injected_sleep();
  if (s.rank >= 0 && s.rank == a.rank.load(std::memory_order_relaxed) &&
      s.step == a.step.load(std::memory_order_relaxed) && !s.done.exchange(true)) {
    std::this_thread::sleep_for(std::chrono::duration<double>(s.seconds));
  }
  a.in_collective_wait.store(true, std::memory_order_relaxed);
}

CollectiveScope::~CollectiveScope() {
  Activity& a = activity();
  if (auto* f = a.on_collective.load(std::memory_order_relaxed); f && t0_ns_) f(call_, t0_ns_, steady_ns());
  a.in_collective_wait.store(previous_ != nullptr, std::memory_order_relaxed);
  a.collective.store(previous_, std::memory_order_relaxed);
}

std::string describe_activity() {
  const Activity& a = activity();
  std::string s = fmt::format("rank {} of {} on host {}", a.rank.load(), a.world_size.load(), host_name());
  const int64_t step = a.step.load();
  s += step >= 0 ? fmt::format(", step {}", step) : std::string(", before the first step");
  if (const char* n = a.node_name.load())
    s += fmt::format(", node {} #{} ({})", n, a.node_index.load(),
                     a.node_phase.load() ? a.node_phase.load() : "?");
  if (const char* r = a.region.load()) s += fmt::format(", in {}", r);
  if (const char* c = a.collective.load())
    s += fmt::format(", collective {} ({})", c,
                     a.in_collective_wait.load() ? "waiting for the other ranks inside MPI"
                                                 : "called, not yet inside MPI");
  return s;
}

namespace {

constexpr int kMaxFrames = 64;
constexpr int kMaxThreads = 512;

// One thread's captured stack; filled by that thread's capture-signal handler.
struct Slot {
  std::atomic<pid_t> tid{0};
  std::atomic<int> done{0};
  int depth = 0;
  void* pc[kMaxFrames];
};
Slot g_slots[kMaxThreads];
std::mutex g_dump_mutex;  // one dump at a time (periodic, watchdog)
std::atomic<int> g_fatal_fd{2};
std::atomic<bool> g_in_fatal{false};
int capture_signal() {
  return SIGRTMIN + 4;
}

pid_t this_tid() {
  return static_cast<pid_t>(syscall(SYS_gettid));
}

void capture_handler(int, siginfo_t*, void*) {
  const int saved_errno = errno;
  const pid_t tid = this_tid();
  for (Slot& s : g_slots) {
    if (s.tid.load(std::memory_order_acquire) != tid) continue;
    s.depth = unw_backtrace(s.pc, kMaxFrames);
    s.done.store(1, std::memory_order_release);
    break;
  }
  errno = saved_errno;
}

void install_capture_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa = {};
    sa.sa_sigaction = capture_handler;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(capture_signal(), &sa, nullptr);
  });
}

std::vector<pid_t> list_threads() {
  std::vector<pid_t> tids;
  DIR* d = opendir("/proc/self/task");
  if (!d) return tids;
  while (dirent* e = readdir(d))
    if (e->d_name[0] != '.') tids.push_back(static_cast<pid_t>(std::atoi(e->d_name)));
  closedir(d);
  return tids;
}

std::string thread_name(pid_t tid) {
  char path[64], buf[32] = {0};
  std::snprintf(path, sizeof path, "/proc/self/task/%d/comm", tid);
  FILE* f = std::fopen(path, "r");
  if (!f) return "?";
  if (!std::fgets(buf, sizeof buf, f)) buf[0] = 0;
  std::fclose(f);
  buf[std::strcspn(buf, "\n")] = 0;
  return buf;
}

// Symbolizes program counters with libdw over this process's mappings.
class Symbolizer {
 public:
  Symbolizer() {
    callbacks_.find_elf = dwfl_linux_proc_find_elf;
    callbacks_.find_debuginfo = dwfl_standard_find_debuginfo;
    dwfl_ = dwfl_begin(&callbacks_);
    if (dwfl_ &&
        (dwfl_linux_proc_report(dwfl_, getpid()) != 0 || dwfl_report_end(dwfl_, nullptr, nullptr) != 0)) {
      dwfl_end(dwfl_);
      dwfl_ = nullptr;
    }
  }
  ~Symbolizer() {
    if (dwfl_) dwfl_end(dwfl_);
  }
  // "function (file:line)" or "module+0xoffset".
  std::string describe(uintptr_t pc, bool return_address) const {
    // A return address points after the call: look up the call instruction's byte instead.
    const Dwarf_Addr addr = return_address && pc > 0 ? pc - 1 : pc;
    Dwfl_Module* m = dwfl_ ? dwfl_addrmodule(dwfl_, addr) : nullptr;
    if (!m) return fmt::format("0x{:x}", pc);
    std::string out;
    if (const char* sym = dwfl_module_addrname(m, addr)) {
      int status = 0;
      char* demangled = abi::__cxa_demangle(sym, nullptr, nullptr, &status);
      out = status == 0 && demangled ? demangled : sym;
      std::free(demangled);
    } else {
      Dwarf_Addr start = 0;
      const char* mod = dwfl_module_info(m, nullptr, &start, nullptr, nullptr, nullptr, nullptr, nullptr);
      out = fmt::format("{}+0x{:x}", mod ? mod : "?", addr - start);
    }
    if (Dwfl_Line* line = dwfl_module_getsrc(m, addr)) {
      int lineno = 0;
      if (const char* file = dwfl_lineinfo(line, nullptr, &lineno, nullptr, nullptr, nullptr))
        out += fmt::format(" ({}:{})", file, lineno);
    }
    return out;
  }

 private:
  Dwfl_Callbacks callbacks_ = {};
  Dwfl* dwfl_ = nullptr;
};

// Captures every thread's stack into g_slots (the caller's own directly); returns the slots used.
int capture_all(int timeout_ms) {
  install_capture_handler();
  const pid_t self = this_tid();
  std::vector<pid_t> tids = list_threads();
  if (tids.size() > kMaxThreads) tids.resize(kMaxThreads);
  const int n = static_cast<int>(tids.size());
  for (int i = 0; i < n; ++i) {
    g_slots[i].done.store(0, std::memory_order_relaxed);
    g_slots[i].depth = 0;
    g_slots[i].tid.store(tids[i], std::memory_order_release);
  }
  for (int i = 0; i < n; ++i) {
    if (tids[i] == self) {
      g_slots[i].depth = unw_backtrace(g_slots[i].pc, kMaxFrames);
      g_slots[i].done.store(1, std::memory_order_release);
    } else if (syscall(SYS_tgkill, getpid(), tids[i], capture_signal()) != 0) {
      g_slots[i].done.store(-1, std::memory_order_release);  // the thread has exited
    }
  }
  // Wait for the handlers; a thread that never answers (blocked the signal) is reported as such.
  const timespec tick = {0, 1'000'000};
  for (int waited = 0; waited < timeout_ms; ++waited) {
    bool all = true;
    for (int i = 0; i < n; ++i) all = all && g_slots[i].done.load(std::memory_order_acquire) != 0;
    if (all) break;
    nanosleep(&tick, nullptr);
  }
  return n;
}

std::string format_slots(int n) {
  Symbolizer sym;
  std::string out;
  for (int i = 0; i < n; ++i) {
    const Slot& s = g_slots[i];
    const pid_t tid = s.tid.load();
    const int done = s.done.load(std::memory_order_acquire);
    out += fmt::format("thread {} ({}){}\n", tid, thread_name(tid),
                       tid == static_cast<pid_t>(getpid()) ? " [main]" : "");
    if (done != 1) {
      out += done < 0 ? "  (exited)\n" : "  (did not answer the capture signal)\n";
      continue;
    }
    // The innermost frames are the capture itself (unw_backtrace, the handler, the signal
    // trampoline): skip up to the trampoline when it is there.
    int first = 0;
    for (int f = 0; f < s.depth && f < 4; ++f)
      if (sym.describe(reinterpret_cast<uintptr_t>(s.pc[f]), false).find("__restore_rt") != std::string::npos)
        first = f + 1;
    for (int f = first; f < s.depth; ++f)
      out += fmt::format("  #{:<2} {}\n", f - first,
                         sym.describe(reinterpret_cast<uintptr_t>(s.pc[f]), f > first));
  }
  for (int i = 0; i < n; ++i) g_slots[i].tid.store(0, std::memory_order_relaxed);
  return out;
}

void write_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t w = write(fd, s.data() + off, s.size() - off);
    if (w <= 0) return;
    off += static_cast<size_t>(w);
  }
}

const char* fatal_name(int sig) {
  switch (sig) {
    case SIGSEGV:
      return "SIGSEGV";
    case SIGBUS:
      return "SIGBUS";
    case SIGFPE:
      return "SIGFPE";
    case SIGILL:
      return "SIGILL";
    case SIGABRT:
      return "SIGABRT";
  }
  return "a fatal signal";
}

void fatal_handler(int sig, siginfo_t* info, void*) {
  if (!g_in_fatal.exchange(true)) {
    // Not async-signal-safe past this point (formatting, libdw): the process is dying anyway.
    const bool fault = sig == SIGSEGV || sig == SIGBUS || sig == SIGFPE || sig == SIGILL;
    const std::string head = fault && info
                                 ? fmt::format("\n*** {} (address {}) ***\n", fatal_name(sig), info->si_addr)
                                 : fmt::format("\n*** {} ***\n", fatal_name(sig));
    write_all(g_fatal_fd.load(), head);
    const int n = capture_all(1000);
    write_all(g_fatal_fd.load(), "stack traces of " + describe_activity() + "\n" + format_slots(n) + "\n");
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

}  // namespace

std::string dump_all_thread_stacks(const std::string& reason) {
  std::lock_guard lock(g_dump_mutex);
  const int n = capture_all(2000);
  return fmt::format("=== stack traces ({}) of {} ===\n{}", reason, describe_activity(), format_slots(n));
}

void install_stack_trace_handlers(int fd) {
  install_capture_handler();
  g_fatal_fd.store(fd);
  host_name();
  static std::once_flag once;
  std::call_once(once, [] {
    // An alternate stack, so that a stack overflow's SIGSEGV can still be reported: mapped, with
    // a guard page below it, and large (4 MiB) because the dump symbolizes on it (libdw and the
    // demangler use tens of KiB).
    constexpr size_t kAltStack = size_t{4} << 20, kGuard = 4096;
    void* alt = mmap(nullptr, kAltStack + kGuard, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (alt != MAP_FAILED) {
      mprotect(alt, kGuard, PROT_NONE);
      stack_t ss = {};
      ss.ss_sp = static_cast<char*>(alt) + kGuard;
      ss.ss_size = kAltStack;
      sigaltstack(&ss, nullptr);
    }
    struct sigaction sa = {};
    sa.sa_sigaction = fatal_handler;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) sigaction(sig, &sa, nullptr);
  });
}

}  // namespace tessera
