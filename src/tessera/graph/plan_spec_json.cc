// PlanSpec's JSON form and fingerprint (plan_spec.h). The form holds what a later run or an
// ahead-of-time compile compares: the mesh, per node its op, phase and operand shapes and dtypes,
// every value's three placements, the arena sizes, the reports and the collective schedule. It
// leaves out names, attributes and the parameter layouts (they follow from the graph); a loaded
// PlanSpec therefore has no graph. Keys are sorted (nlohmann::json's object is a std::map), so the
// text, and the fingerprint hashed from it, are stable.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "tessera/core/error.h"
#include "tessera/graph/plan_spec.h"

namespace tessera::graph {

NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(MemoryReport, params, param_copies, grads, optimizer, inputs, gathered,
                                   activations, activations_lower_bound, kv_cache,
                                   collective_scratch_estimate)

namespace {

using nlohmann::json;

json shape_json(const Shape& s) {
  json a = json::array();
  for (int d = 0; d < s.rank(); ++d) a.push_back(s[d]);
  return a;
}

Shape shape_from(const json& a) {
  Shape s = Shape::of_rank(static_cast<int>(a.size()));
  for (int d = 0; d < s.rank(); ++d) s[d] = a.at(static_cast<size_t>(d)).get<int64_t>();
  return s;
}

// [arena, offset, dtype, shape]: compact, as there are three per value.
json placement_json(const Placement& p) {
  return json::array({static_cast<int>(p.arena), p.offset, dtype_name(p.dtype), shape_json(p.shape)});
}

Placement placement_from(const json& a) {
  return Placement{static_cast<ArenaKind>(a.at(0).get<int>()), a.at(1).get<size_t>(), shape_from(a.at(3)),
                   dtype_from_name(a.at(2).get<std::string>())};
}

json placements_json(const std::vector<Placement>& ps) {
  json a = json::array();
  for (const Placement& p : ps) a.push_back(placement_json(p));
  return a;
}

std::vector<Placement> placements_from(const json& a) {
  std::vector<Placement> ps;
  for (const json& p : a) ps.push_back(placement_from(p));
  return ps;
}

// The memory report's fields one to one (nlohmann's macro writes and reads both directions), plus
// its total for a reader's convenience (ignored when read back: it is derived).
json memory_json(const MemoryReport& m) {
  json j = m;
  j["total"] = m.total();
  return j;
}

json collective_json(const Collective& c) {
  json group = json::array();
  for (MeshAxis a : c.group) group.push_back(kMeshAxes[static_cast<int>(a)].axis);
  return {{"when", collective_when_name(c.when)},
          {"kind", collective_kind_name(c.kind)},
          {"group", group},
          {"param", c.param},
          {"value", c.value},
          {"layer", c.layer},
          {"bytes", c.bytes},
          {"issue", c.issue},
          {"wait", c.wait},
          {"first_write", c.first_write}};
}

template <typename E, int N>
E enum_from(const std::string& name, const char* (*name_of)(E)) {
  for (int i = 0; i < N; ++i)
    if (name == name_of(static_cast<E>(i))) return static_cast<E>(i);
  fail(ErrorKind::kConfig, "plan JSON: unknown name {}", name);
}

Collective collective_from(const json& j) {
  Collective c;
  c.when = enum_from<CollectiveWhen, 5>(j.at("when"), collective_when_name);
  c.kind = enum_from<CollectiveKind, 3>(j.at("kind"), collective_kind_name);
  for (const json& a : j.at("group")) {
    int axis = 0;
    while (axis < kNumMeshAxes && kMeshAxes[axis].axis != a.get<std::string>()) ++axis;
    TESSERA_CHECK(axis < kNumMeshAxes, ErrorKind::kConfig, "plan JSON: unknown mesh axis {}", a.dump());
    c.group.push_back(static_cast<MeshAxis>(axis));
  }
  c.param = j.at("param");
  c.value = j.at("value");
  c.layer = j.at("layer");
  c.bytes = j.at("bytes");
  c.issue = j.at("issue");
  c.wait = j.at("wait");
  c.first_write = j.at("first_write");
  return c;
}

}  // namespace

json PlanSpec::to_json() const {
  json nodes = json::array();
  for (const NodeRecord& n : nodes_)
    nodes.push_back({{"op", n.op},
                     {"phase", static_cast<int>(n.phase)},
                     {"in", placements_json(n.in)},
                     {"out", placements_json(n.out)}});
  json values = json::array();
  for (size_t i = 0; i < views_.size(); ++i)
    values.push_back(
        json::array({placement_json(views_[i]), placement_json(state_[i]), placement_json(opt_[i])}));
  json schedule = json::array();
  for (const Collective& c : collectives_) schedule.push_back(collective_json(c));
  json out = {
      {"format", 1},
      {"mesh", {{"sizes", sharding_.sizes}, {"coords", sharding_.coords}}},
      {"num_params", num_params_},
      {"first_optimizer_node", first_opt_},
      {"dloss", dloss_},
      {"nodes", nodes},
      {"values", values},
      {"arenas", arena_bytes_},
      {"memory", memory_json(memory_)},
      {"flops",
       {{"forward", flops_.forward},
        {"backward", flops_.backward},
        {"recompute", flops_.recompute},
        {"optimizer", flops_.optimizer},
        {"model_training", flops_.model_training()}}},
      {"any_sharded", any_sharded_},
      {"zero1", zero1_},
      {"schedule", schedule},
  };
  if (daux_ != kNoValue) out["daux"] = daux_;  // only with aux losses: older plans keep their fingerprints
  return out;
}

PlanSpec PlanSpec::from_json(const json& j) {
  TESSERA_CHECK(j.at("format").get<int>() == 1, ErrorKind::kConfig, "plan JSON: format {} is not 1",
                j.at("format").dump());
  PlanSpec p;
  p.sharding_.sizes = j.at("mesh").at("sizes");
  p.sharding_.coords = j.at("mesh").at("coords");
  p.num_params_ = j.at("num_params");
  p.first_opt_ = j.at("first_optimizer_node");
  p.dloss_ = j.at("dloss");
  p.daux_ = j.value("daux", kNoValue);
  for (const json& n : j.at("nodes"))
    p.nodes_.push_back({n.at("op"), static_cast<Phase>(n.at("phase").get<int>()), placements_from(n.at("in")),
                        placements_from(n.at("out"))});
  for (const json& v : j.at("values")) {
    p.views_.push_back(placement_from(v.at(0)));
    p.state_.push_back(placement_from(v.at(1)));
    p.opt_.push_back(placement_from(v.at(2)));
  }
  p.arena_bytes_ = j.at("arenas");
  p.memory_ = j.at("memory").get<MemoryReport>();
  const json& f = j.at("flops");
  p.flops_ = {f.at("forward"), f.at("backward"), f.at("recompute"), f.at("optimizer")};
  p.any_sharded_ = j.at("any_sharded");
  p.zero1_ = j.at("zero1");
  for (const json& c : j.at("schedule")) p.collectives_.push_back(collective_from(c));
  return p;
}

bool PlanSpec::operator==(const PlanSpec& o) const {
  return sharding_.sizes == o.sharding_.sizes && sharding_.coords == o.sharding_.coords &&
         num_params_ == o.num_params_ && first_opt_ == o.first_opt_ && dloss_ == o.dloss_ &&
         daux_ == o.daux_ && nodes_ == o.nodes_ && views_ == o.views_ && state_ == o.state_ &&
         opt_ == o.opt_ && arena_bytes_ == o.arena_bytes_ && memory_ == o.memory_ && flops_ == o.flops_ &&
         any_sharded_ == o.any_sharded_ && zero1_ == o.zero1_ && collectives_ == o.collectives_;
}

std::string PlanSpec::fingerprint() const {
  // FNV-1a, 64 bits: small, stable across platforms and builds (std::hash is neither).
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : to_json().dump()) {
    h ^= c;
    h *= 1099511628211ull;  // the FNV prime 2^40 + 2^8 + 0xb3
  }
  return fmt::format("{:016x}", h);
}

}  // namespace tessera::graph
