// `tessera compile CONFIG [k=v ...] [--search]` (docs/compile.md): the plan of a run on
// compile_topology, without its hardware. Prints the memory per device and the verdict, the cost
// analysis with its assumptions, and writes compiled_trainstep_file when set. Exit status 0 when
// the run fits, kExitDoesNotFit when it does not (commands.h).
#include <fmt/format.h>
#include <fmt/ostream.h>
#include <yaml-cpp/yaml.h>

#include "tessera/cli/commands.h"
#include "tessera/compile/cost.h"
#include "tessera/compile/plan_file.h"
#include "tessera/compile/planner.h"
#include "tessera/compile/search.h"
#include "tessera/config/config.h"
#include "tessera/core/cpu_features.h"
#include "tessera/core/error.h"
#include "tessera/graph/autodiff.h"

namespace tessera::cli {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

double gib(double b) {
  return b / kGiB;
}

// compile_topology's name and slices come before the config can be resolved (the device count
// they give finalizes the mesh): the last command-line setting, else the config file's.
std::pair<std::string, int64_t> topology_keys(const ConfigArgs& args) {
  std::string name;
  int64_t slices = -1;
  bool have_name = false, have_slices = false;
  for (const std::string& o : args.overrides) {
    auto value = [&](std::string_view key) -> std::optional<std::string> {
      if (o.size() > key.size() && o.compare(0, key.size(), key) == 0 && o[key.size()] == '=')
        return o.substr(key.size() + 1);
      return std::nullopt;
    };
    if (auto v = value("compile_topology")) name = *v, have_name = true;
    if (auto v = value("compile_topology_num_slices")) {
      try {
        slices = std::stoll(*v);
      } catch (const std::exception&) {
        fail(ErrorKind::kConfig, "config key 'compile_topology_num_slices': '{}' is not an integer", *v);
      }
      have_slices = true;
    }
  }
  if (!have_name || !have_slices) {
    YAML::Node root;
    try {
      root = YAML::LoadFile(args.config_file);
    } catch (const YAML::Exception& e) {
      fail(ErrorKind::kConfig, "cannot read config file {}: {}", args.config_file, e.what());
    }
    if (!have_name && root["compile_topology"]) name = root["compile_topology"].as<std::string>();
    if (!have_slices && root["compile_topology_num_slices"])
      slices = root["compile_topology_num_slices"].as<int64_t>();
  }
  return {name, slices};
}

void print_memory(const compile::CompiledRun& run, std::ostream& out) {
  size_t worst = 0;
  for (size_t i = 1; i < run.memory.size(); ++i)
    if (run.memory[i].total() > run.memory[worst].total()) worst = i;
  const compile::DeviceMemory& w = run.memory[worst];
  fmt::print(out, "memory per device{}:\n",
             run.memory.size() > 1 ? fmt::format(" (largest rank class, {})", worst) : "");
  auto row = [&](const char* what, size_t bytes) {
    fmt::print(out, "  {:<38} {:>10.3f} GiB\n", what, gib(static_cast<double>(bytes)));
  };
  row("parameters (master + compute copies)", w.params);
  row("gradients", w.grads);
  row("optimizer state", w.optimizer);
  row(fmt::format("activations (remat {})", run.cfg.remat_policy).c_str(), w.activations);
  row("collective buffers", w.collective);
  if (w.kernels > 0) row("kernel buffers (blocked weight copy)", w.kernels);
  if (w.widened > 0) row("bf16 GEMM operands widened to f32", w.widened);
  row("other (batch inputs, runtime)", w.other);
  const compile::Verdict& v = run.verdict;
  fmt::print(out, "  {:<38} {:>10.3f} GiB of {:.3f} GiB ({})\n", "total", gib(static_cast<double>(v.needed)),
             gib(v.usable), run.topology.device.name);
  if (v.fits())
    fmt::print(out, "verdict: fits ({:.3f} GiB free, {:.1f}% of the device used)\n", gib(v.margin_bytes()),
               100.0 * static_cast<double>(v.needed) / v.usable);
  else
    fmt::print(out, "verdict: OUT OF MEMORY by {:.3f} GiB ({:.1f}% of the device)\n", gib(-v.margin_bytes()),
               100.0 * static_cast<double>(v.needed) / v.usable);
}

// The activation arena of rank 0 under every remat policy, the rest of the config unchanged.
void print_remat_table(const Config& cfg, std::ostream& out) {
  std::vector<std::string> cells;
  for (const std::string& policy : graph::remat_policy_names()) {
    Config c = cfg;
    c.remat_policy = policy;
    const compile::RankPlan rp = compile::build_rank_plan(c, dist::MeshSizes{});
    cells.push_back(fmt::format("{} {:.3f}", policy, gib(static_cast<double>(rp.plan.memory().activations))));
  }
  fmt::print(out, "activations by remat_policy (GiB): {}\n", fmt::join(cells, ", "));
}

void print_cost(const compile::CostReport& c, std::ostream& out) {
  fmt::print(out, "cost per step (one device):\n");
  fmt::print(
      out,
      "  FLOPs: model {:.4g} TFLOP (3 x forward, MFU's count), executed {:.4g} TFLOP (recompute {:.4g})\n",
      c.model_flops / 1e12, c.executed_flops / 1e12, c.recompute_flops / 1e12);
  fmt::print(out, "  memory traffic: {:.3f} GiB\n", gib(c.memory_bytes));
  for (const compile::AxisTraffic& t : c.traffic) {
    std::vector<std::string> parts;
    if (t.all_gather_bytes > 0)
      parts.push_back(fmt::format("all-gather {:.3f} GiB", gib(t.all_gather_bytes)));
    if (t.reduce_scatter_bytes > 0)
      parts.push_back(fmt::format("reduce-scatter {:.3f} GiB", gib(t.reduce_scatter_bytes)));
    if (t.all_reduce_bytes > 0)
      parts.push_back(fmt::format("all-reduce {:.3f} GiB", gib(t.all_reduce_bytes)));
    if (t.all_to_all_bytes > 0)
      parts.push_back(fmt::format("all-to-all {:.3f} GiB sent", gib(t.all_to_all_bytes)));
    fmt::print(out, "  collectives over {} ({} ranks, {} at {:.1f} GB/s): {}; {} calls, {:.4f} s{}\n",
               t.group, t.ranks, t.link, t.link_bytes_per_s / 1e9, fmt::join(parts, ", "), t.calls, t.seconds,
               t.overlapped ? " (overlapped)" : "");
  }
  fmt::print(
      out,
      "estimated step time: {:.4f} s (passes {:.4f} s, overlapped collectives {:.4f} s, exposed {:.4f} s, "
      "tensor all-reduces {:.4f} s, expert all-to-alls {:.4f} s, optimizer {:.4f} s)\n",
      c.step_seconds, c.compute_seconds, c.overlapped_comm_seconds, c.exposed_comm_seconds,
      c.tensor_comm_seconds, c.expert_comm_seconds, c.optimizer_seconds);
  fmt::print(out, "estimated MFU: {:.1f}% of {}; {:.1f} tokens/s/device; {}/device\n", 100 * c.mfu,
             compile::tflops_text(c.peak_flops), c.tokens_per_s_per_device,
             compile::tflops_text(c.model_flops / c.step_seconds));
  fmt::print(out, "assumptions:\n");
  for (const std::string& a : c.assumptions) fmt::print(out, "  - {}\n", a);
}

int run_search(const ConfigArgs& args, const compile::Topology& topo, std::ostream& out) {
  compile::SearchReport r = compile::search_layouts(args.config_file, args.overrides, topo);
  fmt::print(out, "search: {} layouts planned, {} refused by the config or model, {} out of memory, {} fit\n",
             r.planned, r.refused, r.too_big, r.fitting.size());
  for (size_t i = 0; i < r.fitting.size(); ++i) {
    const compile::SearchResult& s = r.fitting[i];
    fmt::print(out,
               "{:>3}. {:>9.1f} tokens/s/device, MFU {:4.1f}%, step {:.3f} s, {:.2f} of {:.2f} GiB: {}\n",
               i + 1, s.cost.tokens_per_s_per_device, 100 * s.cost.mfu, s.cost.step_seconds,
               gib(static_cast<double>(s.verdict.needed)), gib(s.verdict.usable), s.layout);
    fmt::print(out, "     {}\n", fmt::join(s.overrides, " "));
  }
  return r.fitting.empty() ? kExitDoesNotFit : kExitOk;
}

}  // namespace

