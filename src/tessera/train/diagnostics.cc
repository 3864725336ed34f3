// Stack traces, the hang watchdog, the trace profiler's hooks and goodput's timers (diagnostics.h).
#include "tessera/train/diagnostics.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>

#include "tessera/core/error.h"
#include "tessera/core/file.h"
#include "tessera/core/stack_trace.h"
#include "tessera/train/trace.h"

namespace tessera::train {

namespace {

std::atomic<Diagnostics*> g_current{nullptr};
std::function<void(const std::string&)>& hang_handler() {
  static std::function<void(const std::string&)> f;
  return f;
}
TraceRecorder* g_trace = nullptr;  // the live recorder, for the collective hook

void record_collective(const char* call, int64_t t0, int64_t t1) {
  if (TraceRecorder* t = g_trace; t && t->active())
    t->span(call, "mpi", Track::kCollectives, t0, t1, -1, activity().step.load(std::memory_order_relaxed));
}

const char* region_name(Region r) {
  switch (r) {
    case Region::kData:
      return "data loader";
    case Region::kCheckpointSave:
      return "checkpoint save";
    case Region::kCheckpointRestore:
      return "checkpoint restore";
    case Region::kCheckpointWrite:
      return "checkpoint write";
    case Region::kEval:
      return "evaluation";
  }
  return "?";
}

Track region_track(Region r) {
  switch (r) {
    case Region::kData:
      return Track::kData;
    case Region::kCheckpointWrite:
      return Track::kCheckpointWriter;
    case Region::kEval:
      return Track::kSteps;
    default:
      return Track::kCheckpoint;
  }
}

const char* phase_name(graph::Phase p) {
  static const char* kNames[] = {"forward", "recompute", "backward", "optimizer"};
  return kNames[static_cast<int>(p)];
}

std::filesystem::path hang_file(const std::filesystem::path& folder, int rank) {
  return folder / fmt::format("hang.rank{}.json", rank);
}

// The hang report's verdict over every rank's report (null: none came): the ranks that did not
// report, else the ranks not waiting inside MPI, else the ranks furthest behind (lowest step,
// then node); then the others, waiting.
std::string hang_verdict(const std::vector<nlohmann::json>& reports) {
  const int world_size = static_cast<int>(reports.size());
  std::vector<int> silent, busy;
  for (int r = 0; r < world_size; ++r) {
    const nlohmann::json& j = reports[static_cast<size_t>(r)];
    if (j.is_null())
      silent.push_back(r);
    else if (!j.value("in_collective_wait", false))
      busy.push_back(r);
  }
  std::string verdict;
  auto describe = [&](int r) {
    const nlohmann::json& j = reports[static_cast<size_t>(r)];
    return j.is_null() ? fmt::format("rank {} (no report)", r)
                       : j.value("activity", fmt::format("rank {}", r));
  };
  std::vector<int> slow = !silent.empty() ? silent : busy;
  if (slow.empty() || static_cast<int>(slow.size()) == world_size) {
    // Every rank waits inside MPI (or none does): the ones furthest behind.
    std::vector<int> all;
    for (int r = 0; r < world_size; ++r) all.push_back(r);
    auto key = [&](int r) {
      const nlohmann::json& j = reports[static_cast<size_t>(r)];
      return std::pair<int64_t, int>(j.value("step", int64_t{0}), j.value("node_index", 0));
    };
    const auto lowest =
        key(*std::min_element(all.begin(), all.end(), [&](int x, int y) { return key(x) < key(y); }));
    slow.clear();
    for (int r : all)
      if (key(r) == lowest) slow.push_back(r);
  }
  for (int r : slow)
    verdict += fmt::format("{}slow rank {}: {}", verdict.empty() ? "" : "; ", r, describe(r));
  std::string others;
  for (int r = 0; r < world_size; ++r)
    if (std::find(slow.begin(), slow.end(), r) == slow.end())
      others += fmt::format("\n  waiting: {}", describe(r));
  return verdict + others;
}

}  // namespace

std::filesystem::path Diagnostics::folder(const Config& cfg) {
  return std::filesystem::path(cfg.base_output_directory) / cfg.run_name / "diagnostics";
}

Diagnostics* Diagnostics::current() {
  return g_current.load();
}

void Diagnostics::set_hang_handler(std::function<void(const std::string&)> on_hang) {
  hang_handler() = std::move(on_hang);
}

Diagnostics::Diagnostics(const Config& cfg, const graph::Graph& graph, int rank, int world_size,
                         std::ostream& log)
    : cfg_(cfg),
      graph_(graph),
      rank_(rank),
      world_size_(world_size),
      log_(log),
      run_dir_(std::filesystem::path(cfg.base_output_directory) / cfg.run_name) {
  if (cfg.profiler == "xplane" || cfg.profiler == "nsys")
    fail(ErrorKind::kConfig,
         "profiler={}: that is a JAX/XLA (xplane) or CUDA (nsys) profiler, which Tessera does not have; "
         "use profiler=trace (a Chrome trace-event JSON per rank, for Perfetto) or profiler=\"\"",
         cfg.profiler);
  if (cfg.monitor_goodput && !cfg.enable_goodput_recording)
    fail(ErrorKind::kConfig,
         "monitor_goodput=true needs enable_goodput_recording=true (it reports what the "
         "recording measures)");
  Activity& a = activity();
  a.rank.store(rank);
  a.world_size.store(world_size);
  host_name();
  std::error_code ec;
  std::filesystem::remove(hang_file(folder(cfg_), rank_), ec);  // an earlier run's
  if (cfg.collect_stack_trace) {
    if (cfg.stack_trace_to_cloud) {
      std::filesystem::create_directories(folder(cfg_));
      const std::string path = (folder(cfg_) / fmt::format("stack_traces.rank{}.txt", rank)).string();
      stack_fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      TESSERA_CHECK(stack_fd_ >= 0, ErrorKind::kIo, "stack_trace_to_cloud: cannot open {}: {}", path,
                    std::strerror(errno));
    }
    install_stack_trace_handlers(stack_fd_);
  }
  if (cfg.profiler == "trace") {
    trace_ = std::make_unique<TraceRecorder>(graph, rank,
                                             run_dir_ / "profile" / fmt::format("trace.rank{}.json", rank));
    g_trace = trace_.get();
    a.on_collective.store(record_collective);
  }
  if (cfg.enable_goodput_recording)
    goodput_ = std::make_unique<Goodput>(rank == 0 && !cfg.run_name.empty() ? run_dir_ / "goodput.json"
                                                                            : std::filesystem::path());
  g_current.store(this);
  if (cfg.collect_stack_trace || cfg.hang_watchdog_step_multiple > 0)
    thread_ = std::thread([this] { thread_main(); });
}

Diagnostics::~Diagnostics() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  try {
    end_run();
  } catch (const std::exception& e) {
    log_ << "profiler: " << e.what() << "\n";
  }
  activity().on_collective.store(nullptr);
  g_trace = nullptr;
  g_current.store(nullptr);
  if (stack_fd_ > 2) ::close(stack_fd_);
}

