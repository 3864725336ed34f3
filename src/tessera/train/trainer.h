// The training loop: builds the model's step plan from a Config, initialises parameters, and runs
// `steps` optimizer steps of gradient_accumulation_steps micro-steps each, logging one line per
// log_period step in MaxText's shape:
//   completed step: 12, seconds: 1.234, TFLOP/s/device: 0.456, Tokens/s/device: 6639.1,
//   total_weights: 8192, loss: 7.123, MFU: 51.2%
// TFLOP/s counts model FLOPs as MaxText does (3 x forward matmul and causal-attention FLOPs;
// recomputation not counted); MFU divides by the device's peak for the compute dtype, measured by
// a calibration loop at start-up unless device_peak_tflops is set.
#pragma once

#include <functional>
#include <memory>
#include <ostream>
#include <vector>

#include "tessera/config/config.h"
#include "tessera/graph/executor.h"
#include "tessera/models/llama.h"
#include "tessera/train/peak.h"
#include "tessera/train/schedule.h"

namespace tessera::train {

struct StepMetrics {
  int64_t step = 0;
  double loss = 0;
  double seconds = 0;
  double tflops_per_device = 0;
  double tokens_per_device = 0;
  double mfu = 0;
  double grad_norm = 0;
  double learning_rate = 0;
  int64_t total_weights = 0;  // tokens counted in the loss
};

models::ModelSpec model_spec_from_config(const Config& cfg);

class Trainer {
 public:
  Trainer(const Config& cfg, std::ostream& log);
  ~Trainer();

  // Runs from the current step to cfg.steps; calls `on_step` after each step when set.
  void run(const std::function<void(const StepMetrics&)>& on_step = {});
  // One optimizer step (all micro-steps); returns its metrics.
  StepMetrics step();

  graph::Plan& plan() { return *plan_; }
  graph::Executor& executor() { return *exec_; }
  const models::ModelSpec& spec() const { return spec_; }
  double startup_seconds() const { return startup_seconds_; }

 private:
  void fill_synthetic_batch(int64_t step, int64_t micro);
  void fill_dloss(int64_t counted_tokens);

  Config cfg_;
  std::ostream& log_;
  models::ModelSpec spec_;
  models::DecoderInputs inputs_;
  std::unique_ptr<graph::Plan> plan_;
  std::unique_ptr<graph::Executor> exec_;
  LrSchedule schedule_;
  DevicePeak peak_;
  double peak_flops_ = 0;
  int64_t step_ = 0;
  double startup_seconds_ = 0;
};

}  // namespace tessera::train
