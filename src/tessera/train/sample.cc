#include "tessera/train/sample.h"

#include <cmath>
#include <random>
#include <vector>

#include "tessera/core/error.h"

namespace tessera::train {

namespace {

graph::ValueId find_value(const graph::Graph& g, const std::string& name) {
  for (size_t i = 0; i < g.values().size(); ++i)
    if (g.values()[i].name == name) return static_cast<graph::ValueId>(i);
  fail(ErrorKind::kInternal, "sample: the plan has no value named '{}'", name);
}

float logit_at(const Tensor& logits, int64_t row, int64_t v) {
  const int64_t i = row * logits.dim(1) + v;
  return logits.dtype() == DType::kBF16 ? bf16_to_f32(logits.ptr<uint16_t>()[i]) : logits.ptr<float>()[i];
}

// Row `row` of the logits over the whole vocabulary, into `out` [V]. Under tensor parallelism with
// the vocabulary split, this rank holds the columns [rank V/tp, (rank + 1) V/tp) (graph.h) and an
// all-gather over the tensor axis puts the row together, so every rank samples the same token.
void gather_row(const Tensor& logits, const graph::Value& v, int64_t row, dist::Mesh* mesh,
                std::vector<float>& part, std::vector<float>& out) {
  const int64_t cols = logits.dim(1);
  part.resize(static_cast<size_t>(cols));
  for (int64_t c = 0; c < cols; ++c) part[static_cast<size_t>(c)] = logit_at(logits, row, c);
  if (!v.tp.split()) {
    out = part;
    return;
  }
  TESSERA_CHECK(mesh && static_cast<int64_t>(out.size()) == v.tp.global, ErrorKind::kInternal,
                "sample: split logits without a mesh");
  mesh->axis(MeshAxis::kTensor).all_gather(part.data(), out.data(), static_cast<size_t>(cols), DType::kF32);
}

}  // namespace

std::string sample_text(Trainer& trainer, const data::Tokenizer& tokenizer, const SampleOptions& o) {
  if (o.strategy != "greedy" && o.strategy != "weighted")
    fail(ErrorKind::kConfig,
         "decode_sampling_strategy={}: the end-of-training sample supports greedy and weighted", o.strategy);
  graph::Plan& plan = trainer.plan();
  const graph::Graph& g = plan.graph();
  const models::DecoderInputs& in = trainer.inputs();
  const int64_t B = trainer.spec().batch, T = trainer.spec().seq, V = trainer.spec().vocab_size;
  std::vector<int32_t> ids;
  if (tokenizer.bos_id() >= 0) ids.push_back(tokenizer.bos_id());
  for (int32_t t : tokenizer.encode(o.prompt)) ids.push_back(t);
  TESSERA_CHECK(!ids.empty() && static_cast<int64_t>(ids.size()) < T, ErrorKind::kConfig,
                "sample: the prompt has {} tokens; it must have between 1 and max_target_length - 1 = {}",
                ids.size(), T - 1);
  const graph::ValueId logits_id = find_value(g, "decoder.logits");
  const Tensor logits = plan.view(logits_id);
  std::vector<float> part, row(static_cast<size_t>(V));
  auto* tok = plan.view(in.tokens).ptr<int32_t>();
  auto* tgt = plan.view(in.targets).ptr<int32_t>();
  auto* pos = plan.view(in.positions).ptr<int32_t>();
  auto* seg = plan.view(in.segment_ids).ptr<int32_t>();
  std::mt19937_64 rng(o.seed);
  std::vector<double> p(static_cast<size_t>(V));
  for (int64_t n = 0; n < o.max_new_tokens && static_cast<int64_t>(ids.size()) < T; ++n) {
    const auto len = static_cast<int64_t>(ids.size());
    for (int64_t i = 0; i < B * T; ++i) {  // row 0: the text so far; everything else padding
      const bool text = i < len;
      tok[i] = text ? ids[static_cast<size_t>(i)] : 0;
      tgt[i] = -1;
      pos[i] = static_cast<int32_t>(text ? i : i % T);
      seg[i] = text ? 1 : 0;
    }
    trainer.executor().forward_only();
    gather_row(logits, g.value(logits_id), len - 1, trainer.executor().mesh(), part, row);
    int32_t next = 0;
    if (o.strategy == "greedy") {
      for (int64_t v = 1; v < V; ++v)
        if (row[v] > row[next]) next = static_cast<int32_t>(v);
    } else {
      double mx = -INFINITY;
      for (int64_t v = 0; v < V; ++v) mx = std::max(mx, static_cast<double>(row[v]));
      for (int64_t v = 0; v < V; ++v) p[v] = std::exp((row[v] - mx) / o.temperature);
      next = static_cast<int32_t>(std::discrete_distribution<int64_t>(p.begin(), p.end())(rng));
    }
    if (next == tokenizer.eos_id()) break;
    ids.push_back(next);
  }
  std::vector<int32_t> text(ids.begin() + (tokenizer.bos_id() >= 0 ? 1 : 0), ids.end());
  return tokenizer.decode(text);
}

}  // namespace tessera::train
