#include "tessera/models/hf_llama.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "tessera/core/error.h"
#include "tessera/models/init.h"

namespace tessera::models {

std::vector<HfName> llama_hf_names(const ModelSpec& s) {
  std::vector<HfName> out = {{"token_embedder.embedding", "model.embed_tokens.weight", false}};
  for (int64_t l = 0; l < s.num_decoder_layers; ++l) {
    const std::string t = fmt::format("decoder.layers_{}.", l), h = fmt::format("model.layers.{}.", l);
    out.push_back({t + "self_attention.query.kernel", h + "self_attn.q_proj.weight", true});
    out.push_back({t + "self_attention.key.kernel", h + "self_attn.k_proj.weight", true});
    out.push_back({t + "self_attention.value.kernel", h + "self_attn.v_proj.weight", true});
    out.push_back({t + "self_attention.out.kernel", h + "self_attn.o_proj.weight", true});
    out.push_back({t + "mlp.wi_0.kernel", h + "mlp.gate_proj.weight", true});
    out.push_back({t + "mlp.wi_1.kernel", h + "mlp.up_proj.weight", true});
    out.push_back({t + "mlp.wo.kernel", h + "mlp.down_proj.weight", true});
    out.push_back({t + "pre_self_attention_layer_norm.scale", h + "input_layernorm.weight", false});
    out.push_back({t + "post_self_attention_layer_norm.scale", h + "post_attention_layernorm.weight", false});
  }
  out.push_back({"decoder.decoder_norm.scale", "model.norm.weight", false});
  if (!s.logits_via_embedding) out.push_back({"decoder.logits_dense.kernel", "lm_head.weight", true});
  return out;
}

namespace {

float element(const Tensor& t, int64_t i) {
  return t.dtype() == DType::kBF16 ? bf16_to_f32(t.ptr<uint16_t>()[i]) : t.ptr<float>()[i];
}

void store(const Tensor& t, int64_t i, float v) {
  if (t.dtype() == DType::kBF16)
    t.ptr<uint16_t>()[i] = f32_to_bf16(v);
  else
    t.ptr<float>()[i] = v;
}

// dst[c, r] = src[r, c] for src [rows, cols], converting element types on the way. Tiles of
// kTile x kTile keep both the strided reads and the writes within a few pages of cache.
void transpose_convert(const Tensor& src, const Tensor& dst, int64_t rows, int64_t cols) {
  constexpr int64_t kTile = 32;
  const int64_t row_tiles = (rows + kTile - 1) / kTile;
#pragma omp parallel for schedule(static) if (rows * cols > (int64_t{1} << 16))
  for (int64_t rt = 0; rt < row_tiles; ++rt)
    for (int64_t c0 = 0; c0 < cols; c0 += kTile)
      for (int64_t r = rt * kTile; r < std::min(rows, (rt + 1) * kTile); ++r)
        for (int64_t c = c0; c < std::min(cols, c0 + kTile); ++c)
          store(dst, c * rows + r, element(src, r * cols + c));
}

void copy_convert(const Tensor& src, const Tensor& dst) {
  const int64_t n = src.numel();
#pragma omp parallel for schedule(static) if (n > (int64_t{1} << 16))
  for (int64_t i = 0; i < n; ++i) store(dst, i, element(src, i));
}

}  // namespace

void hf_to_tessera_tensor(const Tensor& src, bool transpose, const Tensor& dst, const std::string& file,
                          const std::string& name) {
  TESSERA_ASSERT(dst.dtype() == DType::kF32 && dst.is_contiguous() && (!transpose || dst.rank() == 2));
  if (src.dtype() != DType::kF32 && src.dtype() != DType::kBF16)
    fail(ErrorKind::kConfig, "{}: tensor '{}' is {}; Tessera reads float32 or bfloat16", file, name,
         dtype_name(src.dtype()));
  const Shape want = transpose ? Shape{dst.dim(1), dst.dim(0)} : dst.shape();
  if (!(src.shape() == want))
    fail(ErrorKind::kConfig, "{}: tensor '{}' has shape {}, but the model needs {}", file, name,
         src.shape().str(), want.str());
  if (transpose)
    transpose_convert(src, dst, src.dim(0), src.dim(1));  // src [out, in] -> dst [in, out]
  else
    copy_convert(src, dst);
}

void tessera_to_hf_tensor(const Tensor& src, bool transpose, const Tensor& dst) {
  TESSERA_ASSERT(src.dtype() == DType::kF32 && dst.numel() == src.numel() && (!transpose || src.rank() == 2));
  if (transpose)
    transpose_convert(src, dst, src.dim(0), src.dim(1));  // src [in, out] -> dst [out, in]
  else
    copy_convert(src, dst);
}

void load_hf_llama(graph::Plan& plan, const ModelSpec& spec, const SafetensorsFile& file,
                   const std::string& prefix) {
  std::map<std::string, graph::ValueId> by_name;
  const auto& values = plan.graph().values();
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i].kind == graph::ValueKind::kParam) by_name[values[i].name] = static_cast<graph::ValueId>(i);
  for (const HfName& m : llama_hf_names(spec)) {
    auto it = by_name.find(m.tessera);
    TESSERA_ASSERT(it != by_name.end());
    hf_to_tessera_tensor(file.get(prefix + m.hf), m.transpose, plan.view(it->second), file.path(),
                         prefix + m.hf);
  }
  sync_compute_copies(plan);
}

}  // namespace tessera::models
