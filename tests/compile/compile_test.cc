// tessera compile: the verdict and its exit status, every rank class planned, the plan file's round
// trip and each mismatch it names, the search's layouts, and the planner's plan against the
// trainer's.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>

#include "tessera/backends/cpu/onednn_matmul.h"
#include "tessera/compile/cost.h"
#include "tessera/compile/plan_file.h"
#include "tessera/compile/planner.h"
#include "tessera/compile/search.h"
#include "tessera/core/cpu_features.h"
#include "tessera/core/error.h"
#include "tessera/core/source_dir.h"
#include "tessera/graph/op_table.h"
#include "tessera/graph/sharding_expert.h"
#include "tessera/train/trainer.h"
#include "testing/process_util.h"

namespace tessera::compile {
namespace {

namespace fs = std::filesystem;
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

fs::path base_config() {
  return tessera::source_dir() / "configs" / "base.yml";
}

const Catalogue& catalogue() {
  static const Catalogue c = load_catalogue(default_catalogue_path());
  return c;
}

// A two-core CPU target's machine, as the calibration would describe it.
const CpuMachine kTwoCores{.cores = 2,
                           .f32_flops = 1e11,
                           .bf16_flops = 1e11,
                           .gemm_f32_flops = 8e10,
                           .memory_bytes = 16 * kGiB,
                           .bandwidth_bytes_per_s = 1e10};

std::vector<std::string> small(std::vector<std::string> more = {}) {
  std::vector<std::string> o;
  for (std::string d : {"model_name=llama-test", "per_device_batch_size=2", "max_target_length=32",
                        "ici_fsdp_parallelism=1"}) {
    const std::string key = d.substr(0, d.find('=') + 1);
    bool given = false;
    for (const std::string& m : more) given = given || m.rfind(key, 0) == 0;
    if (!given) o.push_back(d);
  }
  o.insert(o.end(), more.begin(), more.end());
  return o;
}

// The config resolved for `topology` and the run compiled on it.
CompiledRun compile_on(const std::string& topology, const std::vector<std::string>& overrides) {
  const Topology t = resolve_topology(catalogue(), topology, 1, nullptr);
  const Config cfg = load_config(base_config(), overrides, {t.num_devices(), t.num_slices});
  return compile_run(cfg, t);
}

TEST(Compile, VerdictComparesTheLargestRankWithTheDevice) {
  CompiledRun fits = compile_on("h100-80gb-1", small());
  EXPECT_TRUE(fits.verdict.fits());
  EXPECT_EQ(fits.verdict.needed, fits.memory.at(0).total());
  // Llama-2-7B with an f32 master, gradient and AdamW state needs about 16 bytes a parameter.
  CompiledRun oom = compile_on("a100-40gb-1", {"model_name=llama2-7b", "per_device_batch_size=1",
                                               "max_target_length=512", "ici_fsdp_parallelism=1"});
  EXPECT_FALSE(oom.verdict.fits());
  EXPECT_GT(static_cast<double>(oom.memory.at(0).params + oom.memory.at(0).optimizer), 6.7e9 * 12 * 0.99);
  EXPECT_LT(oom.verdict.margin_bytes(), -40 * kGiB);
}

TEST(Compile, ExitStatusSaysWhetherItFits) {
  const std::string bin = testing::tessera_binary().string(), cfg = base_config().string();
  if (!fs::is_regular_file(bin)) GTEST_SKIP() << "no tessera binary at " << bin;
  auto run = [&](const std::string& args) {
    return testing::run_command(bin + " compile " + cfg + " " + args, 120);
  };
  testing::CommandResult ok =
      run("model_name=llama-test compile_topology=h100-80gb-1 per_device_batch_size=2");
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  for (const char* want :
       {"verdict: fits", "parameters", "gradients", "optimizer state", "activations (remat full)",
        "collective buffers", "other", "estimated step time", "estimated MFU", "assumptions:"})
    EXPECT_NE(ok.output.find(want), std::string::npos) << want << " in\n" << ok.output;
  testing::CommandResult oom =
      run("model_name=llama2-7b compile_topology=a100-40gb-1 per_device_batch_size=1");
  EXPECT_EQ(oom.exit_code, 4) << oom.output;
  EXPECT_NE(oom.output.find("verdict: OUT OF MEMORY by"), std::string::npos) << oom.output;
  testing::CommandResult bad = run("model_name=llama-test compile_topology=h800");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("h100-80gb"), std::string::npos) << bad.output;
}

// On data 2 x fsdp 2 x tensor 2, the 8 corners are the 8 ranks: each is planned, and a plan built
// for any rank is one of the classes.
TEST(Compile, EveryRankClassIsPlanned) {
  CompiledRun run = compile_on("h100-80gb", small({"ici_data_parallelism=2", "ici_fsdp_parallelism=2",
                                                   "ici_tensor_parallelism=2", "dcn_data_parallelism=1"}));
  EXPECT_EQ(run.corners_planned, 8);
  ASSERT_GE(run.classes.size(), 1u);
  for (int d = 0; d < 2; ++d)
    for (int f = 0; f < 2; ++f)
      for (int t = 0; t < 2; ++t) {
        dist::MeshSizes coords{};
        coords[static_cast<int>(MeshAxis::kData)] = d;
        coords[static_cast<int>(MeshAxis::kFsdp)] = f;
        coords[static_cast<int>(MeshAxis::kTensor)] = t;
        const RankPlan rp = build_rank_plan(run.cfg, coords);
        bool found = false;
        for (const RankPlan& k : run.classes) found = found || same_rank_class(k.plan, rp.plan);
        EXPECT_TRUE(found) << "rank " << d << "," << f << "," << t;
      }
  // Each class is a sharded plan: FSDP gathers and reduce-scatters, tensor all-reduces in the graph.
  const CostReport c = estimate_cost(run.classes[0].plan, run.cfg, run.topology);
  bool fsdp = false, tensor = false;
  for (const AxisTraffic& t : c.traffic) {
    fsdp = fsdp || (t.group == "fsdp" && t.all_gather_bytes > 0 && t.reduce_scatter_bytes > 0);
    tensor = tensor || (t.group.rfind("tensor", 0) == 0 && t.all_reduce_bytes > 0);
  }
  EXPECT_TRUE(fsdp);
  EXPECT_TRUE(tensor);
  EXPECT_GT(c.step_seconds, 0);
  EXPECT_GT(c.mfu, 0);
  EXPECT_LT(c.mfu, 1);
}

// A cpu target charges oneDNN's copy of the largest weight in its blocked layout, made once the
// GEMMs have 1024 rows (backends/cpu/onednn_matmul.h), and on a CPU without a bf16 GEMM the bf16
// operands widened to f32; a GPU target does neither.
TEST(Compile, CpuTargetsChargeTheBlockedWeightCopy) {
  auto memory = [&](const std::string& topology, const std::string& batch, const std::string& dtype) {
    const Topology t = resolve_topology(catalogue(), topology, 1, &kTwoCores);
    const Config cfg = load_config(
        base_config(), small({"per_device_batch_size=" + batch, "max_target_length=256", "dtype=" + dtype}),
        {t.num_devices(), 1});
    return compile_run(cfg, t).memory.at(0);
  };
  EXPECT_EQ(memory("cpu-2", "2", "float32").kernels, 0u);  // 512 rows
  // 1024 rows: the output projection [64, 512] (in f32 its input gradient's B, [512, 64], is as
  // large; bf16 keeps that one plain). Only oneDNN's AVX-512 GEMMs take the copy.
  const size_t copied = isa_supported(Isa::kAvx512) ? 1 : 0;
  const DeviceMemory cpu = memory("cpu-2", "4", "float32");
  EXPECT_EQ(cpu.kernels, copied * 64 * 512 * 4);
  // bf16: the copy in bf16 where oneDNN has a bf16 GEMM; else the GEMMs run widened to f32 (their
  // copies too) and their operands' f32 buffer is charged as well.
  const DeviceMemory bf16 = memory("cpu-2", "4", "bfloat16");
  if (cpu::onednn_matmul_native_bf16()) {
    EXPECT_EQ(bf16.kernels, copied * 64 * 512 * 2);
    EXPECT_EQ(bf16.widened, 0u);
  } else {
    EXPECT_EQ(bf16.kernels, copied * 64 * 512 * 4);
    EXPECT_GT(bf16.widened, size_t{64 * 512 * 4});  // at least the widened weight
  }
  EXPECT_EQ(cpu.widened, 0u);
  const DeviceMemory gpu = memory("h100-80gb-1", "4", "float32");
  EXPECT_EQ(gpu.kernels, 0u);
  EXPECT_EQ(cpu.total() - cpu.kernels - cpu.other, gpu.total() - gpu.other);
}

// On a CPU without a bf16 GEMM the experts' grouped matmuls run widened too: their buffer is
// charged at their largest GEMM, a chunk of up to 512 rows against one expert's whole weight, and
// the weight gradient's reduction over the rows of one group (at most one per token).
TEST(Compile, CpuTargetsChargeTheExpertsWidenedOperands) {
  const Topology t = resolve_topology(catalogue(), "cpu-2", 1, &kTwoCores);
  const Config cfg = load_config(base_config(),
                                 small({"model_name=mixtral-test", "override_model_config=true",
                                        "base_moe_mlp_dim=4096", "dtype=bfloat16"}),
                                 {1, 1});
  const DeviceMemory m = compile_run(cfg, t).memory.at(0);
  if (cpu::onednn_matmul_native_bf16()) {
    EXPECT_EQ(m.widened, 0u);
    return;
  }
  const int64_t rows = 2 * 32;  // batch x length: the rows one expert can be sent
  const backends::GemmShape up{
      .m = rows, .n = 4096, .k = 64, .ab_dtype = DType::kBF16, .c_dtype = DType::kBF16};
  const backends::GemmShape up_grad{
      .m = 64, .n = 4096, .k = rows, .trans_a = true, .ab_dtype = DType::kBF16, .c_dtype = DType::kF32};
  EXPECT_GE(m.widened, cpu::widened_operands_bytes(up));
  EXPECT_GE(m.widened, cpu::widened_operands_bytes(up_grad));
  EXPECT_GT(cpu::widened_operands_bytes(up), size_t{64 * 4096 * 4});  // at least the widened weight
}

TEST(Compile, ExpertParallelismIsPlanned) {
  const CompiledRun c = compile_on(
      "h100-80gb-2", small({"model_name=mixtral-test", "ici_expert_parallelism=2", "remat_policy=none"}));
  EXPECT_TRUE(c.verdict.fits());
  ASSERT_FALSE(c.classes.empty());
  EXPECT_NE(c.classes[0].plan.summary().find(" 8 all-to-alls"), std::string::npos)
      << c.classes[0].plan.summary();
}

// The cost analysis charges the expert axis's all-to-alls: the plan's exchanges (every pass), each
// sending the rank's R x E rows, on the critical path of the step.
TEST(Compile, ExpertAllToAllsAreCharged) {
  const CompiledRun c =
      compile_on("h100-80gb-2", small({"model_name=mixtral-test", "ici_expert_parallelism=2",
                                       "remat_policy=full", "gradient_accumulation_steps=2"}));
  const graph::PlanSpec& plan = c.classes.at(0).plan;
  const CostReport r = estimate_cost(plan, c.cfg, c.topology);
  const graph::ExpertParallelTraffic ep = graph::expert_parallel_traffic(plan.graph());
  ASSERT_GT(ep.total(), 0);
  EXPECT_GT(ep.recompute, 0);  // remat full repeats the forward's exchanges
  const AxisTraffic* t = nullptr;
  for (const AxisTraffic& a : r.traffic)
    if (a.group == "expert (tokens)") t = &a;
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->ranks, 2);
  EXPECT_DOUBLE_EQ(t->all_to_all_bytes, 2 * ep.total());  // two micro-steps
  EXPECT_EQ(t->calls, 2 * (ep.all_to_alls + ep.count_gathers));
  EXPECT_FALSE(t->overlapped);
  EXPECT_GT(r.expert_comm_seconds, 0);
  EXPECT_DOUBLE_EQ(r.expert_comm_seconds, t->seconds);
  EXPECT_DOUBLE_EQ(r.step_seconds, std::max(r.compute_seconds, r.overlapped_comm_seconds) +
                                       r.exposed_comm_seconds + r.tensor_comm_seconds +
                                       r.expert_comm_seconds + r.optimizer_seconds);
  // One expert rank exchanges nothing.
  const CompiledRun one = compile_on("h100-80gb-1", small({"model_name=mixtral-test"}));
  EXPECT_EQ(estimate_cost(one.classes.at(0).plan, one.cfg, one.topology).expert_comm_seconds, 0);
}

