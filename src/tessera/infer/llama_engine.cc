// The CPU Engine for the Llama family (llama_engine.h): the decoder of models/llama.cc run on a KV
// cache, one call per prefill or decode step. Loading from a checkpoint is in
// llama_engine_load.cc; this file holds the engine and make_engine(spec, options, params).
//
// Memory: one Arena, sized and pre-faulted at construction, holds
//   weights   in the compute dtype, one output per row ([out, in], Hugging Face's nn.Linear
//             layout, transposed from the checkpoint's [in, out]): every product of a step is a
//             contiguous stream of its weight (ops/gemv.h); norm scales stay f32;
//   KV cache  per layer k, v [S, T, K, D] (S = max_slots, T = max_target_length);
//   rows      activations for R = max(max_prefill_length, max_slots) tokens.
// After the constructor nothing allocates: its warm-up runs each oneDNN GEMM shape once and one
// prefill, so that primitives and the attention kernel's per-thread scratch exist before the first
// request.
//
// A step, for M tokens at positions pos (a prompt's 0..P-1, or one new token per slot):
//   x = embed(ids)
//   per layer:  h = rms_norm(x); q, k, v = h·Wqᵀ, h·Wkᵀ, h·Wvᵀ; q, k = rope(q, pos), rope(k, pos)
//               store k, v at (slot, pos) in the cache
//               o = attention(q, cache)         prefill: causal over the prompt (ops/attention.h);
//                                               decode: one query per slot (ops/decode_attention.h)
//               x += o·Woᵀ;  h = rms_norm(x);  x += (act(h·Wgᵀ) * (h·Wuᵀ))·Wdᵀ
//   logits = rms_norm(x)·Wunembedᵀ (f32), for the last prompt row or every decode row.
// A prefill's last layer runs its output projection and MLP on the last row only: the other rows
// only needed their keys and values.
//
// Products: ops::gemv for the rows of a step, except that a prefill takes whole chunks of 256,
// then 64, rows through oneDNN's GEMM (ops::matmul, which is faster once M is large; in bf16 only
// where the CPU's bf16 dot product runs at full rate, see onednn_for_bf16), and leaves the
// remaining rows to gemv; fixed chunk sizes keep the oneDNN primitives few and made once.
// Wq, Wk, Wv are stored one after the other, as are Wg and Wu, so a decode step reads each group
// as one product (four parallel regions per layer); a prefill multiplies their row ranges apart.
// The residual adds are the accumulate of the output products (x += o·Woᵀ rounds once in bf16,
// where the training graph rounds o·Woᵀ to bf16 and then the sum).
#include "tessera/infer/llama_engine.h"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "tessera/backends/cpu/peak.h"
#include "tessera/core/arena.h"
#include "tessera/core/cpu_features.h"
#include "tessera/core/error.h"
#include "tessera/graph/graph.h"
#include "tessera/infer/graph_engine.h"
#include "tessera/infer/slot_engine.h"
#include "tessera/models/decoder.h"
#include "tessera/ops/activation.h"
#include "tessera/ops/attention.h"
#include "tessera/ops/convert.h"
#include "tessera/ops/decode_attention.h"
#include "tessera/ops/embedding.h"
#include "tessera/ops/gemv.h"
#include "tessera/ops/matmul.h"
#include "tessera/ops/norm.h"
#include "tessera/ops/rope.h"

