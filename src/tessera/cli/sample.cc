#include "tessera/cli/sample.h"

#include <cmath>
#include <map>
#include <random>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/infer/engine.h"
#include "tessera/infer/generate.h"

namespace tessera::cli {

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

// One device: the decoding engine on the plan's f32 masters (it keeps its own copy in the compute
// dtype), with a KV cache. Returns the generated ids (EOS not included).
std::vector<int32_t> sample_by_engine(train::Trainer& trainer, const data::Tokenizer& tokenizer,
                                      const SampleOptions& o, const std::vector<int32_t>& ids) {
  const models::ModelSpec& spec = trainer.spec();
  std::map<std::string, Tensor> params;
  const graph::Plan& plan = trainer.plan();
  const auto& values = plan.graph().values();
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i].kind == graph::ValueKind::kParam)
      params[values[i].name] = plan.view(static_cast<graph::ValueId>(i));
  auto engine = infer::make_engine(
      spec,
      {.max_slots = 1, .max_target_length = spec.seq, .max_prefill_length = static_cast<int64_t>(ids.size())},
      [&](const std::string& name) { return params.at(name); });
  infer::GenerateOptions g;
  g.sampling.strategy = o.strategy;
  g.sampling.temperature = o.temperature;
  g.seed = o.seed;
  g.eos_id = tokenizer.eos_id();
  g.max_new_tokens = o.max_new_tokens;
  g.sample_vocab = std::min(tokenizer.vocab_size(), spec.vocab_size);
  return infer::generate(*engine, {ids}, g)[0].tokens;
}

// Several ranks: the parameters are sharded (FSDP, TP), so every rank runs full forward passes of
// the training plan (row 0 holds the text, the other rows padding; no KV cache) and tensor ranks
// gather the logits' row; every rank draws the same token from the same seed.
std::vector<int32_t> sample_by_forward(train::Trainer& trainer, const data::Tokenizer& tokenizer,
                                       const SampleOptions& o, std::vector<int32_t> ids) {
  graph::Plan& plan = trainer.plan();
  const graph::Graph& g = plan.graph();
  const models::DecoderInputs& in = trainer.inputs();
  const int64_t B = trainer.spec().batch, T = trainer.spec().seq, V = trainer.spec().vocab_size;
  const size_t prompt = ids.size();
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
    for (int64_t i = 0; i < B * T; ++i) {
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
  return std::vector<int32_t>(ids.begin() + static_cast<std::ptrdiff_t>(prompt), ids.end());
}

}  // namespace

std::string sample_text(train::Trainer& trainer, const data::Tokenizer& tokenizer, const SampleOptions& o) {
  if (o.strategy != "greedy" && o.strategy != "weighted")
    fail(ErrorKind::kConfig,
         "decode_sampling_strategy={}: the end-of-training sample supports greedy and weighted", o.strategy);
  const models::ModelSpec& spec = trainer.spec();
  const int64_t T = spec.seq;
  std::vector<int32_t> ids;
  if (tokenizer.bos_id() >= 0) ids.push_back(tokenizer.bos_id());
  for (int32_t t : tokenizer.encode(o.prompt)) ids.push_back(t);
  TESSERA_CHECK(!ids.empty() && static_cast<int64_t>(ids.size()) < T, ErrorKind::kConfig,
                "sample: the prompt has {} tokens; it must have between 1 and max_target_length - 1 = {}",
                ids.size(), T - 1);
  std::vector<int32_t> generated = trainer.executor().mesh() && trainer.executor().mesh()->world().size() > 1
                                       ? sample_by_forward(trainer, tokenizer, o, ids)
                                       : sample_by_engine(trainer, tokenizer, o, ids);
  std::vector<int32_t> text(ids.begin() + (tokenizer.bos_id() >= 0 ? 1 : 0), ids.end());
  text.insert(text.end(), generated.begin(), generated.end());
  return tokenizer.decode(text);
}

}  // namespace tessera::cli