// On an expert rank the grouped matmuls run on the receive buffer (sized for the worst case) but
// touch only its filled rows: with balanced routing as many as one process's, so the bytes they
// are charged for rows equal one process's.
TEST(Compile, GroupedMatmulsOnTheReceiveBufferChargeItsFilledRows) {
  auto row_bytes = [](const CompiledRun& c) {
    const graph::Graph& g = c.classes.at(0).plan.graph();
    double b = 0;
    int ragged = 0;
    for (const graph::Node& n : g.nodes()) {
      if (n.op != graph::OpKind::kGroupedMatmul) continue;
      const auto& a = n.attr<graph::GroupedMatmulAttrs>();
      ragged += a.ragged_buffer;
      const graph::ValueId weights = a.weight_grad ? n.out[0] : n.in[1];
      // Less the expert weights and the group sizes, which an expert rank holds for its experts.
      b += graph::node_bytes(g, n) - graph::value_bytes(g, weights) - graph::value_bytes(g, n.in[2]);
    }
    return std::pair{b, ragged};
  };
  const auto one = row_bytes(compile_on("h100-80gb-1", small({"model_name=mixtral-test"})));
  const auto ep =
      row_bytes(compile_on("h100-80gb-2", small({"model_name=mixtral-test", "ici_expert_parallelism=2"})));
  EXPECT_EQ(one.second, 0);
  EXPECT_GT(ep.second, 0);
  EXPECT_DOUBLE_EQ(ep.first, one.first);
}