namespace tessera::infer {

namespace {

constexpr int64_t kOnednnChunks[] = {256, 64};  // rows per oneDNN GEMM; fewer rows go to gemv
constexpr int64_t kWarmupPrefill = 128;         // attention tiles reach their largest size here

// Hands out consecutive 64-byte aligned tensors from an arena, or (without one) only counts bytes.
struct Carver {
  Arena* arena = nullptr;
  size_t bytes = 0;
  Tensor take(Shape s, DType d) {
    bytes += aligned_bytes(s, d);
    return arena ? arena->tensor(s, d) : Tensor();
  }
};

// dst [cols, rows] = src [rows, cols]ᵀ (f32) converted to dst's dtype, in 32 x 32 tiles.
void transpose_into(const Tensor& src, const Tensor& dst) {
  const int64_t rows = src.dim(0), cols = src.dim(1);
  const float* s = src.ptr<const float>();
  const bool bf16 = dst.dtype() == DType::kBF16;
  constexpr int64_t kTile = 32;
#pragma omp parallel for schedule(static) collapse(2) if (rows * cols > (1 << 16))
  for (int64_t r0 = 0; r0 < rows; r0 += kTile)
    for (int64_t c0 = 0; c0 < cols; c0 += kTile)
      for (int64_t c = c0; c < std::min(cols, c0 + kTile); ++c)
        for (int64_t r = r0; r < std::min(rows, r0 + kTile); ++r) {
          const float v = s[r * cols + c];
          if (bf16)
            dst.ptr<uint16_t>()[c * rows + r] = f32_to_bf16(v);
          else
            dst.ptr<float>()[c * rows + r] = v;
        }
}

struct Layer {
  Tensor attn_norm, mlp_norm;  // f32 [E]
  Tensor wqkv;                 // [(H + 2K) D, E]: the rows of wq, wk, wv, one after the other
  Tensor wq;                   // [H*D, E]
  Tensor wk, wv;               // [K*D, E]
  Tensor wo;                   // [E, H*D]
  Tensor wgu;                  // [2F, E]: the rows of wg, then wu
  Tensor wg, wu;               // [F, E]  gate and up
  Tensor wd;                   // [E, F]  down
  Tensor k_cache, v_cache;     // [S, T, K, D]
};

class LlamaEngine final : public SlotEngine {
 public:
  LlamaEngine(const models::ModelSpec& spec, const EngineOptions& options, const ParameterSource& params);

  const char* name() const override { return "llama"; }
  void prefill(int slot, std::span<const int32_t> prompt, std::span<float> logits) override;
  void decode(std::span<const int> slots, std::span<const int32_t> tokens, std::span<float> logits) override;

 private:
  void carve(Carver& c);
  void load(const ParameterSource& params);
  void warm_up();
  // The decoder on rows [0, M) of ids_ and pos_; `prefill_slot` >= 0 for a prefill into that slot,
  // else a decode step over row_slot_. Writes the logits of the last row (prefill) or of every row.
  void forward(int64_t M, int prefill_slot, float* logits);
  void attention(const Layer& L, int64_t M, int prefill_slot);
  void mlp(const Layer& L, int64_t r0, int64_t n, bool decode);
  void linear(const Tensor& x, const Tensor& w, const Tensor& y, bool accumulate) const;
  Tensor rows(const Tensor& t, int64_t r0, int64_t n) const { return t.slice0(r0, r0 + n); }
  // Positions [p0, p0 + n) of `slot` in a cache: [n, K, D].
  Tensor cache_rows(const Tensor& cache, int64_t slot, int64_t p0, int64_t n) const;

