// Tensor parallelism: the bytes the tensor axis's all-reduces move per step and the step's speed.
// Run under mpirun with ici_tensor_parallelism=<ranks>, or alone for the one-process reference:
//
//   mpirun -np 2 build/tp_bench ici_tensor_parallelism=2 num_threads=1 [--profile] [key=value ...]
//   build/tp_bench num_threads=2 [key=value ...]
//
// Defaults: llama-125m, 2 x 512 tokens per step, float32, remat_policy=full (the command line
// overrides any of them). For each measured step, rank 0 prints one JSON line with this rank's
// bytes into the tensor axis's all-reduces (the communicator's counters), the graph's count of
// them (graph::tensor_parallel_traffic, recomputation included) and Megatron's closed form for a
// step without recomputation, per micro-step
//     4 bytes x (N E (4 L + 2) + 3 N)
// (per layer 2 all-reduces of [N, E] forward, 2 backward; the embedding's forward and the final
// norm's input gradient; the loss's max of [N] and sums of [2, N]), and the step time and tokens/s.
// --profile prints the executor's per-op table (tp_all_reduce rows: time in the all-reduces).
#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "bench_util.h"
#include "tessera/config/config.h"
#include "tessera/core/error.h"
#include "tessera/dist/mesh.h"
#include "tessera/dist/mpi_communicator.h"
#include "tessera/graph/sharding.h"
#include "tessera/train/trainer.h"

int main(int argc, char** argv) {
  using namespace tessera;
  bench::TrainArgs args = bench::parse_train_args(argc, argv, 2, 5);
  args.add_defaults({"model_name=llama-125m", "per_device_batch_size=1", "max_target_length=512",
                     "dtype=float32", "remat_policy=full", "run_name=tp_bench", "enable_checkpointing=false",
                     "enable_tensorboard=false", "ici_fsdp_parallelism=1", "device_peak_tflops=1"});
  const int warmup = args.warmup, steps = args.steps;
  const bool profile = args.profile;
  const std::string& config = args.config;
  std::vector<std::string>& overrides = args.overrides;
  overrides.push_back(fmt::format("steps={}", warmup + steps));
  overrides.push_back("log_period=1000");
  std::unique_ptr<dist::Communicator> world = dist::make_world_communicator();
  const bool first = world->rank() == 0;
  try {
    const Config cfg = load_config(config, overrides, dist::count_devices(*world));
    std::unique_ptr<dist::Mesh> mesh = dist::make_mesh(cfg, std::move(world));
    train::Trainer trainer(cfg, std::cerr, mesh.get());
    dist::Communicator& tensor = mesh->axis(MeshAxis::kTensor);
    const graph::TensorParallelTraffic counted = graph::tensor_parallel_traffic(trainer.plan().graph());
    const models::ModelSpec& s = trainer.spec();
    const double n = static_cast<double>(s.batch * s.seq), e = static_cast<double>(s.emb_dim);
    const double micro = static_cast<double>(cfg.gradient_accumulation_steps);
    const double closed_form =
        s.tp_size > 1 ? micro * 4 * (n * e * (4 * static_cast<double>(s.num_decoder_layers) + 2) + 3 * n) : 0;
    uint64_t before = tensor.traffic().all_reduce;
    trainer.run([&](const train::StepMetrics& m) {
      const uint64_t now = tensor.traffic().all_reduce;
      if (m.step + 1 == warmup) trainer.executor().set_profiling(profile);
      if (m.step >= warmup && first)
        std::cout
            << fmt::format(
                   "{{\"tensor\": {}, \"threads\": {}, \"remat_policy\": \"{}\", \"step\": {}, "
                   "\"step_seconds\": {:.4f}, \"tokens_per_second\": {:.1f}, \"loss\": {:.4f}, "
                   "\"tp_all_reduce_bytes\": {}, \"graph_count_bytes\": {:.0f}, "
                   "\"graph_recompute_bytes\": {:.0f}, \"closed_form_bytes_without_recompute\": {:.0f}, "
                   "\"all_reduces\": {}}}",
                   s.tp_size, cfg.num_threads, cfg.remat_policy, m.step, m.seconds,
                   static_cast<double>(m.total_weights) / m.seconds, m.loss, now - before,
                   micro * counted.total(), micro * counted.recompute, closed_form,
                   static_cast<int64_t>(micro) * counted.all_reduces)
            << std::endl;
      before = now;
    });
    if (profile && first) std::cerr << trainer.executor().profile_report();
  } catch (const Error& e) {
    std::cerr << "tp_bench: " << e.what() << "\n";
    dist::abort_job(1);
    return 1;
  }
  return 0;
}
