// The trace profiler's recorder (profiler=trace): spans in memory while a profiled step runs,
// written at the end as one Chrome trace-event JSON file (the "JSON Object Format": complete
// events "ph":"X" with microsecond timestamps, plus process and thread names), which Perfetto and
// chrome://tracing open. One process per rank ("pid" = rank), one thread track per kind of work.
#pragma once

#include <cstdint>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "tessera/graph/graph.h"

namespace tessera::train {

enum class Track { kSteps, kNodes, kCollectives, kData, kCheckpoint, kCheckpointWriter };

class TraceRecorder {
 public:
  TraceRecorder(const graph::Graph& graph, int rank, std::filesystem::path file);

  void set_active(bool on);
  bool active() const { return active_; }
  // A span of [t0, t1] (steady_ns()); `node` >= 0 adds the plan node's op, phase and layer.
  // Thread-safe (the checkpoint writer records from its own thread).
  void span(const char* name, const char* category, Track track, int64_t t0_ns, int64_t t1_ns, int node = -1,
            int64_t step = -1);
  size_t size() const;
  // Writes the file (atomically); returns its path.
  std::filesystem::path write() const;

 private:
  struct Event {
    const char* name;
    const char* category;
    Track track;
    int64_t t0_ns, t1_ns;
    int node;
    int64_t step;
  };
  const graph::Graph& graph_;
  int rank_;
  std::filesystem::path file_;
  int64_t origin_ns_;
  bool active_ = false;
  mutable std::mutex mu_;
  std::vector<Event> events_;
};

}  // namespace tessera::train
