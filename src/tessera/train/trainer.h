// The training loop: builds the model's step plan from a Config, initialises parameters (or
// restores them, see below), and runs `steps` optimizer steps of gradient_accumulation_steps
// micro-steps each, logging one line per log_period step in MaxText's shape:
//   completed step: 12, seconds: 1.234, TFLOP/s/device: 0.456, Tokens/s/device: 6639.1,
//   total_weights: 8192, loss: 7.123, MFU: 51.2%
// TFLOP/s counts model FLOPs as MaxText does (3 x forward matmul and causal-attention FLOPs;
// recomputation not counted); MFU divides by the device's peak for the compute dtype, measured by
// a calibration loop at start-up unless device_peak_tflops is set, and measured again whenever a
// step runs faster than it (mfu_peak.h).
//
// Where the state comes from, in MaxText's order: the newest intact checkpoint of run_name (with
// enable_checkpointing), else load_parameters_path (parameters only, step 0) or
// load_full_state_path (parameters, optimizer state and step), else init_weights_seed.
// Outputs beside the log line: checkpoints every checkpoint_period steps, at the end and on
// SIGTERM/SIGINT (checkpoint.h); TensorBoard scalars every step (tensorboard.h); metrics_file JSON
// lines (metrics_writer.h). Both metric writers are flushed every log_period steps.
//
// Across processes (docs/distributed.md): the trainer runs on every rank of the mesh it is given.
// Each rank of the data x fsdp group reads its own rows (the data iterator's shard), ranks along
// `tensor` read the same rows; the global batch is per_device_batch_size x devices (x
// gradient_accumulation_steps), as in MaxText. The loss and token counts are summed over the
// group, so every rank logs the global loss; only world rank 0 writes the log, TensorBoard and
// metrics_file (cli/ gives the other ranks a silent stream). A stop signal seen by any rank stops
// every rank after the same step.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <vector>

#include "tessera/backends/backend.h"
#include "tessera/config/config.h"
#include "tessera/data/iterator.h"
#include "tessera/dist/mesh.h"
#include "tessera/graph/executor.h"
#include "tessera/models/decoder.h"
#include "tessera/train/checkpointer.h"
#include "tessera/train/diagnostics.h"
#include "tessera/train/metrics_writer.h"
#include "tessera/train/mfu_peak.h"
#include "tessera/train/schedule.h"
#include "tessera/train/tensorboard.h"

namespace tessera::train {

struct StepMetrics {
  int64_t step = 0;
  double loss = 0;
  double seconds = 0;
  double tflops_per_device = 0;
  double tokens_per_device = 0;
  double mfu = 0;
  // Executed FLOPs (FlopReport::executed_training: recomputation included) per second and over the
  // peak: the hardware rate and HFU beside MaxText's model TFLOP/s and MFU.
  double hw_tflops_per_device = 0;
  double hfu = 0;
  double grad_norm = 0;
  double learning_rate = 0;
  int64_t total_weights = 0;  // tokens counted in the loss
  // MoE: the load-balance loss (included in `loss`): the mean over MoE layers, weighted by each
  // micro-batch's counted tokens; nullopt for a model without one.
  std::optional<double> moe_lb_loss;
  std::optional<double> param_norm;  // global L2 norm of the parameters: on log steps only (run())
};

struct RunResult {
  int64_t step = 0;     // completed steps when run() returned
  int stop_signal = 0;  // SIGTERM or SIGINT when a signal stopped the run early, else 0
};

class Trainer {
 public:
  // `mesh` (not owned) is the job's; nullptr makes a one-device mesh (cfg must ask for one device).
  Trainer(const Config& cfg, std::ostream& log, dist::Mesh* mesh = nullptr);
  ~Trainer();

  // Runs from the current step to cfg.steps; calls `on_step` after each step when set. SIGTERM or
  // SIGINT during the run stops it after the current step, with a checkpoint when checkpointing
  // is on (a second signal kills the process at once).
  RunResult run(const std::function<void(const StepMetrics&)>& on_step = {});
  // One optimizer step (all micro-steps); returns its metrics.
  StepMetrics step();

  graph::Plan& plan() { return *plan_; }
  dist::Mesh& mesh() { return *mesh_; }
  graph::Executor& executor() { return *exec_; }
  const models::ModelSpec& spec() const { return spec_; }
  const models::DecoderInputs& inputs() const { return inputs_; }
  double startup_seconds() const { return startup_seconds_; }
  int64_t current_step() const { return step_; }  // completed steps: the next step to run

 private:
  data::Batch input_batch();
  void evaluate();
  void build_plan();
  void open_data();
  void restore_state();
  void restore_data_iterator(const CheckpointInfo& info);
  void write_metrics(const StepMetrics& m, bool flush);
  void report_goodput(int64_t step, bool final);
  nlohmann::json data_iterator_state() const;

  // The sum over the data x fsdp group (one rank: unchanged).
  void sum_over_batch(double* values, size_t n);
  int agree_on_signal(int sig);
  std::string traffic_report(int64_t step, const dist::TrafficCounters& t) const;

  Config cfg_;
  std::ostream& log_;
  std::unique_ptr<dist::Mesh> own_mesh_;
  dist::Mesh* mesh_ = nullptr;
  bool writes_outputs_ = true;  // world rank 0
  dist::TrafficCounters traffic_at_start_;
  models::ModelSpec spec_;
  models::DecoderInputs inputs_;
  std::unique_ptr<graph::Plan> plan_;
  std::unique_ptr<graph::Executor> exec_;
  std::unique_ptr<Diagnostics> diag_;             // stack traces, hang watchdog, trace profiler, goodput
  std::chrono::steady_clock::time_point run_t0_;  // the trainer's construction: goodput's wall time
  LrSchedule schedule_;
  backends::DevicePeak peak_;     // the start-up calibration (where bf16 runs, for the log)
  MfuPeak mfu_peak_{0, nullptr};  // what MFU and HFU divide by (mfu_peak.h)
  int64_t step_ = 0;
  double startup_seconds_ = 0;
  std::unique_ptr<data::DataIterator> data_;
  std::unique_ptr<data::DataIterator> eval_data_;  // when eval_interval > 0
  std::unique_ptr<Checkpointer> checkpointer_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
  std::unique_ptr<MetricsFile> metrics_file_;
};

}  // namespace tessera::train