// A GPU group that leaves the node runs one ring per network port of its members in a node: FSDP
// over 8 GPUs of each of 2 nodes moves at 8 x 50 GB/s (below NVLink's 450), FSDP over one GPU of
// each node at one port's 50 GB/s.
TEST(Compile, GpuRingsLeavingTheNodeUseTheMembersPorts) {
  auto fsdp_link = [](const std::vector<std::string>& mesh) {
    const Topology t = resolve_topology(catalogue(), "h100-80gb", 2, nullptr);
    const Config cfg = load_config(base_config(), small(mesh), {t.num_devices(), t.num_slices});
    const CompiledRun run = compile_run(cfg, t);
    for (const AxisTraffic& a : estimate_cost(run.classes.at(0).plan, run.cfg, t).traffic)
      if (a.group == "fsdp") return std::pair{a.link, a.link_bytes_per_s};
    return std::pair{std::string("none"), 0.0};
  };
  const auto wide = fsdp_link({"ici_fsdp_parallelism=8", "dcn_fsdp_parallelism=2", "dcn_data_parallelism=1"});
  EXPECT_EQ(wide.first, "inter-node, 8 ports");
  EXPECT_DOUBLE_EQ(wide.second, 400e9);
  const auto thin = fsdp_link({"ici_fsdp_parallelism=1", "ici_data_parallelism=8", "dcn_fsdp_parallelism=2",
                               "dcn_data_parallelism=1"});
  EXPECT_EQ(thin.first, "inter-node");
  EXPECT_DOUBLE_EQ(thin.second, 50e9);
}

