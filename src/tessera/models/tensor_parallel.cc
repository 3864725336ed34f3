// The tensor-parallel axes from logical_axis_rules (tensor_parallel.h).
#include "tessera/models/tensor_parallel.h"

#include <fmt/format.h>

#include <algorithm>

#include "tessera/core/error.h"

namespace tessera::models {

namespace {

constexpr std::string_view kTensor = "tensor";
// The parameter axes Megatron's layout splits over tensor.
constexpr std::array<std::string_view, 5> kSplitAxes = {"heads", "q_heads", "kv_heads", "mlp", "vocab"};

int64_t axis_size(const Config& cfg, MeshAxis a) {
  const auto i = static_cast<size_t>(a);
  return cfg.ici_parallelism[i] * cfg.dcn_parallelism[i];
}

int64_t axis_size(const Config& cfg, std::string_view name) {
  for (size_t i = 0; i < kMeshAxes.size(); ++i)
    if (kMeshAxes[i].axis == name) return axis_size(cfg, static_cast<MeshAxis>(i));
  return 1;
}

const AxisRule* first_rule(const Config& cfg, std::string_view logical) {
  for (const AxisRule& r : cfg.logical_axis_rules)
    if (r.logical == logical) return &r;
  return nullptr;
}

bool names_tensor(const AxisRule* r) {
  return r && std::find(r->mesh_axes.begin(), r->mesh_axes.end(), kTensor) != r->mesh_axes.end();
}

void refuse_other_axes(const Config& cfg, int64_t tp) {
  for (MeshAxis a : {MeshAxis::kSequence, MeshAxis::kContext, MeshAxis::kStage, MeshAxis::kFsdpTranspose,
                     MeshAxis::kTensorTranspose}) {
    const int64_t n = axis_size(cfg, a);
    const auto& info = kMeshAxes[static_cast<size_t>(a)];
    if (n > 1)
      fail(ErrorKind::kConfig,
           "tensor parallelism ({}) with the {} axis of size {} (ici_{}_parallelism x dcn_{}_parallelism) is "
           "not built: Tessera's tensor parallelism combines with the data, fsdp and expert axes only",
           tp, info.axis, n, info.key, info.key);
  }
}

}  // namespace

std::vector<std::string> tensor_parallel_axes(const Config& cfg) {
  const int64_t tp = axis_size(cfg, MeshAxis::kTensor);
  if (tp <= 1) return {};
  refuse_other_axes(cfg, tp);
  if (names_tensor(first_rule(cfg, "embed")))
    fail(
        ErrorKind::kConfig,
        "logical_axis_rules put `embed` on the tensor axis: that shards the residual stream, which Tessera's "
        "(Megatron-style) tensor parallelism keeps whole; map embed to other mesh axes");
  std::vector<std::string> axes;
  for (std::string_view logical : kSplitAxes) {
    const AxisRule* r = first_rule(cfg, logical);
    if (!names_tensor(r)) continue;
    for (const std::string& m : r->mesh_axes)
      if (m != kTensor && axis_size(cfg, m) > 1)
        fail(ErrorKind::kConfig,
             "logical_axis_rules split `{}` over tensor x {} ([{}, [{}]]); Tessera splits it over tensor "
             "alone",
             logical, m, logical, fmt::join(r->mesh_axes, ", "));
    axes.emplace_back(logical);
  }
  if (axes.empty())
    fail(ErrorKind::kConfig,
         "ici_tensor_parallelism x dcn_tensor_parallelism = {}, but logical_axis_rules put none of heads, "
         "q_heads, "
         "kv_heads, mlp, vocab on the tensor axis: every tensor rank would do the same work",
         tp);
  return axes;
}

void set_tensor_parallel(ModelSpec& spec, const Config& cfg, int64_t tensor_rank) {
  spec.tp_size = axis_size(cfg, MeshAxis::kTensor);
  TESSERA_CHECK(tensor_rank >= 0 && tensor_rank < spec.tp_size, ErrorKind::kInternal,
                "tensor rank {} of a tensor axis of {}", tensor_rank, spec.tp_size);
  spec.tp_rank = tensor_rank;
  spec.tp_axes = tensor_parallel_axes(cfg);
}

}  // namespace tessera::models
