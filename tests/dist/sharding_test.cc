// Sharding without processes: logical_axis_rules resolved as MaxText resolves them, pieces and their
// whole-tensor indices, the overlap copy that restores checkpoints on another mesh, the block
// reorder of FSDP gathers and reduce-scatters against an index-by-index reference, and a sharded
// plan (fsdp = 2, as rank 0 and rank 1 would build it) whose pieces hold exactly the whole plan's
// initial values at their offsets and cost half the memory.
#include "tessera/dist/sharding.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "tessera/config/config.h"
#include "tessera/core/error.h"
#include "tessera/core/source_dir.h"
#include "tessera/graph/plan.h"
#include "tessera/models/decoder.h"
#include "tessera/models/init.h"

namespace tessera {
namespace {

using dist::MeshSizes;

MeshSizes sizes(int64_t data, int64_t fsdp, int64_t tensor) {
  MeshSizes s;
  s.fill(1);
  s[static_cast<int>(MeshAxis::kData)] = data;
  s[static_cast<int>(MeshAxis::kFsdp)] = fsdp;
  s[static_cast<int>(MeshAxis::kTensor)] = tensor;
  return s;
}

std::vector<AxisRule> default_rules() {
  const std::vector<std::string> o = {"model_name=llama-test"};
  return load_config(tessera::source_dir().string() + "/configs/base.yml", o).logical_axis_rules;
}

TEST(LogicalAxisRules, MaxTextsDefaultsPutEmbedOnFsdpAndHeadsOnTensor) {
  const auto rules = default_rules();
  const MeshSizes s = sizes(1, 2, 2);
  auto axes = dist::mesh_axes_for({"embed", "mlp"}, Shape{64, 160}, rules, s);
  EXPECT_EQ(axes[0], (std::vector<MeshAxis>{MeshAxis::kFsdp}));
  EXPECT_EQ(axes[1], (std::vector<MeshAxis>{MeshAxis::kTensor}));  // mlp -> [fsdp_transpose, tensor]
  axes = dist::mesh_axes_for({"heads", "embed"}, Shape{64, 64}, rules, s);
  EXPECT_EQ(axes[0], (std::vector<MeshAxis>{MeshAxis::kTensor}));
  EXPECT_EQ(axes[1], (std::vector<MeshAxis>{MeshAxis::kFsdp}));  // after tensor_transpose was used
  axes = dist::mesh_axes_for({"norm"}, Shape{64}, rules, sizes(2, 2, 1));
  EXPECT_TRUE(axes[0].empty());  // norm -> tensor, of size 1
  EXPECT_EQ(dist::axes_name(axes[0]), "-");
  // A dimension the mesh does not divide stays whole: 3 is not a multiple of fsdp = 2.
  axes = dist::mesh_axes_for({"embed", "vocab"}, Shape{3, 512}, rules, sizes(1, 2, 1));
  EXPECT_TRUE(axes[0].empty());
}

TEST(LogicalAxisRules, UnknownMeshAxisIsAConfigError) {
  std::vector<AxisRule> rules = {{"embed", {"fsdp", "rows"}}};
  EXPECT_THROW(dist::mesh_axes_for({"embed"}, Shape{8}, rules, sizes(1, 2, 1)), Error);
}

TEST(Piece, WholeIndexAndOverlapCopy) {
  const dist::Piece whole = dist::whole_piece(Shape{4, 6});
  const dist::Piece right = dist::split_piece(whole, 1, 2, 1);  // columns 3..5
  EXPECT_EQ(right.shape, (Shape{4, 3}));
  EXPECT_EQ(right.str(), "[0:4, 3:6] of [4, 6]");
  EXPECT_EQ(dist::whole_index(right, 0), 3);
  EXPECT_EQ(dist::whole_index(right, 4), 6 + 4);  // row 1, column 4
  // Pieces of a 3-way row split copied into a 2-way column split: every element lands once.
  std::vector<float> full(24);
  std::iota(full.begin(), full.end(), 0.0f);
  std::vector<float> out(12, -1);
  int64_t copied = 0;
  for (int64_t r = 0; r < 2; ++r) {
    const dist::Piece src = dist::split_piece(whole, 0, 2, r);  // rows 2r, 2r+1
    copied += dist::copy_overlap(src, full.data() + 12 * r, right, out.data(), sizeof(float));
  }
  EXPECT_EQ(copied, 12);
  for (int64_t i = 0; i < 12; ++i) EXPECT_EQ(out[i], full[dist::whole_index(right, i)]) << i;
  // Disjoint pieces copy nothing.
  EXPECT_EQ(dist::copy_overlap(dist::split_piece(whole, 1, 2, 0), full.data(), right, out.data(), 4), 0);
}

// Reference: block p of the concatenation holds piece p, row-major in the piece's shape.
TEST(BlockReorder, MatchesPiecesForEveryDimension) {
  for (const Shape& shape : {Shape{6, 5}, Shape{4, 6}, Shape{2, 3, 4}, Shape{1, 7}}) {
    for (int dim = 0; dim < shape.rank(); ++dim) {
      for (int64_t parts : {1, 2, 3}) {
        if (shape[dim] % parts != 0) continue;
        SCOPED_TRACE(shape.str() + " dim " + std::to_string(dim) + " parts " + std::to_string(parts));
        std::vector<float> tensor(static_cast<size_t>(shape.numel()));
        std::iota(tensor.begin(), tensor.end(), 1.0f);
        std::vector<float> blocks(tensor.size()), back(tensor.size());
        dist::tensor_to_blocks(tensor.data(), blocks.data(), shape, dim, parts, sizeof(float));
        const int64_t piece_numel = shape.numel() / parts;
        for (int64_t p = 0; p < parts; ++p) {
          const dist::Piece piece = dist::split_piece(dist::whole_piece(shape), dim, parts, p);
          for (int64_t i = 0; i < piece_numel; ++i)
            ASSERT_EQ(blocks[static_cast<size_t>(p * piece_numel + i)], tensor[dist::whole_index(piece, i)]);
        }
        dist::blocks_to_tensor(blocks.data(), back.data(), shape, dim, parts, sizeof(float));
        EXPECT_EQ(back, tensor);
      }
    }
  }
}

TEST(BlockReorder, Bf16SizedElements) {
  const Shape shape{3, 8};
  std::vector<uint16_t> t(24), b(24), back(24);
  std::iota(t.begin(), t.end(), uint16_t{100});
  dist::tensor_to_blocks(t.data(), b.data(), shape, 1, 4, 2);
  EXPECT_EQ(b[0], 100);
  EXPECT_EQ(b[2], 108);  // block 0 holds columns 0..1 of rows 0, 1, 2
  dist::blocks_to_tensor(b.data(), back.data(), shape, 1, 4, 2);
  EXPECT_EQ(back, t);
}

models::ModelSpec tiny_spec() {
  models::ModelSpec s;
  s.emb_dim = 16;
  s.num_query_heads = 2;
  s.num_kv_heads = 2;
  s.head_dim = 8;
  s.mlp_dim = 24;
  s.num_decoder_layers = 3;
  s.vocab_size = 37;
  s.batch = 1;
  s.seq = 4;
  s.dtype = DType::kBF16;
  return s;
}

std::unique_ptr<graph::Plan> tiny_plan(const graph::PlanSharding& sh) {
  graph::Graph g;
  models::build_decoder(g, tiny_spec());
  graph::PlanOptions po;
  po.sharding = sh;
  return std::make_unique<graph::Plan>(std::move(g), po);
}

TEST(ShardedPlan, PiecesHoldTheWholePlansInitialValues) {
  graph::PlanSharding one;
  one.rules = default_rules();
  auto whole = tiny_plan(one);
  models::init_params(*whole, 11);
  for (int64_t rank = 0; rank < 2; ++rank) {
    graph::PlanSharding sh = one;
    sh.sizes = sizes(1, 2, 1);
    sh.coords[static_cast<int>(MeshAxis::kFsdp)] = rank;
    auto plan = tiny_plan(sh);
    EXPECT_TRUE(plan->any_sharded());
    models::init_params(*plan, 11);
    for (const graph::ParamLayout& L : plan->layouts()) {
      const graph::Value& v = plan->graph().value(L.param);
      SCOPED_TRACE(v.name);
      const Tensor& piece = plan->state(L.param);
      const float* ref = whole->state(L.param).ptr<float>();
      for (int64_t i = 0; i < piece.numel(); ++i)
        ASSERT_EQ(piece.ptr<float>()[i], ref[dist::whole_index(L.stored, i)]) << i;
      // embed-sharded kernels are split over fsdp; vocab (V = 37, odd) and norms stay whole.
      if (v.logical_axes.size() == 2 && v.logical_axes[0] == "embed") {
        EXPECT_EQ(L.fsdp_dim, 0);
        EXPECT_EQ(L.stored.offset[0], rank * 8);
      }
      if (v.logical_axes.size() == 1) {
        EXPECT_FALSE(L.sharded());
      }
      if (L.layer >= 0 && L.sharded()) {
        EXPECT_FALSE(L.gathered.empty());
      }
      // The compute copy's piece is bf16(master piece).
      if (v.compute_copy != graph::kNoValue) {
        const Tensor& c = plan->state(v.compute_copy);
        EXPECT_EQ(c.numel(), piece.numel());
        EXPECT_EQ(c.ptr<uint16_t>()[0], f32_to_bf16(piece.ptr<float>()[0]));
      }
    }
    // Masters, gradients and moments of the split kernels take half the bytes (norms stay whole).
    EXPECT_LT(plan->memory().params, whole->memory().params * 6 / 10);
    EXPECT_LT(plan->memory().optimizer, whole->memory().optimizer * 6 / 10);
    EXPECT_GT(plan->memory().gathered, 0u);
  }
}

TEST(ShardedPlan, Zero1SplitsOnlyTheOptimizerStateOverData) {
  graph::PlanSharding sh;
  sh.rules = default_rules();
  sh.sizes = sizes(2, 1, 1);
  sh.coords[static_cast<int>(MeshAxis::kData)] = 1;
  sh.shard_optimizer_over_data = true;
  auto plan = tiny_plan(sh);
  EXPECT_FALSE(plan->any_sharded());
  EXPECT_TRUE(plan->zero1());
  for (const graph::ParamLayout& L : plan->layouts()) {
    const graph::Value& v = plan->graph().value(L.param);
    SCOPED_TRACE(v.name);
    EXPECT_TRUE(L.stored.covers_all());
    if (v.shape[0] % 2 != 0) {  // the vocabulary (37 rows) keeps whole moments
      EXPECT_EQ(L.opt_parts, 1);
      continue;
    }
    EXPECT_EQ(L.opt_parts, 2);
    EXPECT_EQ(L.opt.offset[0], v.shape[0] / 2);
    // The optimizer updates the second half of the rows of the whole master, in place.
    EXPECT_EQ(plan->opt_view(L.param).data(), plan->state(L.param).ptr<float>() + v.shape.numel() / 2);
    EXPECT_EQ(plan->opt_view(v.grad).numel(), v.shape.numel() / 2);
  }
}

}  // namespace
}  // namespace tessera