TEST(Compile, PipelineParallelismIsRefusedByName) {
  try {
    compile_on("h100-80gb-2", small({"ici_pipeline_parallelism=2"}));
    FAIL() << "pipeline parallelism planned";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_NE(std::string(e.what()).find("pipeline parallelism is not in this build"), std::string::npos)
        << e.what();
  }
}

// The planner builds what the trainer builds.
TEST(Compile, PlannerAgreesWithTheTrainer) {
  Config cfg = load_config(base_config(), small({"steps=1", "enable_checkpointing=false",
                                                 "enable_tensorboard=false", "device_peak_tflops=1"}));
  std::ostringstream log;
  train::Trainer trainer(cfg, log);
  const RankPlan rp = build_rank_plan(cfg, dist::MeshSizes{});
  EXPECT_EQ(rp.plan.fingerprint(), trainer.plan().spec().fingerprint());
}

class PlanFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tessera_plan_file_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    run_ = std::make_unique<CompiledRun>(compile_on("h100-80gb-2", small({"ici_fsdp_parallelism=2"})));
    path_ = dir_ / "plan.json";
    write_plan_file(path_, *run_);
    file_ = read_plan_file(path_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  // The first difference for the run `overrides` resolve to, at rank 0.
  std::string difference(const nlohmann::json& file, const std::vector<std::string>& overrides) {
    const Config cfg = load_config(base_config(), overrides, {2, 1});
    return first_difference(file, cfg, build_rank_plan(cfg, dist::MeshSizes{}));
  }
  fs::path dir_, path_;
  std::unique_ptr<CompiledRun> run_;
  nlohmann::json file_;
};

