#include "tessera/convert/hf_tensors.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "tessera/core/error.h"
#include "tessera/graph/graph.h"
#include "tessera/models/decoder.h"
#include "tessera/models/init.h"

namespace tessera::convert {

using models::ModelSpec;

namespace {

// `pattern` with "{l}" and "{e}" replaced by `layer` and `expert`.
std::string expand(std::string_view pattern, int64_t layer, int64_t expert) {
  std::string out(pattern);
  for (const auto& [key, value] : {std::pair{"{l}", layer}, std::pair{"{e}", expert}})
    for (size_t at = out.find(key); at != std::string::npos; at = out.find(key))
      out.replace(at, 3, std::to_string(value));
  return out;
}

bool has_layer(const HfTensorRule& r) {
  return r.tessera.find("{l}") != std::string_view::npos;
}

// The shape of the Hugging Face tensor holding `part` (the piece's Tessera shape).
Shape hf_shape_of(const Shape& part, const HfTensorRule& r) {
  Shape s = part;
  const int n = s.rank();
  if (r.transpose) {
    TESSERA_ASSERT(n >= 2);
    std::swap(s[n - 1], s[n - 2]);
  }
  s[n - 1] *= r.count;
  return s;
}

}  // namespace

std::vector<HfTensorPlan> hf_tensor_plan(const HfFamily& f, const std::map<std::string, Shape>& params,
                                         int64_t layers) {
  std::vector<HfTensorPlan> out;
  std::map<std::string, size_t> where;  // HF name -> index in out
  std::set<std::string> mapped;
  auto emit = [&](const HfTensorRule& r, int64_t l) {
    const std::string name = expand(r.tessera, l, 0);
    const auto it = params.find(name);
    if (it == params.end()) return;  // an option this model does not have
    mapped.insert(name);
    const bool per_expert = r.hf.find("{e}") != std::string_view::npos;
    const int64_t experts = per_expert ? it->second[0] : 1;
    Shape part = it->second;
    if (per_expert) {
      part = Shape::of_rank(it->second.rank() - 1);
      for (int k = 1; k < it->second.rank(); ++k) part[k - 1] = it->second[k];
    }
    for (int64_t e = 0; e < experts; ++e) {
      const std::string hf = expand(r.hf, l, e);
      const Shape shape = hf_shape_of(part, r);
      auto [pos, fresh] = where.emplace(hf, out.size());
      if (fresh) out.push_back({hf, shape, {}});
      HfTensorPlan& t = out[pos->second];
      TESSERA_ASSERT(t.shape == shape);  // the table's parts of one tensor agree
      t.pieces.push_back({name, per_expert ? e : -1, r.transpose, r.split, r.index, r.count});
    }
  };
  for (size_t i = 0; i < f.tensors.size();) {
    if (!has_layer(f.tensors[i])) {
      emit(f.tensors[i++], -1);
      continue;
    }
    size_t j = i;
    while (j < f.tensors.size() && has_layer(f.tensors[j])) ++j;
    for (int64_t l = 0; l < layers; ++l)
      for (size_t k = i; k < j; ++k) emit(f.tensors[k], l);
    i = j;
  }
  for (const HfTensorPlan& t : out) TESSERA_ASSERT(static_cast<int>(t.pieces.size()) == t.pieces[0].count);
  for (const auto& [name, shape] : params)
    if (!mapped.count(name))
      fail(ErrorKind::kConfig,
           "parameter '{}' {} has no tensor in Hugging Face's {} ({}): the model has an option that "
           "transformers' {} does not",
           name, shape.str(), f.architecture, f.model_type, f.model_type);
  return out;
}

Tensor expert_slice(const Tensor& stacked, int64_t e) {
  TESSERA_ASSERT(stacked.is_contiguous() && stacked.rank() >= 2 && e >= 0 && e < stacked.dim(0));
  Shape s = Shape::of_rank(stacked.rank() - 1);
  for (int k = 1; k < stacked.rank(); ++k) s[k - 1] = stacked.dim(k);
  auto* base = static_cast<uint8_t*>(stacked.data());
  return Tensor(base + static_cast<size_t>(e) * static_cast<size_t>(s.numel()) * dtype_size(stacked.dtype()),
                s, stacked.dtype());
}

std::map<std::string, Shape> model_params(const ModelSpec& spec) {
  graph::Graph g;
  models::build_decoder(g, spec);
  std::map<std::string, Shape> out;
  for (const graph::Value& v : g.values())
    if (v.kind == graph::ValueKind::kParam) out.emplace(v.name, v.shape);
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

// A 3-D strided view in elements: element (b, r, c) at offset + b*sb + r*sr + c*sc.
struct View {
  int64_t offset = 0, sb = 0, sr = 0, sc = 0;
};
struct Dims {
  int64_t batch = 1, rows = 1, cols = 1;
};

// dst[view d] = src[view s] over `n`, converting the element type (S, D: float for f32, uint16_t
// for bf16). Tiles of kTile x kTile: within one, the strided side of a transpose stays in a few KiB
// of each matrix, so it hits cache.
template <typename S, typename D>
void copy_view(const S* src, View s, D* dst, View d, Dims n) {
  constexpr int64_t kTile = 64;
  const int64_t row_tiles = (n.rows + kTile - 1) / kTile, col_tiles = (n.cols + kTile - 1) / kTile;
#pragma omp parallel for collapse(3) schedule(static) if (n.batch * n.rows * n.cols > (int64_t{1} << 16))
  for (int64_t b = 0; b < n.batch; ++b)
    for (int64_t rt = 0; rt < row_tiles; ++rt)
      for (int64_t ct = 0; ct < col_tiles; ++ct) {
        const int64_t r0 = rt * kTile, r1 = std::min(n.rows, r0 + kTile);
        const int64_t c0 = ct * kTile, c1 = std::min(n.cols, c0 + kTile);
        const S* sp = src + s.offset + b * s.sb;
        D* dp = dst + d.offset + b * d.sb;
        // The inner loop runs along dst's contiguous axis (writes stream; the strided reads of
        // a transpose stay within the tile's few KiB).
        if (d.sc == 1) {
          for (int64_t r = r0; r < r1; ++r)
            for (int64_t c = c0; c < c1; ++c) dp[r * d.sr + c] = narrow<D>(widen(sp[r * s.sr + c * s.sc]));
        } else {
          for (int64_t c = c0; c < c1; ++c)
            for (int64_t r = r0; r < r1; ++r)
              dp[r * d.sr + c * d.sc] = narrow<D>(widen(sp[r * s.sr + c * s.sc]));
        }
      }
}

// The piece's Tessera tensor (shape `part`, contiguous) as 3-D dims, its contiguous view, and the
// view of the same elements in the Hugging Face tensor of shape `hf`.
void piece_views(const Shape& part, const Shape& hf, const HfPiece& p, Dims& n, View& tessera, View& theirs) {
  const int r = part.rank();
  std::vector<int64_t> hs(static_cast<size_t>(r));  // HF's contiguous strides
  int64_t stride = 1;
  for (int k = r - 1; k >= 0; --k) {
    hs[static_cast<size_t>(k)] = stride;
    stride *= hf[k];
  }
  // Tessera's last axis runs along HF's last axis (or, transposed, its second last); the split
  // selects a block or every count-th entry of HF's last axis.
  const int64_t part_last = p.transpose ? part[r - 2] : part[r - 1];  // the split axis' size in the part
  const int64_t step = p.split == HfSplit::kInterleaved ? p.count : 1;
  theirs.offset = p.split == HfSplit::kBlock         ? p.index * part_last
                  : p.split == HfSplit::kInterleaved ? p.index
                                                     : 0;
  std::vector<int64_t> g(hs);  // HF strides of Tessera's axes
  g[static_cast<size_t>(r - 1)] = step;
  if (p.transpose) std::swap(g[static_cast<size_t>(r - 1)], g[static_cast<size_t>(r - 2)]);
  n.cols = part[r - 1];
  n.rows = r >= 2 ? part[r - 2] : 1;
  n.batch = part.numel() / (n.rows * n.cols);
  theirs.sc = g[static_cast<size_t>(r - 1)];
  theirs.sr = r >= 2 ? g[static_cast<size_t>(r - 2)] : 0;
  theirs.sb = r >= 3 ? g[static_cast<size_t>(r - 3)] : 0;
  tessera = {.offset = 0, .sb = n.rows * n.cols, .sr = n.cols, .sc = 1};
}

// The piece's Tessera shape: `hf` with the split undone and the transpose swapped back.
Shape part_shape(const Shape& hf, const HfPiece& p) {
  Shape s = hf;
  const int n = s.rank();
  TESSERA_ASSERT(n >= (p.transpose ? 2 : 1));
  s[n - 1] /= p.count;
  if (p.transpose) std::swap(s[n - 1], s[n - 2]);
  return s;
}

// dst[c, r] = src[r, c] for src [rows, cols] (a whole Linear weight): the common case, in tiles
// whose typed inner loop the compiler vectorises.
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

// src -> dst for the piece; `src_shape` is src's (either side's) shape. Whole tensors take the
// fast paths (a copy, or a transpose per leading index); parts of fused tensors the strided view.
template <typename S, typename D>
void copy_piece(const Tensor& src, View sv, const Tensor& dst, View dv, Dims n, const HfPiece& p) {
  if (p.split == HfSplit::kWhole && !p.transpose)
    return copy_elements(src.ptr<S>(), dst.ptr<D>(), src.numel());
  if (p.split == HfSplit::kWhole) {
    const int64_t rows = src.dim(-2), cols = src.dim(-1), batch = src.numel() / (rows * cols);
    for (int64_t b = 0; b < batch; ++b)
      transpose_tiles(src.ptr<S>() + b * rows * cols, dst.ptr<D>() + b * rows * cols, rows, cols);
    return;
  }
  copy_view(src.ptr<S>(), sv, dst.ptr<D>(), dv, n);
}

}  // namespace

void hf_piece_to_tessera(const Tensor& src, const HfPiece& p, const Tensor& dst, const std::string& file,
                         const std::string& name) {
  TESSERA_ASSERT(dst.dtype() == DType::kF32 && dst.is_contiguous());
  if (src.dtype() != DType::kF32 && src.dtype() != DType::kBF16)
    fail(ErrorKind::kConfig, "{}: tensor '{}' is {}; Tessera reads float32 or bfloat16", file, name,
         dtype_name(src.dtype()));
  Shape want = dst.shape();
  const int r = want.rank();
  TESSERA_ASSERT(r >= (p.transpose ? 2 : 1));
  if (p.transpose) std::swap(want[r - 1], want[r - 2]);
  want[r - 1] *= p.count;
  if (!(src.shape() == want))
    fail(ErrorKind::kConfig, "{}: tensor '{}' has shape {}, but the model needs {}", file, name,
         src.shape().str(), want.str());
  Dims n;
  View ours, theirs;
  piece_views(dst.shape(), src.shape(), p, n, ours, theirs);
  if (src.dtype() == DType::kBF16)
    copy_piece<uint16_t, float>(src, theirs, dst, ours, n, p);
  else
    copy_piece<float, float>(src, theirs, dst, ours, n, p);
}

void tessera_to_hf_piece(const Tensor& src, const HfPiece& p, const Tensor& dst) {
  TESSERA_ASSERT(src.dtype() == DType::kF32 && src.shape() == part_shape(dst.shape(), p));
  TESSERA_ASSERT(dst.dtype() == DType::kF32 || dst.dtype() == DType::kBF16);
  Dims n;
  View ours, theirs;
  piece_views(src.shape(), dst.shape(), p, n, ours, theirs);
  if (dst.dtype() == DType::kBF16)
    copy_piece<float, uint16_t>(src, ours, dst, theirs, n, p);
  else
    copy_piece<float, float>(src, ours, dst, theirs, n, p);
}

void dequantize_mxfp4(const Tensor& blocks, const Tensor& scales, const Tensor& dst, const std::string& file,
                      const std::string& name) {
  static constexpr float kFp4[16] = {+0.0f, +0.5f, +1.0f, +1.5f, +2.0f, +3.0f, +4.0f, +6.0f,
                                     -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
  if (blocks.dtype() != DType::kU8 || scales.dtype() != DType::kU8 || blocks.rank() != 4 ||
      blocks.dim(3) != 16 || scales.rank() != 3 || scales.dim(0) != blocks.dim(0) ||
      scales.dim(1) != blocks.dim(1) || scales.dim(2) != blocks.dim(2))
    fail(ErrorKind::kConfig,
         "{}: '{}_blocks' ({} {}) and '{}_scales' ({} {}) are not an MXFP4 pair (uint8 [X, R, G, 16] and "
         "uint8 [X, R, G])",
         file, name, dtype_name(blocks.dtype()), blocks.shape().str(), name, dtype_name(scales.dtype()),
         scales.shape().str());
  const int64_t X = blocks.dim(0), R = blocks.dim(1), G = blocks.dim(2);
  const Shape want{X, 32 * G, R};
  if (!(dst.shape() == want))
    fail(ErrorKind::kConfig, "{}: MXFP4 tensor '{}' dequantises to {}, but the model needs {}", file, name,
         want.str(), dst.shape().str());
  TESSERA_ASSERT(dst.dtype() == DType::kF32);
  const uint8_t* b = blocks.ptr<uint8_t>();
  const uint8_t* s = scales.ptr<uint8_t>();
  float* out = dst.ptr<float>();
  const int64_t C = 32 * G;  // dequantised row length, before the transpose to [X, C, R]
#pragma omp parallel for collapse(2) schedule(static) if (X * R * C > (int64_t{1} << 16))
  for (int64_t x = 0; x < X; ++x)
    for (int64_t r = 0; r < R; ++r)
      for (int64_t g = 0; g < G; ++g) {
        const int exp = static_cast<int>(s[(x * R + r) * G + g]) - 127;
        const uint8_t* row = b + ((x * R + r) * G + g) * 16;
        for (int64_t i = 0; i < 16; ++i) {
          const int64_t c = 32 * g + 2 * i;  // w[x, r, c] -> out[x, c, r]
          out[(x * C + c) * R + r] = std::ldexp(kFp4[row[i] & 15], exp);
          out[(x * C + c + 1) * R + r] = std::ldexp(kFp4[row[i] >> 4], exp);
        }
      }
}

namespace {

const HfFamily& family_of(const ModelSpec& spec) {
  const HfFamily* family = hf_family_of_block(spec.decoder_block);
  if (!family)
    fail(ErrorKind::kConfig, "decoder_block={} has no Hugging Face table (converted: {})", spec.decoder_block,
         hf_blocks());
  return *family;
}

}  // namespace

std::vector<HfName> hf_names(const ModelSpec& spec) {
  const HfFamily& family = family_of(spec);
  std::vector<HfName> out;
  for (const HfTensorPlan& t : hf_tensor_plan(family, model_params(spec), spec.num_decoder_layers)) {
    const HfPiece& p = t.pieces[0];
    if (t.pieces.size() != 1 || p.expert >= 0 || p.count != 1)
      fail(ErrorKind::kConfig, "{}'s tensor '{}' holds parts of parameters; read it through hf_tensor_plan",
           family.model_type, t.hf);
    out.push_back({p.tessera, t.hf, p.transpose});
  }
  return out;
}

void load_hf_parameters(graph::Plan& plan, const ModelSpec& spec, const SafetensorsFile& file,
                        const std::string& prefix) {
  const HfFamily* family = &family_of(spec);
  std::map<std::string, graph::ValueId> by_name;
  std::map<std::string, Shape> params;
  const auto& values = plan.graph().values();
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i].kind == graph::ValueKind::kParam) {
      by_name[values[i].name] = static_cast<graph::ValueId>(i);
      params.emplace(values[i].name, values[i].shape);
    }
  for (const HfTensorPlan& t : hf_tensor_plan(*family, params, spec.num_decoder_layers)) {
    const std::string name = prefix + t.hf;
    if (!file.contains(name))
      fail(ErrorKind::kConfig, "{}: has no tensor '{}' {}", file.path(), name, t.shape.str());
    const Tensor src = file.get(name);
    for (const HfPiece& p : t.pieces) {
      const Tensor whole = plan.view(by_name.at(p.tessera));
      hf_piece_to_tessera(src, p, p.expert < 0 ? whole : expert_slice(whole, p.expert), file.path(), name);
    }
  }
  models::sync_compute_copies(plan);
}

}  // namespace tessera::convert
