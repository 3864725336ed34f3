// compiled_trainstep_file: writing, reading and the first difference (plan_file.h).
#include "tessera/compile/plan_file.h"

#include <fmt/format.h>

#include "tessera/core/error.h"
#include "tessera/core/file.h"

namespace tessera::compile {
namespace {

using nlohmann::json;

json model_json(const models::ModelSpec& m) {
  return {{"decoder_block", m.decoder_block},
          {"emb_dim", m.emb_dim},
          {"num_query_heads", m.num_query_heads},
          {"num_kv_heads", m.num_kv_heads},
          {"head_dim", m.head_dim},
          {"mlp_dim", m.mlp_dim},
          {"num_decoder_layers", m.num_decoder_layers},
          {"vocab_size", m.vocab_size},
          {"logits_via_embedding", m.logits_via_embedding},
          {"dtype", dtype_name(m.dtype)},
          {"tensor_parallel", m.tp_size},
          {"batch_per_rank", m.batch},
          {"seq", m.seq},
          {"num_params", m.num_params()}};
}

json run_json(const Config& c) {
  return {{"per_device_batch_size", c.per_device_batch_size},
          {"max_target_length", c.max_target_length},
          {"gradient_accumulation_steps", c.gradient_accumulation_steps},
          {"remat_policy", c.remat_policy},
          {"opt_type", c.opt_type},
          {"dtype", c.dtype},
          {"weight_dtype", c.weight_dtype},
          {"shard_optimizer_over_data", c.shard_optimizer_over_data}};
}

json mesh_json(const Config& c) {
  json ici = json::object(), dcn = json::object();
  for (int a = 0; a < kNumMeshAxes; ++a) {
    ici[std::string(kMeshAxes[a].axis)] = c.ici_parallelism[a];
    dcn[std::string(kMeshAxes[a].axis)] = c.dcn_parallelism[a];
  }
  return {{"num_devices", c.num_devices}, {"num_slices", c.num_slices}, {"ici", ici}, {"dcn", dcn}};
}

// The first key of `a` (the file's) whose value differs in `b` (this run's), as "section: key is X in
// the file, Y in this run".
std::string differ(std::string_view section, const json& a, const json& b) {
  for (auto it = a.begin(); it != a.end(); ++it) {
    const json& mine = b.contains(it.key()) ? b.at(it.key()) : json();
    if (it->is_object() && mine.is_object()) {
      std::string d = differ(fmt::format("{} {}", section, it.key()), *it, mine);
      if (!d.empty()) return d;
    } else if (*it != mine) {
      return fmt::format("{}: {} is {} in the file, {} in this run", section, it.key(), it->dump(),
                         mine.dump());
    }
  }
  return "";
}

std::string shapes(const std::vector<graph::Placement>& ps) {
  std::vector<std::string> out;
  for (const graph::Placement& p : ps) out.push_back(fmt::format("{}{}", dtype_name(p.dtype), p.shape.str()));
  return fmt::format("{}", fmt::join(out, ", "));
}

std::string group_str(const std::vector<MeshAxis>& g) {
  std::vector<std::string_view> n;
  for (MeshAxis a : g) n.push_back(kMeshAxes[static_cast<int>(a)].axis);
  return fmt::format("{}", fmt::join(n, "+"));
}

std::string differ_plans(const graph::PlanSpec& f, const graph::PlanSpec& r) {
  if (f.nodes().size() != r.nodes().size())
    return fmt::format("graph: {} nodes in the file, {} in this run", f.nodes().size(), r.nodes().size());
  for (size_t i = 0; i < f.nodes().size(); ++i) {
    const graph::NodeRecord &a = f.nodes()[i], &b = r.nodes()[i];
    if (a.op != b.op || a.phase != b.phase)
      return fmt::format("graph: node {} is {} in the file, {} in this run", i, a.op, b.op);
    if (a.in != b.in || a.out != b.out)
      return fmt::format("graph: node {} ({}) has shapes ({}) -> ({}) in the file, ({}) -> ({}) in this run",
                         i, a.op, shapes(a.in), shapes(a.out), shapes(b.in), shapes(b.out));
  }
  if (f.collectives().size() != r.collectives().size())
    return fmt::format("schedule: {} collectives in the file, {} in this run", f.collectives().size(),
                       r.collectives().size());
  for (size_t i = 0; i < f.collectives().size(); ++i) {
    const graph::Collective &a = f.collectives()[i], &b = r.collectives()[i];
    if (!(a == b))
      return fmt::format(
          "schedule: collective {} is {} {} over {} of {} bytes (nodes {}..{}) in the file, {} {} "
          "over {} of {} bytes (nodes {}..{}) in this run",
          i, collective_when_name(a.when), collective_kind_name(a.kind), group_str(a.group), a.bytes, a.issue,
          a.wait, collective_when_name(b.when), collective_kind_name(b.kind), group_str(b.group), b.bytes,
          b.issue, b.wait);
  }
  if (!(f.memory() == r.memory()))
    return fmt::format("memory: {} bytes in the file, {} in this run", f.memory().total(),
                       r.memory().total());
  return "";
}

// The corner that stands for `coords`: per axis 0, or size-1 for the last rank.
dist::MeshSizes corner_of(const dist::MeshSizes& coords, const dist::MeshSizes& sizes) {
  dist::MeshSizes c{};
  for (int a = 0; a < kNumMeshAxes; ++a) c[a] = sizes[a] > 1 && coords[a] == sizes[a] - 1 ? coords[a] : 0;
  return c;
}

}  // namespace

json plan_file_json(const CompiledRun& run) {
  json classes = json::array(), corners = json::array();
  const dist::MeshSizes sizes = mesh_sizes(run.cfg);
  for (const RankPlan& k : run.classes)
    classes.push_back(
        {{"coords", k.coords}, {"fingerprint", k.plan.fingerprint()}, {"plan", k.plan.to_json()}});
  return {{"format", kPlanFileFormat},     {"version", kPlanFileVersion},
          {"topology", run.topology.name}, {"model", model_json(run.classes.at(0).model)},
          {"run", run_json(run.cfg)},      {"mesh", mesh_json(run.cfg)},
          {"mesh_sizes", sizes},           {"classes", classes}};
}

void write_plan_file(const std::filesystem::path& path, const CompiledRun& run) {
  AtomicFileWriter w(path);
  w.append(plan_file_json(run).dump(1));
  w.append("\n");
  w.commit();
}

json read_plan_file(const std::filesystem::path& path) {
  json j;
  try {
    j = json::parse(read_file(path));
  } catch (const json::exception& e) {
    fail(ErrorKind::kConfig, "config key 'compiled_trainstep_file': {} is not JSON ({})", path.string(),
         e.what());
  }
  if (!j.is_object() || j.value("format", "") != kPlanFileFormat ||
      j.value("version", json()) != json(kPlanFileVersion))
    fail(ErrorKind::kConfig,
         "config key 'compiled_trainstep_file': {} is not a plan written by `tessera compile` (expected "
         "format "
         "'{}' version {})",
         path.string(), kPlanFileFormat, kPlanFileVersion);
  return j;
}

std::string first_difference(const json& file, const Config& cfg, const RankPlan& rank) {
  models::ModelSpec m = rank.model;
  if (std::string d = differ("model", file.at("model"), model_json(m)); !d.empty()) return d;
  if (std::string d = differ("run", file.at("run"), run_json(cfg)); !d.empty()) return d;
  if (std::string d = differ("mesh", file.at("mesh"), mesh_json(cfg)); !d.empty()) return d;
  const dist::MeshSizes sizes = mesh_sizes(cfg);
  const dist::MeshSizes corner = corner_of(rank.coords, sizes);
  // The class of this rank's corner; the file lists one plan per distinct class, so the corner's
  // class is the first whose plan this one matches, else the corner's own entry.
  const json* mine = nullptr;
  for (const json& k : file.at("classes"))
    if (k.at("coords").get<dist::MeshSizes>() == corner) mine = &k;
  std::string first;
  for (const json& k : file.at("classes")) {
    if (mine && &k != mine) continue;
    const graph::PlanSpec f = graph::PlanSpec::from_json(k.at("plan"));
    std::string d = differ_plans(f, rank.plan);
    if (d.empty()) return "";
    if (first.empty()) first = d;
  }
  return first;
}

void check_plan_file(const std::filesystem::path& path, const Config& cfg, const RankPlan& rank) {
  const json file = read_plan_file(path);
  const std::string d = first_difference(file, cfg, rank);
  if (!d.empty())
    fail(ErrorKind::kConfig,
         "config key 'compiled_trainstep_file': {} (compiled for {}) does not match this run: {}; recompile "
         "with "
         "`tessera compile` or drop the key",
         path.string(), file.value("topology", "?"), d);
}

}  // namespace tessera::compile