  DType dt_;
  int64_t E_, H_, K_, D_, F_, V_, S_, T_, R_;
  ops::Activation act_;
  bool use_onednn_;
  ops::RopeTable rope_;
  Arena arena_;
  std::vector<Layer> layers_;
  Tensor embedding_;   // [V, E]
  Tensor final_norm_;  // f32 [E]
  Tensor unembed_;     // [V, E]: the embedding when tied
  // Rows of a step (R = max(max_prefill_length, max_slots)).
  Tensor ids_, pos_, row_slot_, row_len_;  // int32 [R]
  Tensor x_, h_;                           // [R, E]
  Tensor rstd_;                            // f32 [R]
  Tensor q_, attn_;                        // [R, H*D]
  Tensor k_new_, v_new_;                   // [R, K*D]
  Tensor lse_;                             // f32 [H * R]
  Tensor gate_, up_, act_out_;             // [R, F]
  // Rows of a decode step (at most S): the outputs of the fused products.
  Tensor qkv_;  // [S, (H + 2K) D]
  Tensor gu_;   // [S, 2F]
};

// Whether oneDNN should take a bf16 prefill's large products. It runs them on the bf16 dot
// product (vdpbf16ps, or AMX), gemv on f32 FMA after widening (at most about 60 % of the f32 peak
// in practice); where the dot product runs at half the FMA rate (the Xeon of bench/RESULTS.md:
// oneDNN's bf16 GEMM reached 87 GFLOP/s on one core, gemv 103), gemv is the faster at every M. So
// oneDNN takes them when the CPU's calibrated bf16 peak exceeds two thirds of its f32 peak (full-
// rate dot products, AMX), and never without AVX-512 (oneDNN has no bf16 GEMM there). Measured
// once per process (~40 ms), with the AVX-512 loops whatever ISA the kernels run on: oneDNN
// dispatches itself, so the question is one about the CPU and the answer does not depend on which
// kernels were active first. (Under TESSERA_ISA=scalar or avx2 gemv runs narrower than measured
// here; forcing an ISA is for checking kernels, not for speed.)
bool onednn_for_bf16() {
  static const bool use = [] {
    if (!isa_supported(Isa::kAvx512)) return false;
    const cpu::DevicePeak p = cpu::calibrate_cpu_peak(0.02, Isa::kAvx512);
    return p.bf16_flops > 2.0 / 3.0 * p.f32_flops;
  }();
  return use;
}

LlamaEngine::LlamaEngine(const models::ModelSpec& spec, const EngineOptions& options,
                         const ParameterSource& params)
    : SlotEngine(spec, options),
      dt_(spec.dtype),
      E_(spec.emb_dim),
      H_(spec.num_query_heads),
      K_(spec.num_kv_heads),
      D_(spec.head_dim),
      F_(spec.mlp_dim),
      V_(spec.vocab_size),
      S_(options.max_slots),
      T_(options.max_target_length),
      R_(std::max<int64_t>(options.max_prefill_length, options.max_slots)),
      act_(ops::activation_from_name(spec.mlp_activation)),
      use_onednn_(spec.dtype == DType::kF32 || onednn_for_bf16()),
      rope_(models::rope_config(spec, options.max_target_length)) {
  spec_.batch = options.max_slots;
  spec_.seq = options.max_target_length;
  Carver measure;
  carve(measure);
  arena_ = Arena(measure.bytes, "engine");
  Carver real{&arena_};
  carve(real);
  load(params);
  warm_up();
}

void LlamaEngine::carve(Carver& c) {
  layers_.assign(static_cast<size_t>(spec_.num_decoder_layers), Layer{});
  embedding_ = c.take(Shape{V_, E_}, dt_);
  for (Layer& L : layers_) {
    L.attn_norm = c.take(Shape{E_}, DType::kF32);
    L.mlp_norm = c.take(Shape{E_}, DType::kF32);
    L.wqkv = c.take(Shape{(H_ + 2 * K_) * D_, E_}, dt_);
    L.wo = c.take(Shape{E_, H_ * D_}, dt_);
    L.wgu = c.take(Shape{2 * F_, E_}, dt_);
    L.wd = c.take(Shape{E_, F_}, dt_);
    if (c.arena) {  // row ranges of the fused matrices are the separate weights
      L.wq = L.wqkv.slice0(0, H_ * D_);
      L.wk = L.wqkv.slice0(H_ * D_, (H_ + K_) * D_);
      L.wv = L.wqkv.slice0((H_ + K_) * D_, (H_ + 2 * K_) * D_);
      L.wg = L.wgu.slice0(0, F_);
      L.wu = L.wgu.slice0(F_, 2 * F_);
    }
  }
  final_norm_ = c.take(Shape{E_}, DType::kF32);
  unembed_ = spec_.logits_via_embedding ? embedding_ : c.take(Shape{V_, E_}, dt_);
  for (Layer& L : layers_) {
    L.k_cache = c.take(Shape{S_, T_, K_, D_}, dt_);
    L.v_cache = c.take(Shape{S_, T_, K_, D_}, dt_);
  }
  ids_ = c.take(Shape{R_}, DType::kI32);
  pos_ = c.take(Shape{R_}, DType::kI32);
  row_slot_ = c.take(Shape{R_}, DType::kI32);
  row_len_ = c.take(Shape{R_}, DType::kI32);
  x_ = c.take(Shape{R_, E_}, dt_);
  h_ = c.take(Shape{R_, E_}, dt_);
  rstd_ = c.take(Shape{R_}, DType::kF32);
  q_ = c.take(Shape{R_, H_ * D_}, dt_);
  attn_ = c.take(Shape{R_, H_ * D_}, dt_);
  k_new_ = c.take(Shape{R_, K_ * D_}, dt_);
  v_new_ = c.take(Shape{R_, K_ * D_}, dt_);
  lse_ = c.take(Shape{H_ * R_}, DType::kF32);
  gate_ = c.take(Shape{R_, F_}, dt_);
  up_ = c.take(Shape{R_, F_}, dt_);
  act_out_ = c.take(Shape{R_, F_}, dt_);
  qkv_ = c.take(Shape{S_, (H_ + 2 * K_) * D_}, dt_);
  gu_ = c.take(Shape{S_, 2 * F_}, dt_);
}

void LlamaEngine::load(const ParameterSource& params) {
  for (const auto& [name, shape] : llama_parameter_shapes(spec_)) {
    const Tensor src = params(name);
    TESSERA_CHECK_SHAPE(
        src.defined() && src.dtype() == DType::kF32 && src.shape() == shape && src.is_contiguous(),
        "engine: parameter '{}' must be contiguous float32 {}, got {}", name, shape.str(),
        src.defined() ? src.str() : std::string("nothing"));
    Tensor dst;
    bool transpose = shape.rank() == 2;
    if (name == "token_embedder.embedding") {
      dst = embedding_, transpose = false;  // [V, E] in both layouts
    } else if (name == "decoder.decoder_norm.scale") {
      dst = final_norm_;
    } else if (name == "decoder.logits_dense.kernel") {
      dst = unembed_;
    } else {
      // decoder.layers_<l>.<rest>
      const std::string prefix = "decoder.layers_";
      const size_t dot = name.find('.', prefix.size());
      TESSERA_ASSERT(name.starts_with(prefix) && dot != std::string::npos);
      const auto l = static_cast<size_t>(std::stoll(name.substr(prefix.size(), dot - prefix.size())));
      TESSERA_ASSERT(l < layers_.size());
      const std::string rest = name.substr(dot + 1);
      Layer& L = layers_[l];
      const std::pair<const char*, Tensor*> map[] = {
          {"pre_self_attention_layer_norm.scale", &L.attn_norm},
          {"post_self_attention_layer_norm.scale", &L.mlp_norm},
          {"self_attention.query.kernel", &L.wq},
          {"self_attention.key.kernel", &L.wk},
          {"self_attention.value.kernel", &L.wv},
          {"self_attention.out.kernel", &L.wo},
          {"mlp.wi_0.kernel", &L.wg},
          {"mlp.wi_1.kernel", &L.wu},
          {"mlp.wo.kernel", &L.wd},
      };
      for (const auto& [suffix, t] : map)
        if (rest == suffix) dst = *t;
      TESSERA_ASSERT(dst.defined());
    }
    if (transpose)
      transpose_into(src, dst);
    else
      ops::convert(src, dst);
  }
}

void LlamaEngine::warm_up() {
  // Every oneDNN GEMM shape a step can use (the chunk sizes that fit R rows), once on zeroed rows.
  if (use_onednn_) {
    std::memset(x_.data(), 0, x_.nbytes());
    std::memset(h_.data(), 0, h_.nbytes());
    std::memset(attn_.data(), 0, attn_.nbytes());
    std::memset(act_out_.data(), 0, act_out_.nbytes());
    const Layer& L = layers_[0];
    for (int64_t c : kOnednnChunks) {
      if (c > R_) continue;
      const Tensor h = rows(h_, 0, c);
      linear(h, L.wq, rows(q_, 0, c), false);
      linear(h, L.wk, rows(k_new_, 0, c), false);
      linear(h, L.wg, rows(gate_, 0, c), false);
      linear(rows(attn_, 0, c), L.wo, rows(x_, 0, c), true);
      linear(rows(act_out_, 0, c), L.wd, rows(x_, 0, c), true);
    }
  }
  // One prefill grows the attention kernel's per-thread scratch to its largest tiles.
  const int64_t n = std::min(options_.max_prefill_length, kWarmupPrefill);
  std::vector<int32_t> prompt(static_cast<size_t>(n), 0);
  std::vector<float> logits(static_cast<size_t>(V_));
  prefill(0, prompt, logits);
  release(0);
}

void LlamaEngine::prefill(int slot, std::span<const int32_t> prompt, std::span<float> logits) {
  check_prefill(slot, prompt, logits);
  const auto P = static_cast<int64_t>(prompt.size());
  length_[static_cast<size_t>(slot)] = 0;  // cleared first: a failed prefill leaves the slot free
  std::memcpy(ids_.data(), prompt.data(), prompt.size_bytes());
  for (int64_t i = 0; i < P; ++i) pos_.ptr<int32_t>()[i] = static_cast<int32_t>(i);
  forward(P, slot, logits.data());
  length_[static_cast<size_t>(slot)] = P;
}

void LlamaEngine::decode(std::span<const int> slots, std::span<const int32_t> tokens,
                         std::span<float> logits) {
  check_decode(slots, tokens, logits);
  const auto M = static_cast<int64_t>(slots.size());
  for (int64_t i = 0; i < M; ++i) {
    const int s = slots[static_cast<size_t>(i)];
    const int64_t len = length_[static_cast<size_t>(s)];
    ids_.ptr<int32_t>()[i] = tokens[static_cast<size_t>(i)];
    pos_.ptr<int32_t>()[i] = static_cast<int32_t>(len);
    row_slot_.ptr<int32_t>()[i] = s;
    row_len_.ptr<int32_t>()[i] = static_cast<int32_t>(len + 1);
  }
  if (M == 0) return;
  forward(M, -1, logits.data());
  for (int64_t i = 0; i < M; ++i) ++length_[static_cast<size_t>(slots[static_cast<size_t>(i)])];
}

void LlamaEngine::forward(int64_t M, int prefill_slot, float* logits) {
  const auto eps = static_cast<float>(spec_.norm_eps);
  ops::embedding_forward(embedding_, ids_.slice0(0, M), rows(x_, 0, M));
  const auto L = static_cast<int64_t>(layers_.size());
  for (int64_t l = 0; l < L; ++l) {
    attention(layers_[static_cast<size_t>(l)], M, prefill_slot);
    // After a prefill's last attention only the last row still matters.
    const int64_t r0 = prefill_slot >= 0 && l == L - 1 ? M - 1 : 0;
    mlp(layers_[static_cast<size_t>(l)], r0, M - r0, prefill_slot < 0);
  }
  const int64_t r0 = prefill_slot >= 0 ? M - 1 : 0, n = M - r0;
  ops::rmsnorm_fwd(rows(x_, r0, n), final_norm_, eps, rows(h_, r0, n), rstd_.slice0(0, n));
  linear(rows(h_, r0, n), unembed_, Tensor(logits, Shape{n, V_}, DType::kF32), false);
}

Tensor LlamaEngine::cache_rows(const Tensor& cache, int64_t slot, int64_t p0, int64_t n) const {
  const size_t off = static_cast<size_t>((slot * T_ + p0) * K_ * D_) * dtype_size(dt_);
  return Tensor(static_cast<char*>(cache.data()) + off, Shape{n, K_, D_}, dt_);
}

void LlamaEngine::attention(const Layer& L, int64_t M, int prefill_slot) {
  const auto eps = static_cast<float>(spec_.norm_eps);
  const Tensor x = rows(x_, 0, M), h = rows(h_, 0, M), pos = pos_.slice0(0, M);
  ops::rmsnorm_fwd(x, L.attn_norm, eps, h, rstd_.slice0(0, M));
  const Tensor q = rows(q_, 0, M).reshape(Shape{M, H_, D_});
  const Tensor o = rows(attn_, 0, M);
  if (prefill_slot >= 0) {
    const Tensor k = rows(k_new_, 0, M).reshape(Shape{M, K_, D_});
    const Tensor v = rows(v_new_, 0, M).reshape(Shape{M, K_, D_});
    linear(h, L.wq, rows(q_, 0, M), false);
    linear(h, L.wk, rows(k_new_, 0, M), false);
    linear(h, L.wv, rows(v_new_, 0, M), false);
    ops::rope_fwd(q, pos, rope_, ops::RopeLayout::kRotateHalf, q);
    // The prompt's keys and values are positions 0..M-1 of the slot: one contiguous block.
    const Tensor kc = cache_rows(L.k_cache, prefill_slot, 0, M),
                 vc = cache_rows(L.v_cache, prefill_slot, 0, M);
    ops::rope_fwd(k, pos, rope_, ops::RopeLayout::kRotateHalf, kc);
    ops::convert(v, vc);
    ops::AttentionOptions opt;
    opt.sliding_window = spec_.sliding_window;
    ops::attention_fwd(q.reshape(Shape{1, M, H_, D_}), kc.reshape(Shape{1, M, K_, D_}),
                       vc.reshape(Shape{1, M, K_, D_}), o.reshape(Shape{1, M, H_, D_}),
                       lse_.slice0(0, H_ * M).reshape(Shape{1, H_, M}), opt);
    return;
  }
  // Decode: one product for q, k and v of every row; then per row, q rotated into q_, k rotated
  // into its cache position, v copied there.
  const Tensor qkv = rows(qkv_, 0, M);
  linear(h, L.wqkv, qkv, false);
  const size_t e = dtype_size(dt_);
  const int64_t HD = H_ * D_, KD = K_ * D_;
  for (int64_t i = 0; i < M; ++i) {
    char* row = static_cast<char*>(qkv.slice0(i, i + 1).data());
    const int64_t s = row_slot_.ptr<int32_t>()[i], p = pos_.ptr<int32_t>()[i];
    const Tensor pos_i = pos.slice0(i, i + 1);
    ops::rope_fwd(Tensor(row, Shape{1, H_, D_}, dt_), pos_i, rope_, ops::RopeLayout::kRotateHalf,
                  q.slice0(i, i + 1));
    ops::rope_fwd(Tensor(row + HD * e, Shape{1, K_, D_}, dt_), pos_i, rope_, ops::RopeLayout::kRotateHalf,
                  cache_rows(L.k_cache, s, p, 1));
    std::memcpy(cache_rows(L.v_cache, s, p, 1).data(), row + (HD + KD) * e, static_cast<size_t>(KD) * e);
  }
  ops::decode_attention(q, L.k_cache, L.v_cache, row_slot_.slice0(0, M), row_len_.slice0(0, M),
                        o.reshape(Shape{M, H_, D_}), {.sliding_window = spec_.sliding_window});
}

void LlamaEngine::mlp(const Layer& L, int64_t r0, int64_t n, bool decode) {
  const auto eps = static_cast<float>(spec_.norm_eps);
  const Tensor x = rows(x_, r0, n), h = rows(h_, r0, n), a = rows(act_out_, r0, n);
  linear(rows(attn_, r0, n), L.wo, x, /*accumulate=*/true);  // x += o·Woᵀ
  ops::rmsnorm_fwd(x, L.mlp_norm, eps, h, rstd_.slice0(0, n));
  if (decode) {  // one product for gate and up, [n, 2F]; the unit row by row
    const Tensor gu = rows(gu_, 0, n);
    linear(h, L.wgu, gu, false);
    for (int64_t i = 0; i < n; ++i) {
      const Tensor row = gu.slice0(i, i + 1).reshape(Shape{2, F_});
      ops::glu_fwd(act_, row.slice0(0, 1), row.slice0(1, 2), a.slice0(i, i + 1));
    }
  } else {
    const Tensor gate = rows(gate_, r0, n), up = rows(up_, r0, n);
    linear(h, L.wg, gate, false);
    linear(h, L.wu, up, false);
    ops::glu_fwd(act_, gate, up, a);
  }
  linear(a, L.wd, x, /*accumulate=*/true);  // x += (act(gate) * up)·Wdᵀ
}

void LlamaEngine::linear(const Tensor& x, const Tensor& w, const Tensor& y, bool accumulate) const {
  const int64_t M = x.dim(0);
  int64_t r = 0;
  if (use_onednn_)
    for (int64_t c : kOnednnChunks)
      for (; M - r >= c; r += c)
        ops::matmul(rows(x, r, c), w, rows(y, r, c), {.trans_b = true, .accumulate = accumulate});
  if (r < M) ops::gemv(rows(x, r, M - r), w, rows(y, r, M - r), {.accumulate = accumulate});
}

// Why the Llama engine cannot run `s` (the graph engine then does), or "" when it can.
std::string llama_engine_refuses(const models::ModelSpec& s) {
  if (s.decoder_block != "llama2" && s.decoder_block != "mistral" && s.decoder_block != "default")
    return fmt::format("decoder_block '{}' (it runs llama2 and mistral)", s.decoder_block);
  if (s.attention_bias || s.attention_out_bias || s.mlp_bias || s.qk_norm || s.attention_sinks)
    return "projection biases, QK-norm or attention sinks";
  if (s.rope_type != "default" && s.rope_type != "llama3.1")
    return fmt::format("rope_type '{}' (it supports default and llama3.1)", s.rope_type);
  if (s.head_dim < 2 || s.head_dim % 2 != 0 || s.head_dim > 256 || s.window_cycle != 0 || s.num_experts > 1)
    return "this head_dim, alternating windows or experts";
  return "";
}

// The spec and options the Llama engine builds; kConfig otherwise.
void check_buildable(const models::ModelSpec& s, const EngineOptions& o) {
  if (s.dtype != DType::kF32 && s.dtype != DType::kBF16)
    fail(ErrorKind::kConfig, "dtype {}: the engine computes in float32 or bfloat16", dtype_name(s.dtype));
  if (s.emb_dim < 1 || s.num_query_heads < 1 || s.num_kv_heads < 1 ||
      s.num_query_heads % s.num_kv_heads != 0 || s.mlp_dim < 1 || s.num_decoder_layers < 1 ||
      s.vocab_size < 1)
    fail(ErrorKind::kConfig,
         "model dimensions: emb {}, heads {}/{} (query heads a multiple of kv heads), mlp {}, layers {}, "
         "vocab {} "
         "must all be >= 1",
         s.emb_dim, s.num_query_heads, s.num_kv_heads, s.mlp_dim, s.num_decoder_layers, s.vocab_size);
  if (s.sliding_window < 0) fail(ErrorKind::kConfig, "sliding_window_size {} must be >= 0", s.sliding_window);
  if (o.max_slots < 1)
    fail(ErrorKind::kConfig, "the engine needs at least one slot, got max_slots {}", o.max_slots);
  if (o.max_target_length < 1 || o.max_target_length > std::numeric_limits<int32_t>::max())
    fail(ErrorKind::kConfig, "max_target_length {} must be in [1, 2^31)", o.max_target_length);
  if (o.max_prefill_length < 1 || o.max_prefill_length > o.max_target_length)
    fail(ErrorKind::kConfig, "max_prefill_predict_length {} must be in [1, max_target_length = {}]",
         o.max_prefill_length, o.max_target_length);
}

}  // namespace

std::vector<std::pair<std::string, Shape>> llama_parameter_shapes(const models::ModelSpec& spec) {
  // The training graph's parameter list (models/llama.cc through models/decoder.h), built for one token: the
  // engine reads exactly what training writes.
  models::ModelSpec one = spec;
  one.batch = 1;
  one.seq = 1;
  graph::Graph g;
  models::build_decoder(g, one);
  std::vector<std::pair<std::string, Shape>> out;
  for (graph::ValueId id : g.params()) out.emplace_back(g.value(id).name, g.value(id).shape);
  return out;
}

std::unique_ptr<Engine> make_engine(const models::ModelSpec& spec, const EngineOptions& options,
                                    const ParameterSource& params) {
  const std::string refused = llama_engine_refuses(spec);
  const EngineKind kind = options.kind == EngineKind::kAuto
                              ? (refused.empty() ? EngineKind::kLlama : EngineKind::kGraph)
                              : options.kind;
  if (kind == EngineKind::kGraph) return make_graph_engine(spec, options, params);
  if (!refused.empty()) fail(ErrorKind::kConfig, "the Llama decoding engine does not run {}", refused);
  check_buildable(spec, options);
  return std::make_unique<LlamaEngine>(spec, options, params);
}

}  // namespace tessera::infer