TEST_F(PlanFile, RoundTripsAndMatchesEveryRank) {
  ASSERT_EQ(file_.at("classes").size(), run_->classes.size());
  for (size_t i = 0; i < run_->classes.size(); ++i) {
    const graph::PlanSpec back = graph::PlanSpec::from_json(file_["classes"][i].at("plan"));
    EXPECT_TRUE(back == run_->classes[i].plan);
    EXPECT_EQ(back.fingerprint(), run_->classes[i].plan.fingerprint());
  }
  for (int64_t f = 0; f < 2; ++f) {
    dist::MeshSizes coords{};
    coords[static_cast<int>(MeshAxis::kFsdp)] = f;
    EXPECT_EQ(first_difference(file_, run_->cfg, build_rank_plan(run_->cfg, coords)), "")
        << "fsdp rank " << f;
  }
  EXPECT_NO_THROW(check_plan_file(path_, run_->cfg, build_rank_plan(run_->cfg, dist::MeshSizes{})));
}

TEST_F(PlanFile, NamesEachMismatch) {
  EXPECT_NE(
      difference(file_, small({"ici_fsdp_parallelism=2", "override_model_config=true", "base_emb_dim=128"}))
          .find("model: emb_dim is 64 in the file, 128"),
      std::string::npos);
  EXPECT_NE(difference(file_, small({"ici_fsdp_parallelism=2", "per_device_batch_size=4"}))
                .find("model: batch_per_rank is 2 in the file, 4 in this run"),
            std::string::npos);
  EXPECT_NE(difference(file_, small({"ici_fsdp_parallelism=2", "remat_policy=none"}))
                .find("run: remat_policy is \"full\" in the file, \"none\" in this run"),
            std::string::npos);
  EXPECT_NE(difference(file_, small({"ici_fsdp_parallelism=1", "ici_data_parallelism=2"}))
                .find("mesh ici: data is 1 in the file, 2 in this run"),
            std::string::npos);
  // What only the plans hold: a node's shape, a collective, the memory.
  const std::vector<std::string> same = small({"ici_fsdp_parallelism=2"});
  nlohmann::json node = file_;
  node["classes"][0]["plan"]["nodes"][3]["out"][0][3][0] = 12345;
  EXPECT_NE(difference(node, same).find("graph: node 3"), std::string::npos) << difference(node, same);
  nlohmann::json coll = file_;
  ASSERT_FALSE(coll["classes"][0]["plan"]["schedule"].empty());
  coll["classes"][0]["plan"]["schedule"][0]["bytes"] = 7;
  EXPECT_NE(difference(coll, same).find("schedule: collective 0"), std::string::npos)
      << difference(coll, same);
  nlohmann::json mem = file_;
  mem["classes"][0]["plan"]["memory"]["activations"] = 1;
  EXPECT_NE(difference(mem, same).find("memory:"), std::string::npos) << difference(mem, same);
  try {
    const Config cfg =
        load_config(base_config(), small({"ici_fsdp_parallelism=2", "remat_policy=none"}), {2, 1});
    check_plan_file(path_, cfg, build_rank_plan(cfg, dist::MeshSizes{}));
    FAIL() << "a different remat_policy accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_NE(std::string(e.what()).find("config key 'compiled_trainstep_file'"), std::string::npos)
        << e.what();
  }
}

