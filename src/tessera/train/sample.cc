#include "tessera/train/sample.h"

#include <map>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/infer/generate.h"
#include "tessera/infer/llama_engine.h"

namespace tessera::train {

std::string sample_text(Trainer& trainer, const data::Tokenizer& tokenizer, const SampleOptions& o) {
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
  // The engine reads the plan's f32 masters (it keeps its own copy in the compute dtype).
  std::map<std::string, Tensor> params;
  const graph::Plan& plan = trainer.plan();
  const auto& values = plan.graph().values();
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i].kind == graph::ValueKind::kParam)
      params[values[i].name] = plan.view(static_cast<graph::ValueId>(i));
  auto engine = infer::make_engine(
      spec, {.max_slots = 1, .max_target_length = T, .max_prefill_length = static_cast<int64_t>(ids.size())},
      [&](const std::string& name) { return params.at(name); });
  infer::GenerateOptions g;
  g.sampling.strategy = o.strategy;
  g.sampling.temperature = o.temperature;
  g.seed = o.seed;
  g.eos_id = tokenizer.eos_id();
  g.max_new_tokens = o.max_new_tokens;
  g.sample_vocab = std::min(tokenizer.vocab_size(), spec.vocab_size);
  const std::vector<infer::Completion> done = infer::generate(*engine, {ids}, g);
  std::vector<int32_t> text(ids.begin() + (tokenizer.bos_id() >= 0 ? 1 : 0), ids.end());
  text.insert(text.end(), done[0].tokens.begin(), done[0].tokens.end());
  return tokenizer.decode(text);
}

}  // namespace tessera::train
