// Distributed training throughput and collectives: run under mpirun (or alone for the one-process
// reference). Builds the Trainer on the job's mesh from a config (default: the llama-125m preset,
// 4 sequences of 256 tokens per step over all ranks), runs warm-up steps, then measures steps
// twice: with the collectives overlapping compute (the normal mode) and with every collective
// waited for as soon as it starts (no prefetch). The time a rank spends in collectives in the
// second mode is all their time; in the first, what compute did not hide: the waits, and the
// progress calls between nodes, in which MPI copies and reduces on the compute thread (so on a
// rank with one core "hidden" work still costs compute time). Rank 0 prints one JSON line: the
// median and best step seconds and global tokens/s (normal mode), seconds per step blocked and in
// progress calls, the hidden share, and bytes per step per kind of collective, measured and
// expected from the layouts (graph::expected_traffic).
//
//   mpirun -np 2 ... build/dist_bench [--warmup 1] [--steps 3] [--profile] [key=value ...]
// --profile: rank 0 prints the executor's per-op table of the overlapped steps to stderr.
//   build/dist_bench num_threads=2                                  (the one-process reference)
// bench/dist_bench.sh runs the comparisons of RESULTS.md.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <string>
#include <vector>

#include "bench_util.h"
#include "tessera/config/config.h"
#include "tessera/core/error.h"
#include "tessera/dist/mesh.h"
#include "tessera/dist/mpi_communicator.h"
#include "tessera/train/trainer.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Phase {
  double step_seconds = 0, best_step_seconds = 0;    // the median and the fastest step
  double blocked_seconds = 0, progress_seconds = 0;  // per step
  tessera::dist::TrafficCounters bytes;
};

// Mean over `steps` steps; traffic and blocked time per step.
Phase measure(tessera::train::Trainer& t, int steps) {
  auto* sync = t.executor().param_sync();
  if (sync) sync->reset_exposed();
  const tessera::dist::TrafficCounters before = t.mesh().traffic();
  std::vector<double> times;
  for (int i = 0; i < steps; ++i) {
    const auto t0 = Clock::now();
    t.step();
    times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  Phase p;
  p.step_seconds = times[times.size() / 2];
  p.best_step_seconds = times.front();
  p.blocked_seconds = sync ? sync->exposed_seconds() / steps : 0;
  p.progress_seconds = sync ? sync->progress_seconds() / steps : 0;
  const tessera::dist::TrafficCounters after = t.mesh().traffic();
  p.bytes = {.all_reduce = (after.all_reduce - before.all_reduce) / steps,
             .all_gather = (after.all_gather - before.all_gather) / steps,
             .reduce_scatter = (after.reduce_scatter - before.reduce_scatter) / steps,
             .broadcast = (after.broadcast - before.broadcast) / steps,
             .all_to_all = (after.all_to_all - before.all_to_all) / steps};
  return p;
}

std::string bytes_json(const tessera::dist::TrafficCounters& b) {
  return fmt::format("{{\"all_gather\": {}, \"reduce_scatter\": {}, \"all_reduce\": {}, \"all_to_all\": {}}}",
                     b.all_gather, b.reduce_scatter, b.all_reduce, b.all_to_all);
}

}  // namespace

int main(int argc, char** argv) {
  tessera::bench::TrainArgs args = tessera::bench::parse_train_args(argc, argv, 1, 3);
  std::unique_ptr<tessera::dist::Communicator> world = tessera::dist::make_world_communicator();
  const int ranks = world->size();
  args.add_defaults({"model_name=llama-125m", "max_target_length=256", "run_name=dist_bench",
                     "enable_checkpointing=false", "enable_tensorboard=false", "device_peak_tflops=1",
                     fmt::format("per_device_batch_size={}", 4 / ranks)});
  const int warmup = args.warmup, steps = args.steps;
  const bool profile = args.profile;
  const std::string& config = args.config;
  std::vector<std::string>& overrides = args.overrides;
  overrides.push_back(fmt::format("steps={}", warmup + 2 * steps));
  try {
    const tessera::DeviceCount devices = tessera::dist::count_devices(*world);
    tessera::Config cfg = tessera::load_config(config, overrides, devices);
    const bool first = world->rank() == 0;
    std::ostream silent(nullptr);
    auto mesh = tessera::dist::make_mesh(cfg, std::move(world));
    tessera::train::Trainer t(cfg, first ? std::cerr : silent, mesh.get());
    for (int i = 0; i < warmup; ++i) t.step();
    t.executor().set_profiling(profile);
    const Phase overlapped = measure(t, steps);
    t.executor().set_profiling(false);
    if (profile && first) std::cerr << t.executor().profile_report() << "\n";
    if (auto* sync = t.executor().param_sync()) sync->set_overlap(false);
    const Phase serial = measure(t, steps);
    const double tokens = static_cast<double>(cfg.global_batch_size_to_train_on * cfg.max_target_length);
    const tessera::dist::TrafficCounters expected =
        tessera::graph::expected_traffic(t.plan().spec(), cfg.gradient_accumulation_steps);
    // Hidden: the collectives' time (all of it blocks without overlap) that neither a wait nor a
    // progress call spent on the compute thread when overlapping.
    const double serial_total = serial.blocked_seconds + serial.progress_seconds;
    const double hidden =
        serial_total > 0 ? 1 - (overlapped.blocked_seconds + overlapped.progress_seconds) / serial_total : 0;
    if (first)
      std::cout
          << fmt::format(
                 "{{\"ranks\": {}, \"threads\": {}, \"mesh\": \"data {} fsdp {} expert {}\", \"zero1\": {}, "
                 "\"dtype\": \"{}\", \"step_seconds\": {:.4f}, \"best_step_seconds\": {:.4f}, "
                 "\"tokens_per_second\": {:.1f}, "
                 "\"best_tokens_per_second\": {:.1f}, "
                 "\"blocked_seconds\": {:.4f}, \"progress_seconds\": {:.4f}, \"serial_step_seconds\": "
                 "{:.4f}, "
                 "\"serial_blocked_seconds\": {:.4f}, \"hidden_share\": {:.3f}, \"bytes\": {}, "
                 "\"expected_bytes\": {}}}",
                 ranks, cfg.num_threads, mesh->size(tessera::MeshAxis::kData),
                 mesh->size(tessera::MeshAxis::kFsdp), mesh->size(tessera::MeshAxis::kExpert),
                 cfg.shard_optimizer_over_data, cfg.dtype, overlapped.step_seconds,
                 overlapped.best_step_seconds, tokens / overlapped.step_seconds,
                 tokens / overlapped.best_step_seconds, overlapped.blocked_seconds,
                 overlapped.progress_seconds, serial.step_seconds, serial_total, hidden,
                 bytes_json(overlapped.bytes), bytes_json(expected))
          << std::endl;
  } catch (const std::exception& e) {
    std::cerr << "dist_bench: " << e.what() << "\n";
    tessera::dist::abort_job(1);
    return 1;
  }
  return 0;
}