TEST(Search, ReturnsOnlyLayoutsThatFit) {
  Topology t = resolve_topology(catalogue(), "h100-80gb-4", 1, nullptr);
  const std::vector<std::string> base = {"model_name=llama-test", "max_target_length=64"};
  // A device that holds the smallest layouts and not the largest.
  auto need = [&](const std::vector<std::string>& o) {
    std::vector<std::string> all = base;
    all.insert(all.end(), o.begin(), o.end());
    return static_cast<double>(compile_run(load_config(base_config(), all, {4, 1}), t).verdict.needed);
  };
  t.device.reserved_bytes = 0;
  const double lo = need(
      {"ici_fsdp_parallelism=1", "ici_data_parallelism=4", "remat_policy=full", "per_device_batch_size=1"});
  const double hi = need(
      {"ici_fsdp_parallelism=1", "ici_data_parallelism=4", "remat_policy=none", "per_device_batch_size=16"});
  ASSERT_LT(lo, hi);
  t.device.memory_bytes = (lo + hi) / 2;
  SearchOptions opts;
  opts.keep = 100;
  const SearchReport r = search_layouts(base_config(), base, t, opts);
  EXPECT_GT(r.too_big, 0);
  ASSERT_FALSE(r.fitting.empty());
  for (size_t i = 0; i < r.fitting.size(); ++i) {
    const SearchResult& s = r.fitting[i];
    EXPECT_TRUE(s.verdict.fits()) << s.layout;
    std::vector<std::string> all = base;
    all.insert(all.end(), s.overrides.begin(), s.overrides.end());
    EXPECT_TRUE(compile_run(load_config(base_config(), all, {4, 1}), t).verdict.fits()) << s.layout;
    if (i > 0) {
      EXPECT_GE(r.fitting[i - 1].cost.tokens_per_s_per_device, s.cost.tokens_per_s_per_device);
    }
  }
}