int compile(const ConfigArgs& args, bool search, std::ostream& out) {
  fmt::print(out, "tessera compile: planning {}\n", args.config_file);
  const auto [name, slices] = topology_keys(args);
  const compile::Catalogue catalogue = compile::load_catalogue(compile::default_catalogue_path());
  std::optional<compile::CpuMachine> cpu;
  if (name.rfind("cpu-", 0) == 0) cpu = compile::measure_cpu_machine();
  const compile::Topology topo = compile::resolve_topology(catalogue, name, slices, cpu ? &*cpu : nullptr);
  fmt::print(out, "topology: {}\n", topo.describe());
  if (search) return run_search(args, topo, out);

  const Config cfg = load_config(args.config_file, args.overrides, {topo.num_devices(), topo.num_slices});
  set_num_threads(static_cast<int>(cfg.num_threads));
  if (!cfg.run_name.empty())
    fmt::print(out, "resolved config written to {}\n", write_resolved_config(cfg).string());
  const compile::CompiledRun run = compile::compile_run(cfg, topo);
  const graph::PlanSpec& plan = run.classes.at(0).plan;
  const models::ModelSpec& m = run.classes.at(0).model;
  std::vector<std::string> mesh;
  for (int a = 0; a < kNumMeshAxes; ++a)
    if (cfg.ici_parallelism[a] * cfg.dcn_parallelism[a] > 1)
      mesh.push_back(fmt::format("{} {} (ici {} x dcn {})", kMeshAxes[a].axis,
                                 cfg.ici_parallelism[a] * cfg.dcn_parallelism[a], cfg.ici_parallelism[a],
                                 cfg.dcn_parallelism[a]));
  fmt::print(out,
             "model: {} {:.3f}B parameters (emb {}, {} layers, {} heads / {} kv, mlp {}, vocab {}), {}; "
             "batch {} x {} "
             "tokens per rank per micro-step, {} micro-step(s), remat {}\n",
             m.decoder_block, static_cast<double>(m.num_params()) / 1e9, m.emb_dim, m.num_decoder_layers,
             m.num_query_heads, m.num_kv_heads, m.mlp_dim, m.vocab_size, cfg.dtype, m.batch, m.seq,
             cfg.gradient_accumulation_steps, cfg.remat_policy);
  fmt::print(out, "mesh: {} devices; {}\n", cfg.num_devices,
             mesh.empty() ? "one device" : fmt::format("{}", fmt::join(mesh, ", ")));
  fmt::print(out, "rank classes: {} planned (the mesh's corners), {} distinct; plan fingerprint {}\n",
             run.corners_planned, run.classes.size(), plan.fingerprint());
  fmt::print(out, "{}", plan.step_summary());
  print_memory(run, out);
  print_remat_table(cfg, out);
  print_cost(compile::estimate_cost(plan, cfg, topo), out);
  if (!cfg.compiled_trainstep_file.empty()) {
    compile::write_plan_file(cfg.compiled_trainstep_file, run);
    fmt::print(out, "plan written to {} (compiled_trainstep_file)\n", cfg.compiled_trainstep_file);
  }
  return run.verdict.fits() ? kExitOk : kExitDoesNotFit;
}

}  // namespace tessera::cli