void Diagnostics::begin_run(int64_t first_step) {
  if (!trace_) return;
  profile_first_ = first_step + cfg_.skip_first_n_steps_for_profiler;
  profile_last_ = std::min(profile_first_ + cfg_.profiler_steps - 1, cfg_.steps - 1);
  if (profile_first_ > profile_last_)
    fail(ErrorKind::kConfig,
         "profiler=trace: skip_first_n_steps_for_profiler={} leaves no step to profile (the run goes from "
         "step {} to step {})",
         cfg_.skip_first_n_steps_for_profiler, first_step, cfg_.steps - 1);
}

bool Diagnostics::profiling_now() const {
  return trace_ && trace_->active();
}

void Diagnostics::step_begin(int64_t step) {
  activity().step.store(step);
  current_step_.store(step);
  if (trace_ && step == profile_first_) trace_->set_active(true);
  step_start_ns_.store(steady_ns());
}

void Diagnostics::step_end(int64_t step, double seconds) {
  const int64_t t0 = step_start_ns_.exchange(0);
  if (trace_ && trace_->active()) {
    trace_->span("step", "step", Track::kSteps, t0, steady_ns(), -1, step);
    if (step == profile_last_) {
      trace_->set_active(false);
      log_ << fmt::format("profiler: steps {} to {} written to {}\n", profile_first_, profile_last_,
                          trace_->write().string());
      profile_last_ = -2;  // written
    }
  }
  std::lock_guard lock(mu_);
  step_seconds_.push_back(seconds);
}

