// Chrome trace-event JSON (trace.h).
#include "tessera/train/trace.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "tessera/core/file.h"
#include "tessera/core/stack_trace.h"

namespace tessera::train {

namespace {

const char* track_name(Track t) {
  switch (t) {
    case Track::kSteps:
      return "steps";
    case Track::kNodes:
      return "plan nodes";
    case Track::kCollectives:
      return "collectives (ParamSync and MPI)";
    case Track::kData:
      return "data loader";
    case Track::kCheckpoint:
      return "checkpoint (step loop)";
    case Track::kCheckpointWriter:
      return "checkpoint writer thread";
  }
  return "?";
}

const char* phase_name(graph::Phase p) {
  static const char* kNames[] = {"forward", "recompute", "backward", "optimizer"};
  return kNames[static_cast<int>(p)];
}

}  // namespace

TraceRecorder::TraceRecorder(const graph::Graph& graph, int rank, std::filesystem::path file)
    : graph_(graph), rank_(rank), file_(std::move(file)), origin_ns_(steady_ns()) {
  events_.reserve(1 << 16);
}

void TraceRecorder::set_active(bool on) {
  active_ = on;
}

void TraceRecorder::span(const char* name, const char* category, Track track, int64_t t0_ns, int64_t t1_ns,
                         int node, int64_t step) {
  std::lock_guard lock(mu_);
  events_.push_back({name, category, track, t0_ns, t1_ns, node, step});
}

size_t TraceRecorder::size() const {
  std::lock_guard lock(mu_);
  return events_.size();
}

std::filesystem::path TraceRecorder::write() const {
  std::lock_guard lock(mu_);
  std::filesystem::create_directories(file_.parent_path());
  AtomicFileWriter w(file_);
  w.append(R"({"displayTimeUnit":"ms","traceEvents":[)");
  w.append(fmt::format(R"({{"ph":"M","pid":{},"tid":0,"name":"process_name","args":{{"name":{}}}}})", rank_,
                       nlohmann::json(fmt::format("rank {} ({})", rank_, host_name())).dump()));
  for (int t = 0; t <= static_cast<int>(Track::kCheckpointWriter); ++t)
    w.append(fmt::format(R"(,{{"ph":"M","pid":{},"tid":{},"name":"thread_name","args":{{"name":"{}"}}}})",
                         rank_, t, track_name(static_cast<Track>(t))));
  const auto& nodes = graph_.nodes();
  for (const Event& e : events_) {
    std::string args;
    if (e.node >= 0 && e.node < static_cast<int>(nodes.size())) {
      const graph::Node& n = nodes[static_cast<size_t>(e.node)];
      args = fmt::format(R"("node":{},"op":"{}","phase":"{}","layer":{})", e.node, graph::op_name(n.op),
                         phase_name(n.phase), n.layer);
    }
    if (e.step >= 0) args += fmt::format(R"({}"step":{})", args.empty() ? "" : ",", e.step);
    w.append(fmt::format(
        R"(,{{"ph":"X","pid":{},"tid":{},"name":{},"cat":"{}","ts":{:.3f},"dur":{:.3f},"args":{{{}}}}})",
        rank_, static_cast<int>(e.track), nlohmann::json(e.name).dump(), e.category,
        static_cast<double>(e.t0_ns - origin_ns_) / 1e3, static_cast<double>(e.t1_ns - e.t0_ns) / 1e3, args));
  }
  w.append("]}\n");
  w.commit();
  return file_;
}

}  // namespace tessera::train
