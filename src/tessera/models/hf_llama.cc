#include "tessera/models/hf_llama.h"

#include <fmt/format.h>

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
}  // namespace

void load_hf_llama(graph::Plan& plan, const ModelSpec& spec, const SafetensorsFile& file, const std::string& prefix) {
  std::map<std::string, graph::ValueId> by_name;
  const auto& values = plan.graph().values();
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i].kind == graph::ValueKind::kParam) by_name[values[i].name] = static_cast<graph::ValueId>(i);
  for (const HfName& m : llama_hf_names(spec)) {
    auto it = by_name.find(m.tessera);
    TESSERA_ASSERT(it != by_name.end());
    const Tensor& dst = plan.view(it->second);
    Tensor src = file.get(prefix + m.hf);
    if (src.dtype() != DType::kF32 && src.dtype() != DType::kBF16)
      fail(ErrorKind::kIo, "{}: tensor '{}' is {}; expected float32 or bfloat16", file.path(), prefix + m.hf,
           dtype_name(src.dtype()));
    Shape want = dst.shape();
    if (m.transpose) want = Shape{dst.dim(1), dst.dim(0)};
    if (!(src.shape() == want))
      fail(ErrorKind::kIo, "{}: tensor '{}' has shape {}, but the model needs {}", file.path(), prefix + m.hf,
           src.shape().str(), want.str());
    float* d = dst.ptr<float>();
    if (m.transpose) {
      const int64_t rows = dst.dim(0), cols = dst.dim(1);  // dst [in, out] = src [out, in]ᵀ
#pragma omp parallel for schedule(static)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) d[r * cols + c] = element(src, c * rows + r);
    } else {
      for (int64_t i = 0; i < dst.numel(); ++i) d[i] = element(src, i);
    }
  }
  sync_compute_copies(plan);
}

}  // namespace tessera::models
