#include "tessera/train/trainer.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>

#include "tessera/core/cpu_features.h"
#include "tessera/core/error.h"
#include "tessera/models/init.h"

namespace tessera::train {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

uint64_t mix(uint64_t x) {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
// Options whose machinery is not in this build are refused, never silently ignored.
void reject_unbuilt_options(const Config& cfg) {
  auto refuse = [](bool set, const char* what) {
    if (set) fail(ErrorKind::kConfig, "{} is not in this build yet", what);
  };
  refuse(cfg.dataset_type != "synthetic", "dataset_type other than 'synthetic' (real data readers)");
  refuse(cfg.enable_checkpointing, "enable_checkpointing=true (checkpoints)");
  refuse(cfg.enable_tensorboard, "enable_tensorboard=true (TensorBoard event files)");
  refuse(!cfg.metrics_file.empty(), "metrics_file (JSONL metrics)");
  refuse(!cfg.load_parameters_path.empty(), "load_parameters_path (checkpoint loading)");
  refuse(!cfg.load_full_state_path.empty(), "load_full_state_path (checkpoint loading)");
  refuse(cfg.eval_interval > 0, "eval_interval > 0 (evaluation needs a real dataset)");
  refuse(cfg.hardware != "cpu", "hardware other than cpu (the CUDA backend)");
}

}  // namespace

models::ModelSpec model_spec_from_config(const Config& cfg) {
  models::ModelSpec s;
  s.decoder_block = cfg.decoder_block;
  s.emb_dim = cfg.emb_dim;
  s.num_query_heads = cfg.num_query_heads;
  s.num_kv_heads = cfg.num_kv_heads;
  s.head_dim = cfg.head_dim;
  s.mlp_dim = cfg.mlp_dim;
  s.num_decoder_layers = cfg.num_decoder_layers;
  s.vocab_size = cfg.vocab_size;
  s.norm_eps = cfg.normalization_layer_epsilon;
  s.logits_via_embedding = cfg.logits_via_embedding;
  s.rope_theta = static_cast<double>(cfg.rope_max_timescale);
  s.rope_type = cfg.rope_type;
  s.sliding_window = cfg.sliding_window_size;
  if (cfg.mlp_activations.size() != 2 || cfg.mlp_activations[1] != "linear")
    fail(ErrorKind::kConfig, "mlp_activations: Tessera's Llama block is the gated form [<act>, linear]; got [{}]",
         fmt::join(cfg.mlp_activations, ", "));
  s.mlp_activation = cfg.mlp_activations[0];
  s.dtype = dtype_from_name(cfg.dtype);
  const double pdb = cfg.per_device_batch_size;
  if (pdb < 1 || std::floor(pdb) != pdb)
    fail(ErrorKind::kConfig, "per_device_batch_size={}: Tessera trains whole sequences per device (an integer >= 1)",
         pdb);
  s.batch = static_cast<int64_t>(pdb);
  s.seq = cfg.max_target_length;
  return s;
}

Trainer::Trainer(const Config& cfg, std::ostream& log) : cfg_(cfg), log_(log) {
  const auto t0 = Clock::now();
  reject_unbuilt_options(cfg);
  if (cfg.num_devices != 1)
    fail(ErrorKind::kConfig, "this build trains on one device; the mesh asks for {}", cfg.num_devices);
  set_num_threads(static_cast<int>(cfg.num_threads));
  spec_ = model_spec_from_config(cfg);

  graph::Graph g;
  inputs_ = models::build_llama(g, spec_);
  graph::PlanOptions po;
  po.remat_policy = cfg.remat_policy;
  po.optimizer = cfg.opt_type == "sgd" ? graph::OptimizerKind::kSgd : graph::OptimizerKind::kAdamW;
  plan_ = std::make_unique<graph::Plan>(std::move(g), po);
  const double plan_seconds = since(t0);

  ops::RopeConfig rc{.max_timescale = spec_.rope_theta, .head_dim = spec_.head_dim, .max_positions = spec_.seq};
  if (spec_.rope_type == "llama3.1") rc.scaling = ops::RopeScaling::kLlama3;
  exec_ = std::make_unique<graph::Executor>(*plan_, std::make_unique<ops::RopeTable>(rc));
  const auto t_init = Clock::now();
  models::init_params(*plan_, static_cast<uint64_t>(cfg.init_weights_seed));
  const double init_seconds = since(t_init);

  schedule_.type = cfg.lr_schedule_type;
  schedule_.lr = cfg.learning_rate;
  schedule_.final_fraction = cfg.learning_rate_final_fraction;
  schedule_.schedule_steps = cfg.lr_schedule_steps;
  schedule_.warmup_fraction = cfg.warmup_steps_fraction;
  schedule_.wsd_decay_fraction = cfg.wsd_decay_steps_fraction;
  schedule_.wsd_decay_style = cfg.wsd_decay_style;

  const DType compute = spec_.dtype;
  if (cfg.device_peak_tflops > 0) {
    peak_flops_ = cfg.device_peak_tflops * 1e12;
  } else {
    peak_ = calibrate_cpu_peak();
    peak_flops_ = peak_.for_dtype(compute);
  }
  startup_seconds_ = since(t0);
  log_ << plan_->summary() << "\n";
  log_ << fmt::format(
      "device: cpu ({}), {} threads, peak {:.1f} GFLOP/s for {} ({}); model TFLOP per step {:.4f} "
      "(MaxText's count: 3 x forward matmul + causal attention, recompute not counted); "
      "start-up {:.2f} s (plan and arenas {:.2f} s, init {:.2f} s)\n",
      isa_name(active_isa()), num_threads(), peak_flops_ / 1e9, dtype_name(compute),
      cfg.device_peak_tflops > 0 ? "device_peak_tflops" : "calibrated", 
      spec_.training_flops_per_step() * static_cast<double>(cfg.gradient_accumulation_steps) / 1e12,
      startup_seconds_, plan_seconds, init_seconds);
}

Trainer::~Trainer() = default;

// Synthetic data: uniform random tokens from (data_shuffle_seed, step, micro-step, position);
// each row is one segment with positions 0..T-1; targets are the inputs shifted by one.
void Trainer::fill_synthetic_batch(int64_t step, int64_t micro) {
  const int64_t B = spec_.batch, T = spec_.seq, V = spec_.vocab_size;
  auto* tok = plan_->view(inputs_.tokens).ptr<int32_t>();
  auto* tgt = plan_->view(inputs_.targets).ptr<int32_t>();
  auto* pos = plan_->view(inputs_.positions).ptr<int32_t>();
  auto* seg = plan_->view(inputs_.segment_ids).ptr<int32_t>();
  const uint64_t base = mix(static_cast<uint64_t>(cfg_.data_shuffle_seed) ^ mix(static_cast<uint64_t>(step) * 1024 +
                                                                                static_cast<uint64_t>(micro)));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t <= T; ++t) {
      auto token = static_cast<int32_t>(mix(base ^ static_cast<uint64_t>(b * (T + 1) + t)) % static_cast<uint64_t>(V));
      if (t < T) tok[b * T + t] = token;
      if (t > 0) tgt[b * T + t - 1] = token;
    }
    for (int64_t t = 0; t < T; ++t) {
      pos[b * T + t] = static_cast<int32_t>(t);
      seg[b * T + t] = 1;
    }
  }
}

