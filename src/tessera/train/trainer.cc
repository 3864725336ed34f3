#include "tessera/train/trainer.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <nlohmann/json.hpp>

#include "tessera/core/cpu_features.h"
#include "tessera/core/error.h"
#include "tessera/models/init.h"
#include "tessera/models/tensor_parallel.h"
#include "tessera/ops/optimizer.h"

namespace tessera::train {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Options whose machinery is not in this build are refused, never silently ignored.
void reject_unbuilt_options(const Config& cfg) {
  auto refuse = [](bool set, const char* what) {
    if (set) fail(ErrorKind::kConfig, "{} is not in this build yet", what);
  };
  refuse(
      cfg.eval_interval > 0 && cfg.eval_per_device_batch_size > 0 &&
          cfg.eval_per_device_batch_size != cfg.per_device_batch_size,
      "eval_per_device_batch_size other than per_device_batch_size (eval runs the training plan's shapes)");
  refuse(cfg.hardware != "cpu", "hardware other than cpu (the CUDA backend)");
  refuse(cfg.scan_layers, "scan_layers=true (stacked layer parameters)");
  refuse(cfg.adam_eps_root != 0, "adam_eps_root other than 0");
  refuse(cfg.attention_type != "global" && cfg.attention_type != "local_sliding",
         "attention_type other than global and local_sliding");
  if (cfg.run_name.empty() && (cfg.enable_checkpointing || cfg.enable_tensorboard))
    fail(ErrorKind::kConfig,
         "enable_checkpointing and enable_tensorboard write under {}/<run_name>/: set run_name "
         "(or set both false)",
         cfg.base_output_directory);
}

// Mesh axes whose machinery is not in this build, refused by name and size. Data and fsdp are
// the engine's (graph/param_sync.h); the Llama builder splits heads, MLP and vocabulary over tensor
// (models/tensor_parallel.h); the expert axis splits the MoE experts (graph/sharding_expert.h).
void reject_unbuilt_parallelism(const dist::Mesh& mesh) {
  for (int a = 0; a < kNumMeshAxes; ++a) {
    const auto axis = static_cast<MeshAxis>(a);
    if (axis == MeshAxis::kData || axis == MeshAxis::kFsdp || axis == MeshAxis::kTensor ||
        axis == MeshAxis::kExpert || mesh.size(axis) == 1)
      continue;
    fail(
        ErrorKind::kConfig,
        "the mesh's {} axis has size {} (ici_{}_parallelism x dcn_{}_parallelism): Tessera shards over data, "
        "fsdp, tensor and expert only; {} parallelism is not in this build yet",
        kMeshAxes[a].axis, mesh.size(axis), kMeshAxes[a].key, kMeshAxes[a].key, kMeshAxes[a].key);
  }
}

// SIGTERM and SIGINT set a flag that the step loop reads after each step (a handler may do no
// more: saving is not async-signal-safe). SA_RESETHAND restores the default action, so a second
// signal stops the process at once.
std::atomic<int> g_stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs a lock-free flag");
extern "C" void on_stop_signal(int sig) {
  g_stop_signal.store(sig, std::memory_order_relaxed);
}

class StopSignals {
 public:
  StopSignals() {
    g_stop_signal.store(0);
    struct sigaction sa = {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESETHAND | SA_RESTART;
    sigaction(SIGTERM, &sa, &old_term_);
    sigaction(SIGINT, &sa, &old_int_);
  }
  ~StopSignals() {
    sigaction(SIGTERM, &old_term_, nullptr);
    sigaction(SIGINT, &old_int_, nullptr);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  int received() const { return g_stop_signal.load(std::memory_order_relaxed); }

 private:
  struct sigaction old_term_ = {};
  struct sigaction old_int_ = {};
};

const char* signal_name(int sig) {
  return sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : "a signal";
}

}  // namespace

Trainer::Trainer(const Config& cfg, std::ostream& log, dist::Mesh* mesh) : cfg_(cfg), log_(log), mesh_(mesh) {
  const auto t0 = Clock::now();
  run_t0_ = t0;
  reject_unbuilt_options(cfg);
  if (!mesh_) {
    if (cfg.num_devices != 1)
      fail(ErrorKind::kConfig,
           "the config asks for {} devices, but this process runs alone: launch it with mpirun -np {} (or "
           "srun)",
           cfg.num_devices, cfg.num_devices);
    own_mesh_ = dist::make_mesh(cfg, dist::make_single_process_communicator());
    mesh_ = own_mesh_.get();
  }
  reject_unbuilt_parallelism(*mesh_);
  writes_outputs_ = mesh_->world().rank() == 0;
  set_num_threads(static_cast<int>(cfg.num_threads));
  build_plan();
  const double plan_seconds = since(t0);

  exec_ = std::make_unique<graph::Executor>(
      *plan_, std::make_unique<ops::RopeTable>(models::rope_config(spec_, spec_.seq)), mesh_);
  diag_ = std::make_unique<Diagnostics>(cfg_, plan_->spec().graph(), mesh_->world().rank(),
                                        mesh_->world().size(), log_);
  exec_->set_observer(diag_.get());
  // A run that will load its parameters (its own checkpoint, or a load path) skips the init: the
  // load overwrites every parameter, and a failed load stops the run.
  const bool will_load =
      (cfg.enable_checkpointing && !checkpoint::list_checkpoints(checkpoint::checkpoint_root(cfg)).empty()) ||
      !cfg.load_parameters_path.empty() || !cfg.load_full_state_path.empty();
  const auto t_init = Clock::now();
  if (!will_load) models::init_params(*plan_, static_cast<uint64_t>(cfg.init_weights_seed));
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
    mfu_peak_ = MfuPeak(cfg.device_peak_tflops * 1e12, nullptr);
  } else {
    peak_ = backends::backend_for(Device::cpu()).calibrate_peak(0.05);
    mfu_peak_ = MfuPeak(peak_.for_dtype(compute), [compute] {
      return backends::backend_for(Device::cpu()).calibrate_peak(0.05).for_dtype(compute);
    });
  }
  startup_seconds_ = since(t0);
  if (mesh_->num_devices() > 1) log_ << mesh_->describe() << "\n";
  log_ << plan_->summary() << "\n";
  log_ << fmt::format(
      "device: cpu ({}), {} threads, peak {:.1f} GFLOP/s for {} ({}){}; model TFLOP per step {:.4f} "
      "(MaxText's count over this rank's plan: 3 x forward matmul + causal attention, recompute not "
      "counted), executed TFLOP per step {:.4f} (backward and recompute as run); start-up {:.2f} s "
      "(plan and arenas {:.2f} s, init {:.2f} s)\n",
      isa_name(active_isa()), num_threads(), mfu_peak_.flops() / 1e9, dtype_name(compute),
      cfg.device_peak_tflops > 0                  ? "device_peak_tflops"
      : compute == DType::kBF16 && peak_.bf16_amx ? "calibrated on the AMX tiles"
                                                  : "calibrated",
      compute == DType::kBF16 && !peak_.bf16_attention.empty()
          ? fmt::format(", bf16 attention products on {}", peak_.bf16_attention)
          : std::string(),
      plan_->flops().model_training() * static_cast<double>(cfg.gradient_accumulation_steps) / 1e12,
      plan_->flops().executed_training() * static_cast<double>(cfg.gradient_accumulation_steps) / 1e12,
      startup_seconds_, plan_seconds, init_seconds);
  const Tensor& dloss = plan_->view(plan_->dloss());
  std::fill(dloss.ptr<float>(), dloss.ptr<float>() + dloss.numel(), 1.0f);
  open_data();
  const auto t_restore = Clock::now();
  {
    auto region = diag_->region(Region::kCheckpointRestore);
    restore_state();
  }
  if (Goodput* g = diag_->goodput()) {
    g->add_startup(since(t0) - since(t_restore));
    g->resumed_at(step_);
  }
  const std::filesystem::path run_dir = std::filesystem::path(cfg.base_output_directory) / cfg.run_name;
  if (cfg.enable_tensorboard && writes_outputs_)
    tensorboard_ = std::make_unique<TensorBoardWriter>(run_dir / "tensorboard");
  if (!cfg.metrics_file.empty() && writes_outputs_)
    metrics_file_ = std::make_unique<MetricsFile>(cfg.metrics_file, step_);
  log_ << std::flush;
}

// The model of this rank (its tensor slice, its rows of the batch) and its plan on the mesh.
void Trainer::build_plan() {
  spec_ = models::model_spec_from_config(cfg_);
  models::set_tensor_parallel(spec_, cfg_, mesh_->coord(MeshAxis::kTensor));
  // MaxText's batch: per_device_batch_size x devices sequences per micro-step, split over the
  // data x fsdp x expert ranks (tensor ranks share their rows).
  const int64_t readers = dist::batch_readers(*mesh_);
  if (cfg_.micro_batch_size_to_train_on % readers != 0)
    fail(ErrorKind::kConfig,
         "the micro-batch of {} sequences does not split over {} data x fsdp x expert rank(s)",
         cfg_.micro_batch_size_to_train_on, readers);
  spec_.batch = cfg_.micro_batch_size_to_train_on / readers;

  graph::Graph g;
  inputs_ = models::build_decoder(g, spec_);
  graph::PlanOptions po;
  po.remat_policy = cfg_.remat_policy;
  po.optimizer = cfg_.opt_type == "sgd" ? graph::OptimizerKind::kSgd : graph::OptimizerKind::kAdamW;
  for (int a = 0; a < kNumMeshAxes; ++a) {
    po.sharding.sizes[a] = mesh_->size(static_cast<MeshAxis>(a));
    po.sharding.coords[a] = mesh_->coord(static_cast<MeshAxis>(a));
  }
  po.sharding.rules = cfg_.logical_axis_rules;
  po.sharding.shard_optimizer_over_data = cfg_.shard_optimizer_over_data;
  po.sharding.ragged_buffer_factor = cfg_.ragged_buffer_factor;
  plan_ = std::make_unique<graph::Plan>(std::move(g), po);
}

// The training (and eval) iterators: ranks along data x fsdp x expert read disjoint rows; ranks
// along tensor read the same ones.
void Trainer::open_data() {
  const int64_t readers = dist::batch_readers(*mesh_);
  const int64_t reader = dist::batch_reader(*mesh_);
  auto data_options = [&](bool eval) {
    data::DataOptions o = data::data_options_from_config(cfg_, eval, readers, reader);
    o.batch = spec_.batch;
    return o;
  };
  data_ = std::make_unique<data::DataIterator>(data_options(/*eval=*/false));
  log_ << "data: " << data_->describe() << "\n";
  if (cfg_.eval_interval > 0) {
    if (cfg_.dataset_type != "synthetic" && cfg_.eval_dataset_path.empty())
      fail(ErrorKind::kConfig, "eval_interval={} needs eval_dataset_path (the held-out split)",
           cfg_.eval_interval);
    if (cfg_.dataset_type == "synthetic" && cfg_.eval_steps < 1)
      fail(ErrorKind::kConfig,
           "eval_interval={} on synthetic data needs eval_steps >= 1 (synthetic data has no end)",
           cfg_.eval_interval);
    eval_data_ = std::make_unique<data::DataIterator>(data_options(/*eval=*/true));
    log_ << "eval data: " << eval_data_->describe() << "\n";
  }
}

// MaxText's order: the run's own latest checkpoint, else load_parameters_path xor
// load_full_state_path (finalize_config refuses both), else the initialised parameters.
void Trainer::restore_state() {
  const auto t0 = Clock::now();
  std::optional<CheckpointInfo> info;
  std::string what;
  if (cfg_.enable_checkpointing) {
    checkpointer_ = std::make_unique<Checkpointer>(cfg_, *plan_, log_, mesh_);
    info = checkpointer_->restore_latest();
    what = "resumed from checkpoint";
  } else if (!cfg_.run_name.empty() &&
             !checkpoint::list_checkpoints(checkpoint::checkpoint_root(cfg_)).empty()) {
    log_ << fmt::format(
        "note: {} holds checkpoints, but enable_checkpointing=false: not resuming from them\n",
        checkpoint::checkpoint_root(cfg_).string());
  }
  if (!info && !cfg_.load_parameters_path.empty()) {
    info =
        checkpoint::restore_checkpoint(*plan_, cfg_.load_parameters_path, checkpoint::RestoreKind::kParams);
    what = "parameters loaded (optimizer state fresh) from";
  } else if (!info && !cfg_.load_full_state_path.empty()) {
    info = checkpoint::restore_checkpoint(*plan_, cfg_.load_full_state_path,
                                          checkpoint::RestoreKind::kFullState);
    what = "full state loaded from";
  }
  // Every rank must have restored the same step (they read the same folder; a rank that saw
  // another file system would diverge silently).
  if (mesh_->num_devices() > 1) {
    double steps[2] = {info ? static_cast<double>(info->step) : -1.0,
                       info ? -static_cast<double>(info->step) : 1.0};
    mesh_->world().all_reduce_f64(steps, 2, dist::ReduceOp::kMax);
    if (steps[0] != -steps[1])
      fail(ErrorKind::kRuntime,
           "the ranks restored different checkpoints (steps {} to {}): do they all see {}?", -steps[1],
           steps[0], checkpoint::checkpoint_root(cfg_).string());
  }
  if (!info) return;
  step_ = info->step;
  restore_data_iterator(*info);
  log_ << fmt::format("{} {}: continuing with step {} ({:.2f} s)\n", what, info->path.string(), step_,
                      since(t0));
}

nlohmann::json Trainer::data_iterator_state() const {
  return data_->state();
}

// Each data x fsdp x expert reader resumes its own position. A checkpoint of another number of readers
// carries over when the source is read as rows (synthetic data, packed token windows): reader r
// of R has drawn `row` rows, i.e. global rows below row x R, which R' readers reach at row x R / R'.
// Document streams (text, packing=false) have per-reader cursors that do not map: refused.
void Trainer::restore_data_iterator(const CheckpointInfo& info) {
  const int64_t readers = dist::batch_readers(*mesh_);
  const int64_t reader = dist::batch_reader(*mesh_);
  std::vector<data::IteratorState> saved;
  if (info.data_iterators.is_array())
    for (const auto& j : info.data_iterators) saved.push_back(j.get<data::IteratorState>());
  else if (!info.data_iterator.is_null())
    saved.push_back(info.data_iterator.get<data::IteratorState>());
  if (saved.empty()) return;
  if (static_cast<int64_t>(saved.size()) == readers) {
    data_->restore(saved[static_cast<size_t>(reader)]);
    return;
  }
  const data::IteratorState& first = saved[0];
  for (const data::IteratorState& st : saved)
    if (st.doc != 0 || st.offset != 0 || st.row != first.row || st.epoch != first.epoch)
      fail(ErrorKind::kConfig,
           "{}: saved by {} data x fsdp reader(s), restored by {}: the data position of a document stream "
           "(dataset_type=text or packing=false) does not carry over to another number of readers",
           info.path.string(), saved.size(), readers);
  const uint64_t global_rows = first.row * saved.size();
  if (global_rows % static_cast<uint64_t>(readers) != 0)
    fail(ErrorKind::kConfig, "{}: {} rows were read, which {} readers cannot split evenly",
         info.path.string(), global_rows, readers);
  data::IteratorState st = data_->state();  // this reader's signature
  st.epoch = first.epoch;
  st.row = global_rows / static_cast<uint64_t>(readers);
  data_->restore(st);
}

Trainer::~Trainer() = default;

// The plan's input buffers, which the data iterator fills in place.
data::Batch Trainer::input_batch() {
  auto span = [&](graph::ValueId v) {
    const Tensor& t = plan_->view(v);
    return std::span<int32_t>(t.ptr<int32_t>(), static_cast<size_t>(t.numel()));
  };
  return {span(inputs_.tokens), span(inputs_.targets), span(inputs_.positions), span(inputs_.segment_ids)};
}

// Mean loss over eval_steps batches of the eval split (all of it when eval_steps = -1).
void Trainer::evaluate() {
  const auto t0 = Clock::now();
  eval_data_->reset();
  const data::Batch batch = input_batch();
  double loss_sum = 0;
  int64_t counted = 0, batches = 0;
  data::BatchInfo info;
  // Every rank runs the same number of batches (the collectives of a sharded forward pass need
  // them all): a pass ends when any rank's share of the eval split does.
  for (;;) {
    double more =
        (cfg_.eval_steps < 0 || batches < cfg_.eval_steps) && eval_data_->next(batch, &info) ? 1 : 0;
    if (mesh_->num_devices() > 1) mesh_->world().all_reduce_f64(&more, 1, dist::ReduceOp::kMax);
    if (more == 0) break;
    if (info.rows == 0) std::fill(batch.targets.begin(), batch.targets.end(), -1);  // this rank ran out
    int64_t c = 0;
    loss_sum += exec_->forward_only(&c);
    counted += c;
    info = {};
    ++batches;
  }
  double sums[2] = {loss_sum, static_cast<double>(counted)};
  sum_over_batch(sums, 2);
  loss_sum = sums[0];
  counted = static_cast<int64_t>(sums[1]);
  const double loss = counted > 0 ? loss_sum / static_cast<double>(counted) : 0.0;
  log_ << fmt::format(
              "eval after step {}: avg_loss {:.4f}, perplexity {:.2f}, {} batches, {} tokens, {:.2f} s\n",
              step_ - 1, loss, std::exp(loss), batches, counted, since(t0))
       << std::flush;
  const std::array<Scalar, 2> scalars = {
      {{"eval/avg_loss", loss}, {"eval/total_weights", static_cast<double>(counted)}}};
  if (tensorboard_) tensorboard_->write(step_ - 1, scalars);
  if (metrics_file_) metrics_file_->write(step_ - 1, scalars);
}

StepMetrics Trainer::step() {
  const auto t0 = Clock::now();
  const int64_t micro_steps = cfg_.gradient_accumulation_steps;
  // dloss is 1 on every token (set once at start-up), so the gradients accumulate the summed
  // loss of all micro-steps; the optimizer divides by the tokens counted (grad_divisor), as
  // MaxText does, so the update is that of the whole global batch whatever the padding.
  int64_t counted = 0;
  exec_->zero_grads();
  double loss_sum = 0;
  // The MoE load-balance losses (graph aux losses, one per layer) enter the objective as their mean
  // over layers weighted by the micro-batch's counted tokens: their seed is that count over the
  // layers, so that the optimizer's division by the counted tokens (grad_divisor) leaves the mean.
  const graph::ValueId daux = plan_->daux();
  const auto aux_layers = static_cast<double>(plan_->graph().aux_losses().size());
  double lb_sum = 0;
  const data::Batch batch = input_batch();
  diag_->step_begin(step_);
  double data_seconds = 0;
  for (int64_t m = 0; m < micro_steps; ++m) {
    data::BatchInfo info;
    const auto t_data = Clock::now();
    {
      auto region = diag_->region(Region::kData);
      TESSERA_CHECK(data_->next(batch, &info), ErrorKind::kInternal, "the training data iterator ran out");
    }
    data_seconds += since(t_data);
    counted += info.targets;
    if (daux != graph::kNoValue)
      plan_->view(daux).ptr<float>()[0] = static_cast<float>(static_cast<double>(info.targets) / aux_layers);
    exec_->set_step(step_);
    loss_sum += exec_->forward_backward(/*last_micro_step=*/m == micro_steps - 1);
    if (daux != graph::kNoValue) lb_sum += exec_->aux_loss() * static_cast<double>(info.targets) / aux_layers;
  }
  // The global batch's loss and token count: summed over the ranks that read different rows.
  double sums[3] = {loss_sum, static_cast<double>(counted), lb_sum};
  sum_over_batch(sums, 3);
  loss_sum = sums[0];
  counted = static_cast<int64_t>(sums[1]);
  lb_sum = sums[2];
  TESSERA_CHECK(counted > 0, ErrorKind::kRuntime, "step {}: the batch has no target tokens", step_);
  StepMetrics r;
  r.step = step_;
  r.loss = (loss_sum + lb_sum) / static_cast<double>(counted);
  if (daux != graph::kNoValue) r.moe_lb_loss = lb_sum / static_cast<double>(counted);
  if ((std::isnan(r.loss) && cfg_.abort_on_nan_loss) || (std::isinf(r.loss) && cfg_.abort_on_inf_loss))
    fail(ErrorKind::kRuntime, "the loss is {} at step {}: stopping (abort_on_nan_loss / abort_on_inf_loss)",
         r.loss, step_);
  graph::OptimizerStep os;
  r.learning_rate = schedule_.at(step_);
  os.adamw = {.lr = r.learning_rate,
              .b1 = cfg_.adam_b1,
              .b2 = cfg_.adam_b2,
              .eps = cfg_.adam_eps,
              .weight_decay = cfg_.adam_weight_decay,
              .step = step_ + 1};
  os.sgd_lr = r.learning_rate;
  os.clip_threshold = cfg_.gradient_clipping_threshold;
  os.grad_divisor = static_cast<double>(counted);
  r.grad_norm = exec_->apply_optimizer(os).grad_norm;
  r.seconds = since(t0);
  r.total_weights = counted;
  // Per device: the FLOPs of this rank's plan (its rows, and under tensor parallelism its shard of
  // the model), MaxText's count.
  const double flops = plan_->flops().model_training() * static_cast<double>(micro_steps);
  r.tflops_per_device = flops / r.seconds / 1e12;
  r.tokens_per_device = static_cast<double>(counted) / static_cast<double>(mesh_->num_devices()) / r.seconds;
  const double executed = plan_->flops().executed_training() * static_cast<double>(micro_steps);
  log_ << mfu_peak_.observe(step_, executed / r.seconds);
  r.mfu = flops / r.seconds / mfu_peak_.flops();
  r.hw_tflops_per_device = executed / r.seconds / 1e12;
  r.hfu = executed / r.seconds / mfu_peak_.flops();
  diag_->step_end(step_, r.seconds);
  if (Goodput* g = diag_->goodput()) g->add_step(step_, r.seconds, data_seconds);
  ++step_;
  return r;
}

// One step's scalars under MaxText's TensorBoard tags (and metrics_file keys).
void Trainer::write_metrics(const StepMetrics& m, bool flush) {
  if (!tensorboard_ && !metrics_file_) return;
  const double micro_steps = static_cast<double>(cfg_.gradient_accumulation_steps);
  std::array<Scalar, 14> scalars = {{
      {"learning/loss", m.loss},
      {"learning/grad_norm", m.grad_norm},
      {"learning/current_learning_rate", m.learning_rate},
      {"learning/total_weights", static_cast<double>(m.total_weights)},
      {"perf/step_time_seconds", m.seconds},
      {"perf/per_device_tflops", plan_->flops().model_training() * micro_steps / 1e12},
      {"perf/per_device_tflops_per_sec", m.tflops_per_device},
      {"perf/per_device_tokens",
       static_cast<double>(m.total_weights) / static_cast<double>(mesh_->num_devices())},
      {"perf/per_device_tokens_per_sec", m.tokens_per_device},
      {"perf/mfu", m.mfu},
      {"perf/per_device_hardware_tflops_per_sec", m.hw_tflops_per_device},
      {"perf/hfu", m.hfu},
  }};
  size_t n = 12;  // then the optional ones
  if (m.moe_lb_loss) scalars[n++] = {"learning/moe_lb_loss", *m.moe_lb_loss};
  if (m.param_norm) scalars[n++] = {"learning/param_norm", *m.param_norm};
  const std::span<const Scalar> s(scalars.data(), n);
  if (tensorboard_) {
    tensorboard_->write(m.step, s);
    if (flush) tensorboard_->flush();
  }
  if (metrics_file_) {
    metrics_file_->write(m.step, s);
    if (flush) metrics_file_->flush();
  }
}

void Trainer::sum_over_batch(double* values, size_t n) {
  dist::batch_group(*mesh_).all_reduce_f64(values, n);
}

// The strongest signal any rank received (every rank must stop after the same step).
int Trainer::agree_on_signal(int sig) {
  if (mesh_->num_devices() == 1) return sig;
  double s = sig;
  mesh_->world().all_reduce_f64(&s, 1, dist::ReduceOp::kMax);
  return static_cast<int>(s);
}

// Measured bytes of the first step against the figures the layouts predict (param_sync.h).
std::string Trainer::traffic_report(int64_t step, const dist::TrafficCounters& t) const {
  const dist::TrafficCounters e = graph::expected_traffic(plan_->spec(), cfg_.gradient_accumulation_steps);
  auto mib = [](uint64_t b) { return static_cast<double>(b) / (1 << 20); };
  return fmt::format(
             "collectives in step {} (this rank, buffer bytes): all-gather {:.2f} MiB, reduce-scatter {:.2f} "
             "MiB, "
             "all-reduce {:.2f} MiB, broadcast {:.2f} MiB; expected from the layouts: all-gather {:.2f} MiB "
             "(less "
             "the layers still gathered when the backward pass or the next micro-step starts), "
             "reduce-scatter "
             "{:.2f} "
             "MiB, all-reduce {:.2f} MiB (+ loss, norm and signal scalars); scratch of the non-blocking "
             "collectives {:.2f} MiB\n",
             step, mib(t.all_gather), mib(t.reduce_scatter), mib(t.all_reduce), mib(t.broadcast),
             mib(e.all_gather), mib(e.reduce_scatter), mib(e.all_reduce), mib(mesh_->scratch_bytes())) +
         (e.all_to_all == 0 && t.all_to_all == 0
              ? std::string()
              : fmt::format(
                    "all-to-alls in step {} (this rank's rows of its own tokens): {} bytes, of which {} "
                    "to or from other ranks; expected from the plan: {} bytes\n",
                    step, t.all_to_all, t.all_to_all_remote, e.all_to_all));
}

RunResult Trainer::run(const std::function<void(const StepMetrics&)>& on_step) {
  StopSignals signals;
  if (step_ >= cfg_.steps)
    log_ << fmt::format("nothing to train: the run is at step {} and steps={}\n", step_, cfg_.steps)
         << std::flush;
  const int64_t step_at_start = step_;
  if (step_ < cfg_.steps) diag_->begin_run(step_);
  while (step_ < cfg_.steps) {
    if (step_ == step_at_start) traffic_at_start_ = mesh_->traffic();
    StepMetrics m = step();
    const bool last = step_ == cfg_.steps;
    const bool log_step = m.step % cfg_.log_period == 0 || last;
    const int sig = agree_on_signal(signals.received());
    if (m.step == step_at_start && mesh_->num_devices() > 1) {
      const dist::TrafficCounters now = mesh_->traffic();
      log_ << traffic_report(
          m.step, {.all_reduce = now.all_reduce - traffic_at_start_.all_reduce,
                   .all_gather = now.all_gather - traffic_at_start_.all_gather,
                   .reduce_scatter = now.reduce_scatter - traffic_at_start_.reduce_scatter,
                   .broadcast = now.broadcast - traffic_at_start_.broadcast,
                   .all_to_all = now.all_to_all - traffic_at_start_.all_to_all,
                   .all_to_all_remote = now.all_to_all_remote - traffic_at_start_.all_to_all_remote});
    }
    if (log_step) {
      m.param_norm = exec_->param_norm();
      log_ << fmt::format(
                  "completed step: {}, seconds: {:.3f}, TFLOP/s/device: {:.3f}, Tokens/s/device: {:.1f}, "
                  "total_weights: {}, loss: {:.4f}{}, grad_norm: {:.3f}, lr: {:.3e}, MFU: {:.1f}%, "
                  "HW TFLOP/s/device: {:.3f}, HFU: {:.1f}%\n",
                  m.step, m.seconds, m.tflops_per_device, m.tokens_per_device, m.total_weights, m.loss,
                  m.moe_lb_loss ? fmt::format(", moe_lb_loss: {:.4f}", *m.moe_lb_loss) : "", m.grad_norm,
                  m.learning_rate, 100 * m.mfu, m.hw_tflops_per_device, 100 * m.hfu)
           << std::flush;
    }
    write_metrics(m, log_step || sig != 0);
    if (log_step) report_goodput(m.step, false);
    if (sig)
      log_ << fmt::format("received {} during step {}: stopping after it{} (a second signal stops at once)\n",
                          signal_name(sig), m.step, checkpointer_ ? " with a checkpoint" : "")
           << std::flush;
    if (checkpointer_) {
      checkpointer_->poll();
      // The last save and one forced by a signal are written before returning anyway: no snapshot.
      if (step_ % cfg_.checkpoint_period == 0 || last || sig) {
        auto region = diag_->region(Region::kCheckpointSave);
        if (metrics_file_) metrics_file_->sync();  // the checkpoint's steps' lines reach disk first
        checkpointer_->save(step_, data_iterator_state(), cfg_.async_checkpointing && !last && !sig);
      }
    }
    if (eval_data_ && step_ % cfg_.eval_interval == 0) {
      auto region = diag_->region(Region::kEval);
      evaluate();
    }
    if (on_step) on_step(m);
    if (sig) {
      diag_->end_run();
      report_goodput(m.step, true);
      log_ << fmt::format("stopped by {} after {} steps{}\n", signal_name(sig), step_,
                          checkpointer_ ? "; run the same command again to resume"
                                        : " (no checkpoint: enable_checkpointing=false)")
           << std::flush;
      return {.step = step_, .stop_signal = sig};
    }
  }
  if (checkpointer_) {
    auto region = diag_->region(Region::kCheckpointSave);
    checkpointer_->wait();
  }
  diag_->end_run();
  report_goodput(step_ - 1, true);
  return {.step = step_, .stop_signal = 0};
}

// The goodput line (world rank 0), its TensorBoard scalars (monitor_goodput) and goodput.json.
void Trainer::report_goodput(int64_t step, bool final) {
  Goodput* g = diag_->goodput();
  if (!g || !writes_outputs_) return;
  const double wall = since(run_t0_);
  log_ << (final ? "final " : "") << g->log_line(wall) << std::flush;
  if (tensorboard_ && cfg_.monitor_goodput) {
    const std::vector<Scalar> s = g->scalars(wall);
    tensorboard_->write(step, s);
    tensorboard_->flush();
  }
  g->save(wall);
}

}  // namespace tessera::train
