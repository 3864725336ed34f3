// The family registry and the generic decoder entry (decoder.h).
#include "tessera/models/decoder.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "tessera/core/error.h"
#include "tessera/models/families.h"

namespace tessera::models {

namespace {

// Tensor parallelism splits whole heads, MLP columns and vocabulary rows (graph/sharding.h);
// refuses a split that does not divide, naming the key, and rules that split the heads of q, k, v
// and the out projection differently. The plan's sharding pass does the rest.
void record_tensor_parallel(graph::Graph& g, const ModelSpec& s) {
  if (s.tp_size <= 1) return;
  graph::TensorParallel tp{.size = s.tp_size, .rank = s.tp_rank, .axes = s.tp_axes};
  const int64_t q = tp.ways("q_heads");
  if (q != tp.ways("heads") || q != tp.ways("kv_heads"))
    fail(ErrorKind::kConfig,
         "logical_axis_rules split heads, q_heads and kv_heads differently over the tensor axis ({}, {}, {} "
         "ways): "
         "the attention of a tensor rank needs its own query heads with their key/value heads",
         tp.ways("heads"), q, tp.ways("kv_heads"));
  auto check = [&](const char* axis, const char* key, int64_t dim) {
    if (tp.ways(axis) > 1 && dim % tp.size != 0)
      fail(ErrorKind::kConfig,
           "tensor parallelism {}: {}={} is not divisible by {} ({} is split over the tensor axis)", tp.size,
           key, dim, tp.size, axis);
  };
  check("q_heads", "num_query_heads", s.num_query_heads);
  check("kv_heads", "num_kv_heads", s.num_kv_heads);
  check("mlp", "mlp_dim", s.mlp_dim);
  check("vocab", "vocab_size", s.vocab_size);
  g.set_tensor_parallel(std::move(tp));
}

}  // namespace

const std::vector<const Family*>& families() {
  static const std::vector<const Family*> all = {&kLlamaFamily,   &kGpt3Family,   &kQwenFamily,
                                                 &kMixtralFamily, &kGptOssFamily, &kGemmaFamily};
  return all;
}

const Family& family_for(std::string_view decoder_block) {
  std::vector<std::string_view> known;
  for (const Family* f : families()) {
    if (std::find(f->blocks.begin(), f->blocks.end(), decoder_block) != f->blocks.end()) return *f;
    known.insert(known.end(), f->blocks.begin(), f->blocks.end());
  }
  fail(ErrorKind::kConfig, "decoder_block '{}' is not built by Tessera yet (available: {})", decoder_block,
       fmt::join(known, ", "));
}

std::string moe_blocks() {
  std::vector<std::string_view> names;
  for (const Family* f : families())
    if (f->moe) names.insert(names.end(), f->blocks.begin(), f->blocks.end());
  return fmt::format("{}", fmt::join(names, ", "));
}

DecoderInputs build_decoder(graph::Graph& g, const ModelSpec& spec) {
  const Family& f = family_for(spec.decoder_block);
  record_tensor_parallel(g, spec);
  return f.build(g, spec);
}

int64_t ModelSpec::num_params() const {
  ModelSpec one = *this;
  one.batch = 1;
  one.seq = 1;
  one.tp_size = 1;
  one.tp_rank = 0;
  one.tp_axes.clear();
  graph::Graph g;
  build_decoder(g, one);
  int64_t n = 0;
  for (graph::ValueId p : g.params()) n += g.value(p).shape.numel();
  return n;
}

}  // namespace tessera::models
