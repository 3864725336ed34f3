#include "tessera/convert/hf_llama.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "tessera/core/error.h"
#include "tessera/models/init.h"

namespace tessera::convert {

using models::ModelSpec;

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

inline float widen(float v) {
  return v;
}
inline float widen(uint16_t v) {
  return bf16_to_f32(v);
}
template <typename D>
D narrow(float v);
template <>
inline float narrow<float>(float v) {
  return v;
}
template <>
inline uint16_t narrow<uint16_t>(float v) {
  return f32_to_bf16(v);
}

// dst[c, r] = src[r, c] for src [rows, cols], converting the element type (S, D: float for f32,
// uint16_t for bf16). Tiles of kTile x kTile: within one, the reads of a src row and the writes of
// a dst row stay in 2 KiB of each matrix, so the strided side hits cache; the typed inner loop
// lets the compiler vectorise the conversion.
template <typename S, typename D>
void transpose_tiles(const S* src, D* dst, int64_t rows, int64_t cols) {
  constexpr int64_t kTile = 64;
  const int64_t row_tiles = (rows + kTile - 1) / kTile, col_tiles = (cols + kTile - 1) / kTile;
#pragma omp parallel for collapse(2) schedule(static) if (rows * cols > (int64_t{1} << 16))
  for (int64_t rt = 0; rt < row_tiles; ++rt)
    for (int64_t ct = 0; ct < col_tiles; ++ct) {
      const int64_t r0 = rt * kTile, r1 = std::min(rows, r0 + kTile);
      const int64_t c0 = ct * kTile, c1 = std::min(cols, c0 + kTile);
      for (int64_t c = c0; c < c1; ++c)
        for (int64_t r = r0; r < r1; ++r) dst[c * rows + r] = narrow<D>(widen(src[r * cols + c]));
    }
}

template <typename S, typename D>
void copy_elements(const S* src, D* dst, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > (int64_t{1} << 16))
  for (int64_t i = 0; i < n; ++i) dst[i] = narrow<D>(widen(src[i]));
}

// dst = src (transposed when `transpose`, as [rows, cols] -> [cols, rows]) for the element types
// the conversions need: f32 -> f32, bf16 -> f32, f32 -> bf16.
template <typename S, typename D>
void convert_as(const Tensor& src, const Tensor& dst, bool transpose) {
  if (transpose)
    transpose_tiles(src.ptr<S>(), dst.ptr<D>(), src.dim(0), src.dim(1));
  else
    copy_elements(src.ptr<S>(), dst.ptr<D>(), src.numel());
}

void convert_layout(const Tensor& src, const Tensor& dst, bool transpose) {
  const bool src_bf16 = src.dtype() == DType::kBF16, dst_bf16 = dst.dtype() == DType::kBF16;
  TESSERA_ASSERT(!(src_bf16 && dst_bf16));
  if (src_bf16)
    convert_as<uint16_t, float>(src, dst, transpose);
  else if (dst_bf16)
    convert_as<float, uint16_t>(src, dst, transpose);
  else
    convert_as<float, float>(src, dst, transpose);
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
  convert_layout(src, dst, transpose);  // src [out, in] -> dst [in, out] when transposed
}

void tessera_to_hf_tensor(const Tensor& src, bool transpose, const Tensor& dst) {
  TESSERA_ASSERT(src.dtype() == DType::kF32 && dst.numel() == src.numel() && (!transpose || src.rank() == 2));
  TESSERA_ASSERT(dst.dtype() == DType::kF32 || dst.dtype() == DType::kBF16);
  convert_layout(src, dst, transpose);  // src [in, out] -> dst [out, in] when transposed
}

void load_hf_llama(graph::Plan& plan, const models::ModelSpec& spec, const SafetensorsFile& file,
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
  models::sync_compute_copies(plan);
}

}  // namespace tessera::convert
