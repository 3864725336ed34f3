// Goodput (enable_goodput_recording, monitor_goodput): where the job's wall time went, in
// MaxText's terms. Productive time is the steps' time less their data waiting; badput is start-up
// (building the plan, arenas, initialisation), data waiting, checkpoint saves (the step loop's
// stall) and restores, and lost time: the steps a resume recomputes (those completed after the
// checkpoint it restored). goodput = productive / total wall time, over every run of the job:
// world rank 0 keeps the cumulative figures in {base_output_directory}/{run_name}/goodput.json
// (written atomically every log step and at the end), and a resume adds to them.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "tessera/train/tensorboard.h"

namespace tessera::train {

struct GoodputTotals {
  double total = 0, productive = 0, startup = 0, data = 0, checkpoint_save = 0, checkpoint_restore = 0,
         lost = 0;
  int64_t productive_steps = 0, lost_steps = 0;
  int64_t max_step_reached = 0;  // completed steps, the highest any run of the job reached
};

class Goodput {
 public:
  // `file`: the job's goodput.json (read now when it exists; empty path: no persistence).
  explicit Goodput(std::filesystem::path file);

  // The run resumed at `step` (0: a fresh start): steps past it that an earlier run completed
  // are lost, with their share of that run's productive time.
  void resumed_at(int64_t step);
  void add_startup(double s) { run_.startup += s; }
  void add_data(double s) { run_.data += s; }
  void add_checkpoint_save(double s) { run_.checkpoint_save += s; }
  void add_checkpoint_restore(double s) { run_.checkpoint_restore += s; }
  // A completed step (its index, 0-based) that took `seconds`, of which `data_seconds` waiting.
  void add_step(int64_t step, double seconds, double data_seconds);

  // The cumulative totals with this run's wall time so far (`run_seconds`).
  GoodputTotals totals(double run_seconds) const;
  std::string log_line(double run_seconds) const;
  std::vector<Scalar> scalars(double run_seconds) const;  // goodput/... TensorBoard tags
  void save(double run_seconds) const;                    // goodput.json, atomically

 private:
  std::filesystem::path file_;
  GoodputTotals before_;  // the earlier runs'
  GoodputTotals run_;     // this run's (its `total` unused: the caller passes the wall time)
};

}  // namespace tessera::train