void Diagnostics::end_run() {
  if (trace_ && profile_last_ >= 0 && trace_->size() > 0) {
    trace_->set_active(false);
    log_ << fmt::format("profiler: the run stopped before step {}: the steps recorded so far are in {}\n",
                        profile_last_, trace_->write().string());
    profile_last_ = -2;
  }
}

Diagnostics::Scope::Scope(Diagnostics* d, Region r) : d_(d), r_(r), t0_(steady_ns()), previous_(nullptr) {
  if (d_ && r_ != Region::kCheckpointWrite) previous_ = activity().region.exchange(region_name(r_));
}

Diagnostics::Scope::~Scope() {
  if (!d_) return;
  if (r_ != Region::kCheckpointWrite) activity().region.store(previous_);
  const int64_t t1 = steady_ns();
  if (d_->trace_ && d_->trace_->active())
    d_->trace_->span(region_name(r_), "io", region_track(r_), t0_, t1, -1, activity().step.load());
  if (Goodput* g = d_->goodput_.get()) {
    const double s = static_cast<double>(t1 - t0_) / 1e9;
    if (r_ == Region::kData) g->add_data(s);
    if (r_ == Region::kCheckpointSave) g->add_checkpoint_save(s);
    if (r_ == Region::kCheckpointRestore) g->add_checkpoint_restore(s);
  }
}

// Around every node: the activity for the dumps, and the trace's spans (ParamSync's work before
// and after the node on the collectives track, the kernel on the nodes track).
void Diagnostics::at(int node, graph::NodeStage stage) {
  thread_local int64_t t_sync0 = 0, t_kernel0 = 0, t_kernel1 = 0;
  Activity& a = activity();
  const graph::Node& n = graph_.nodes()[static_cast<size_t>(node)];
  const bool tracing = trace_ && trace_->active();
  switch (stage) {
    case graph::NodeStage::kSyncBegin:
      a.node_index.store(node, std::memory_order_relaxed);
      a.node_name.store(n.name.c_str(), std::memory_order_relaxed);
      a.node_phase.store(phase_name(n.phase), std::memory_order_relaxed);
      if (tracing) t_sync0 = steady_ns();
      break;
    case graph::NodeStage::kKernelBegin:
      if (a.node_index.load(std::memory_order_relaxed) != node) {  // the optimizer's nodes have no sync
        a.node_index.store(node, std::memory_order_relaxed);
        a.node_name.store(n.name.c_str(), std::memory_order_relaxed);
        a.node_phase.store(phase_name(n.phase), std::memory_order_relaxed);
        t_sync0 = 0;
      }
      if (tracing) {
        t_kernel0 = steady_ns();
        // The wait for this node's gathered parameters, when ParamSync did anything measurable.
        if (t_sync0 && t_kernel0 - t_sync0 > 2000)
          trace_->span("wait before", "sync", Track::kCollectives, t_sync0, t_kernel0, node, a.step.load());
      }
      break;
    case graph::NodeStage::kKernelEnd:
      if (tracing) {
        t_kernel1 = steady_ns();
        trace_->span(n.name.c_str(), phase_name(n.phase), Track::kNodes, t_kernel0, t_kernel1, node,
                     a.step.load());
      }
      if (n.phase == graph::Phase::kOptimizer) {  // no kSyncEnd follows
        a.node_index.store(-1, std::memory_order_relaxed);
        a.node_name.store(nullptr, std::memory_order_relaxed);
      }
      break;
    case graph::NodeStage::kSyncEnd:
      if (tracing) {
        const int64_t t = steady_ns();
        if (t - t_kernel1 > 2000)
          trace_->span("sync after", "sync", Track::kCollectives, t_kernel1, t, node, a.step.load());
      }
      a.node_index.store(-1, std::memory_order_relaxed);
      a.node_name.store(nullptr, std::memory_order_relaxed);
      break;
  }
}