void Trainer::fill_dloss(int64_t counted_tokens) {
  const Tensor& d = plan_->view(plan_->dloss());
  const float w = counted_tokens > 0 ? 1.0f / static_cast<float>(counted_tokens) : 0.0f;
  for (int64_t i = 0; i < d.numel(); ++i) d.ptr<float>()[i] = w;
}

StepMetrics Trainer::step() {
  const auto t0 = Clock::now();
  const int64_t micro_steps = cfg_.gradient_accumulation_steps;
  const int64_t tokens_per_micro = spec_.batch * spec_.seq;
  // Every synthetic target counts, so the global batch's count is known before the first
  // micro-step; the loss gradient is 1 / count on every counted token of every micro-step.
  const int64_t counted = tokens_per_micro * micro_steps;
  fill_dloss(counted);
  exec_->zero_grads();
  double loss_sum = 0;
  for (int64_t m = 0; m < micro_steps; ++m) {
    fill_synthetic_batch(step_, m);
    loss_sum += exec_->forward_backward();
  }
  StepMetrics r;
  r.step = step_;
  r.loss = loss_sum / static_cast<double>(counted);
  if ((std::isnan(r.loss) && cfg_.abort_on_nan_loss) || (std::isinf(r.loss) && cfg_.abort_on_inf_loss))
    fail(ErrorKind::kRuntime, "the loss is {} at step {}: stopping (abort_on_nan_loss / abort_on_inf_loss)", r.loss,
         step_);
  graph::OptimizerStep os;
  r.learning_rate = schedule_.at(step_);
  os.adamw = {.lr = r.learning_rate, .b1 = cfg_.adam_b1, .b2 = cfg_.adam_b2, .eps = cfg_.adam_eps,
              .weight_decay = cfg_.adam_weight_decay, .step = step_ + 1};
  os.sgd_lr = r.learning_rate;
  os.clip_threshold = cfg_.gradient_clipping_threshold;
  r.grad_norm = exec_->apply_optimizer(os).grad_norm;
  r.seconds = since(t0);
  r.total_weights = counted;
  const double flops = spec_.training_flops_per_step() * static_cast<double>(micro_steps);
  r.tflops_per_device = flops / r.seconds / 1e12;
  r.tokens_per_device = static_cast<double>(counted) / r.seconds;
  r.mfu = flops / r.seconds / peak_flops_;
  ++step_;
  return r;
}

void Trainer::run(const std::function<void(const StepMetrics&)>& on_step) {
  while (step_ < cfg_.steps) {
    StepMetrics m = step();
    if (cfg_.log_period > 0 && (m.step % cfg_.log_period == 0 || m.step + 1 == cfg_.steps))
      log_ << fmt::format(
                  "completed step: {}, seconds: {:.3f}, TFLOP/s/device: {:.3f}, Tokens/s/device: {:.1f}, "
                  "total_weights: {}, loss: {:.4f}, grad_norm: {:.3f}, lr: {:.3e}, MFU: {:.1f}%\n",
                  m.step, m.seconds, m.tflops_per_device, m.tokens_per_device, m.total_weights, m.loss, m.grad_norm,
                  m.learning_rate, 100 * m.mfu)
           << std::flush;
    if (on_step) on_step(m);
  }
}

}  // namespace tessera::train
