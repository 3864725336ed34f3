// Inference: a decoder with a KV cache, driven one step at a time. The cache has `max_slots`
// rows (sequences in flight), each up to `max_target_length` positions. A sequence lives in a
// slot: prefill() writes its prompt's keys and values and returns the logits of the last prompt
// position; each decode() appends one token to every listed slot and returns their next-token
// logits. Slots are independent, so a server can prefill a new request into a free slot between
// two decode() calls of the others (continuous batching), and release() frees a finished one.
//
// Engine is the interface the decode command, the server and the tests share; make_engine()
// builds the CPU implementation (graph_engine.cc: the model's own graph, planned for decoding) for
// every family, from a config or from parameters in memory.
// Not thread-safe: one thread drives an Engine (the server's scheduler thread).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tessera/config/config.h"
#include "tessera/core/tensor.h"
#include "tessera/models/model_spec.h"

namespace tessera::infer {

class Engine {
 public:
  virtual ~Engine() = default;

  virtual const models::ModelSpec& spec() const = 0;
  // For logs: "graph" (graph_engine.cc).
  virtual const char* name() const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual int max_slots() const = 0;
  virtual int64_t max_target_length() const = 0;   // positions per slot (prompt + generated)
  virtual int64_t max_prefill_length() const = 0;  // longest prompt prefill() accepts

  // Positions written in `slot` so far (0 for a free or released slot).
  virtual int64_t length(int slot) const = 0;

  // Clears `slot`, runs the prompt through the model from position 0 and stores its keys and
  // values; writes the logits of the last prompt position to `logits` (vocab_size() floats).
  // Throws kShape for an empty prompt, one over max_prefill_length(), or a bad slot.
  virtual void prefill(int slot, std::span<const int32_t> prompt, std::span<float> logits) = 0;

  // Appends tokens[i] at position length(slots[i]) of slots[i], for every i at once (one batched
  // forward step), and writes that position's next-token logits to
  // logits[i * vocab_size() ... (i + 1) * vocab_size()). Throws kShape for a slot that is full
  // (length == max_target_length()) or listed twice.
  virtual void decode(std::span<const int> slots, std::span<const int32_t> tokens,
                      std::span<float> logits) = 0;

  // Frees `slot` (its length becomes 0).
  virtual void release(int slot) = 0;

  // Per-op timing of the decode() steps that follow (graph/executor.h's profile: two clock reads
  // a node); turning it on clears what was timed before. profile_report() is their table, slowest
  // ops first, one per step size that ran ("" when none did).
  virtual void set_profiling(bool on) = 0;
  virtual std::string profile_report() const = 0;
};

struct EngineOptions {
  int max_slots = 1;               // sequences in flight
  int64_t max_target_length = 0;   // 0: the config's max_target_length
  int64_t max_prefill_length = 0;  // 0: the config's max_prefill_predict_length
};

// Builds the engine for cfg's model and loads its parameters from cfg.load_parameters_path (a
// Tessera checkpoint folder, verified, or a safetensors file of Tessera parameter names). Throws
// kConfig when load_parameters_path is empty or names another model, kIo when it cannot be read.
std::unique_ptr<Engine> make_engine(const Config& cfg, const EngineOptions& options);

// The parameters the engine reads, by Tessera name, with their shapes as a checkpoint stores them
// (kernels [in, out]): the training graph's list (models/decoder.h), for any family.
std::vector<std::pair<std::string, Shape>> parameter_shapes(const models::ModelSpec& spec);

// A parameter by Tessera name: an f32 tensor of its checkpoint shape, read before the next call.
using ParameterSource = std::function<Tensor(const std::string& name)>;

// The same engine with its parameters from memory (tests, benchmarks, a caller that holds them):
// `params` is asked once for each name of parameter_shapes(spec). spec.dtype is the compute
// dtype (f32 or bf16); spec.batch and spec.seq are ignored. The options' lengths must be set
// (> 0). Throws kConfig for options or a spec the engine does not build, kShape for a tensor of
// the wrong shape or dtype.
std::unique_ptr<Engine> make_engine(const models::ModelSpec& spec, const EngineOptions& options,
                                    const ParameterSource& params);

}  // namespace tessera::infer