double Diagnostics::median_step() const {
  if (step_seconds_.empty()) return 0;
  std::vector<double> v = step_seconds_;
  std::nth_element(v.begin(), v.begin() + static_cast<long>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

void Diagnostics::write_stacks(const std::string& reason) {
  const std::string s = dump_all_thread_stacks(reason) + "\n";
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t w = ::write(stack_fd_, s.data() + off, s.size() - off);
    if (w <= 0) break;
    off += static_cast<size_t>(w);
  }
}

// The diagnostics thread: periodic stack dumps and the watchdog's check, every 100 ms.
void Diagnostics::thread_main() {
  using namespace std::chrono;
  int64_t next_dump = steady_ns() + static_cast<int64_t>(cfg_.stack_trace_interval_seconds * 1e9);
  std::unique_lock lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, milliseconds(100));
    if (stop_) break;
    const int64_t now = steady_ns();
    lock.unlock();
    if (cfg_.collect_stack_trace && now >= next_dump) {
      write_stacks(
          fmt::format("every {} s (stack_trace_interval_seconds)", cfg_.stack_trace_interval_seconds));
      next_dump = now + static_cast<int64_t>(cfg_.stack_trace_interval_seconds * 1e9);
    }
    if (cfg_.hang_watchdog_step_multiple > 0 && !hang_reported_) check_hang(now);
    lock.lock();
  }
}

void Diagnostics::check_hang(int64_t now_ns) {
  const int64_t t0 = step_start_ns_.load();
  if (t0 == 0) return;
  double median;
  {
    std::lock_guard lock(mu_);
    median = median_step();
  }
  // The first step (no median yet; it also pays for first touches and warm-up) gets the multiple
  // of the floor.
  const double limit =
      median > 0 ? std::max(cfg_.hang_watchdog_min_seconds, cfg_.hang_watchdog_step_multiple * median)
                 : cfg_.hang_watchdog_min_seconds * cfg_.hang_watchdog_step_multiple;
  const double elapsed = static_cast<double>(now_ns - t0) / 1e9;
  if (elapsed <= limit) return;
  hang_reported_ = true;
  report_hang(current_step_.load(), elapsed, limit, median);
}

// This rank's report, the other ranks' (through files in the run's diagnostics folder), the
// verdict, and the end of the process.
void Diagnostics::report_hang(int64_t step, double elapsed, double limit, double median) {
  const Activity& a = activity();
  const char* collective = a.collective.load();
  const char* node = a.node_name.load();
  nlohmann::json me = {{"rank", rank_},
                       {"host", host_name()},
                       {"step", step},
                       {"elapsed_seconds", elapsed},
                       {"node_index", a.node_index.load()},
                       {"node", node ? node : ""},
                       {"region", a.region.load() ? a.region.load() : ""},
                       {"collective", collective ? collective : ""},
                       {"in_collective_wait", collective != nullptr && a.in_collective_wait.load()},
                       {"activity", describe_activity()}};
  const std::filesystem::path dir = folder(cfg_);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  try {
    write_file_atomically(hang_file(dir, rank_), me.dump() + "\n");
  } catch (const std::exception& e) {
    std::cerr << "hang watchdog: " << e.what() << "\n";
  }
  const std::string why = fmt::format("hang watchdog: step {} has run {:.1f} s, over the limit of {:.1f} s",
                                      step, elapsed, limit);
  if (stack_fd_ != 2) write_stacks(why);
  {
    const std::string s = dump_all_thread_stacks(why) + "\n";
    std::cerr << s << std::flush;
  }
  // The other ranks' reports: each rank's watchdog fires within about a poll interval of the
  // others' (their steps started together); wait up to 10 s for them.
  std::vector<nlohmann::json> reports(static_cast<size_t>(world_size_));
  reports[static_cast<size_t>(rank_)] = me;
  for (int waited = 0; waited < 100; ++waited) {
    bool all = true;
    for (int r = 0; r < world_size_; ++r) {
      if (!reports[static_cast<size_t>(r)].is_null()) continue;
      try {
        if (std::filesystem::exists(hang_file(dir, r))) {
          nlohmann::json j = nlohmann::json::parse(read_file(hang_file(dir, r)));
          if (j.value("step", int64_t{-1}) >= step - 1) reports[static_cast<size_t>(r)] = j;
        }
      } catch (const std::exception&) {
      }
      all = all && !reports[static_cast<size_t>(r)].is_null();
    }
    if (all) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const std::string verdict = hang_verdict(reports);
  const std::string message = fmt::format(
      "{} (hang_watchdog_step_multiple={} x the median step {:.3f} s, at least "
      "hang_watchdog_min_seconds={} s); {}",
      why, cfg_.hang_watchdog_step_multiple, median, cfg_.hang_watchdog_min_seconds, verdict);
  // cli/ installs the handler that ends the job; without one (a library user) the report is all.
  if (hang_handler()) hang_handler()(message);
  std::cerr << "tessera: " << message << std::endl;
}

}  // namespace tessera::train