// For a mixture of experts the search also tries the expert axis (its sizes dividing the experts);
// for a dense model it never does.
TEST(Search, TriesExpertMeshesForAMixtureOfExperts) {
  const Topology t = resolve_topology(catalogue(), "h100-80gb-4", 1, nullptr);
  SearchOptions opts;
  opts.keep = 1000;
  opts.remat_policies = {"full"};
  opts.per_device_batches = {2};
  auto experts_of = [&](const std::vector<std::string>& keys) {
    std::set<std::string> seen;
    for (const SearchResult& s : search_layouts(base_config(), keys, t, opts).fitting)
      for (const std::string& o : s.overrides)
        if (o.rfind("ici_expert_parallelism=", 0) == 0) seen.insert(o.substr(o.find('=') + 1));
    return seen;
  };
  EXPECT_EQ(experts_of({"model_name=mixtral-test", "max_target_length=32"}),
            (std::set<std::string>{"1", "2", "4"}));
  EXPECT_EQ(experts_of({"model_name=llama-test", "max_target_length=32"}), (std::set<std::string>{"1"}));
  // Over two nodes the expert axis may also span the nodes (dcn), with 2 or 1 expert ranks inside.
  const Topology two = resolve_topology(catalogue(), "h100-80gb", 2, nullptr);
  std::set<std::string> across;
  for (const SearchResult& s :
       search_layouts(base_config(), {"model_name=mixtral-test", "max_target_length=32"}, two, opts).fitting)
    if (std::find(s.overrides.begin(), s.overrides.end(), "dcn_expert_parallelism=2") != s.overrides.end())
      across.insert(s.layout);
  EXPECT_FALSE(across.empty());
  for (const std::string& l : across) EXPECT_NE(l.find("dcn expert 2"), std::string::npos) << l;
}

}  // namespace
}  // namespace tessera::compile

namespace tessera::compile {
namespace {

// compile writes compiled_trainstep_file; train with the same key checks it before it allocates.
TEST(PlanFileCli, TrainChecksThePlanCompileWrote) {
  const std::string bin = testing::tessera_binary().string(), cfg = base_config().string();
  if (!fs::is_regular_file(bin)) GTEST_SKIP() << "no tessera binary at " << bin;
  const fs::path dir = fs::temp_directory_path() / ("tessera_plan_cli_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string common =
      "model_name=llama-test per_device_batch_size=2 max_target_length=16 ici_fsdp_parallelism=1 "
      "compiled_trainstep_file=" +
      (dir / "plan.json").string();
  const std::string train = bin + " train " + cfg + " " + common +
                            " steps=1 run_name=p base_output_directory=" + dir.string() +
                            " enable_checkpointing=false enable_tensorboard=false device_peak_tflops=1";
  testing::CommandResult c =
      testing::run_command(bin + " compile " + cfg + " " + common + " compile_topology=cpu-1", 120);
  ASSERT_EQ(c.exit_code, 0) << c.output;
  testing::CommandResult ok = testing::run_command(train, 120);
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_NE(ok.output.find("plan: matches compiled_trainstep_file"), std::string::npos) << ok.output;
  testing::CommandResult bad = testing::run_command(train + " remat_policy=none", 120);
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("run: remat_policy is \"full\" in the file, \"none\" in this run"),
            std::string::npos)
      << bad.output;
  EXPECT_EQ(bad.output.find("completed step"), std::string::npos) << bad.output;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tessera::compile

namespace tessera::compile {
namespace {

// MaxText's README example as written there: a 16B model (global_parameter_scale=16) on two v5e
// pods of 256 chips, planned on every rank class and compared with a chip's 16 GiB.
TEST(Compile, MaxTextReadmeExample) {
  const Topology t = resolve_topology(catalogue(), "v5e-256", 2, nullptr);
  const std::vector<std::string> keys = {"compile_topology=v5e-256", "compile_topology_num_slices=2",
                                         "global_parameter_scale=16", "per_device_batch_size=4"};
  const Config cfg = load_config(base_config(), keys, {t.num_devices(), t.num_slices});
  EXPECT_EQ(cfg.num_devices, 512);
  EXPECT_EQ(cfg.emb_dim, 4096);
  const CompiledRun run = compile_run(cfg, t);
  EXPECT_NEAR(static_cast<double>(run.classes.at(0).model.num_params()) / 1e9, 15.8, 0.1);
  EXPECT_EQ(run.corners_planned, 4);  // data 2 (dcn) x fsdp 256 (ici)
  EXPECT_EQ(run.verdict.usable, 16 * kGiB);
  EXPECT_GT(run.verdict.needed, 10 * kGiB);  // about 16.5 GiB: the FSDP layer buffers dominate
}

}  // namespace
}  // namespace tessera::compile
