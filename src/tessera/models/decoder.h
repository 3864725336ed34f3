// The model families, by MaxText's `decoder_block` name. A family is one small file (llama.cc,
// gpt3.cc, ...) that sets its block options in ModelSpec from the config and builds its decoder
// from the shared blocks (blocks.h). Nothing outside models/ compares family names: the trainer,
// the converters and the decoding engine call build_decoder, and model_spec_from_config
// (model_spec.h) asks the family to configure the spec.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tessera/config/config.h"
#include "tessera/graph/graph.h"
#include "tessera/models/blocks.h"
#include "tessera/models/model_spec.h"

namespace tessera::models {

struct Family {
  std::string_view name;                 // for logs and docs: "llama", "gpt3"
  std::vector<std::string_view> blocks;  // the decoder_block values it builds
  // Sets the family's block options in `s` from `cfg`; throws kConfig naming a key it cannot honour.
  void (*configure)(ModelSpec& s, const Config& cfg);
  // Builds the forward graph of one micro-step and sets its loss.
  DecoderInputs (*build)(graph::Graph& g, const ModelSpec& s);
  bool moe = false;  // its MLPs are mixtures of experts (num_experts > 1 required)
};

// Every family this build has, in the order docs/models.md lists them.
const std::vector<const Family*>& families();
// The family building `decoder_block`; throws kConfig listing the blocks this build has.
const Family& family_for(std::string_view decoder_block);
// The decoder_block names of the MoE families, for messages: "mixtral".
std::string moe_blocks();

// The forward graph of `spec`'s family (tensor parallelism recorded for the plan's sharding pass).
DecoderInputs build_decoder(graph::Graph& g, const ModelSpec& spec);

}  // namespace tessera::models
