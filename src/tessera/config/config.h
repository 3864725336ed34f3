// The run configuration: one plain struct of typed keys, filled from YAML files and key=value
// overrides the way MaxText does it, then checked and completed with derived values.
//
//   Config cfg = load_config("configs/base.yml", {"model_name=llama2-7b", "steps=100"});
//   run(cfg.steps, cfg.emb_dim, cfg.global_batch_size_to_train_on, ...);
//
// Why a plain struct filled through member pointers (and not a map of variants, nor an X-macro):
// code reads `cfg.steps` with its C++ type, the compiler catches a misspelt key in code, and the
// struct costs nothing to copy or pass around. The field table in schema.cc is still the single
// source of every key's name, type, default, allowed values, help text and group: each entry
// holds a pointer to the member it fills, and defaults, parsing, validation, `help-config` and the
// resolved-config dump all walk that table. A member without a table entry would silently keep a
// zero value, so a test counts the aggregate's members and checks that each key member has exactly
// one table entry (tests/config/schema_test.cc). An X-macro would give the same guarantee at the
// price of code that no reader or tool can follow.
//
// Precedence (MaxText's): schema defaults < the given YAML file < configs/models/<model_name>.yml
// (looked up in the `models/` folder beside the given file, then in the source tree) < key=value
// arguments. A key set by the model file may be set again by an argument only with
// override_model_config=true. There are no environment-variable overrides.
//
// Left out: per-process settings that are not configuration (rank, host names); those come from
// the launcher. Choices are kept as strings (cfg.opt_type == "adamw"): the table checks that the
// value is one of the allowed names, and the part that acts on a choice owns its meaning.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tessera {

// One entry of logical_axis_rules: a logical tensor axis and the mesh axes it may be sharded over,
// in order of preference (MaxText's [logical_name, mesh_axis or [mesh_axes...]]).
struct AxisRule {
  std::string logical;
  std::vector<std::string> mesh_axes;
  bool operator==(const AxisRule&) const = default;
};

// The physical mesh axes, in MaxText's order (slowest-varying first). Each has an
// ici_<key>_parallelism and a dcn_<key>_parallelism key; the pipeline axis is called `stage`.
enum class MeshAxis {
  kData,
  kStage,
  kFsdp,
  kFsdpTranspose,
  kSequence,
  kContext,
  kTensor,
  kTensorTranspose,
  kExpert
};
inline constexpr int kNumMeshAxes = 9;
struct MeshAxisInfo {
  std::string_view axis;  // name used in logical_axis_rules
  std::string_view key;   // the <key> in ici_<key>_parallelism
};
inline constexpr std::array<MeshAxisInfo, kNumMeshAxes> kMeshAxes = {{
    {"data", "data"},
    {"stage", "pipeline"},
    {"fsdp", "fsdp"},
    {"fsdp_transpose", "fsdp_transpose"},
    {"sequence", "sequence"},
    {"context", "context"},
    {"tensor", "tensor"},
    {"tensor_transpose", "tensor_transpose"},
    {"expert", "expert"},
}};

// The logical axis names Tessera's models and passes use (the left side of logical_axis_rules).
inline constexpr std::array<std::string_view, 19> kLogicalAxes = {"activation_batch",
                                                                  "activation_length",
                                                                  "activation_embed",
                                                                  "activation_heads",
                                                                  "activation_kv",
                                                                  "activation_mlp",
                                                                  "activation_vocab",
                                                                  "mlp",
                                                                  "vocab",
                                                                  "embed",
                                                                  "heads",
                                                                  "q_heads",
                                                                  "kv_heads",
                                                                  "kv",
                                                                  "norm",
                                                                  "exp",
                                                                  "embed_moe",
                                                                  "mlp_moe",
                                                                  "moe_router"};

// Every member above the "derived" line is a key and has one entry in the schema table
// (schema.cc), which also gives its default and meaning; run `tessera help-config KEY`.
struct Config {
  // run
  std::string run_name;
  std::string base_output_directory;
  std::string model_name;
  bool override_model_config;
  std::string hardware;
  int64_t num_threads;
  double device_peak_tflops;

  // model
  std::string decoder_block;
  int64_t global_parameter_scale;
  int64_t base_emb_dim;
  int64_t base_num_query_heads;
  int64_t base_num_kv_heads;
  int64_t base_mlp_dim;
  int64_t base_num_decoder_layers;
  int64_t head_dim;
  int64_t vocab_size;
  std::vector<std::string> mlp_activations;
  double normalization_layer_epsilon;
  bool logits_via_embedding;
  bool normalize_embedding_logits;
  int64_t trainable_position_size;
  bool attention_bias;
  bool use_qk_norm;
  bool attention_sink;
  bool mlp_bias;
  double mlp_activations_limit;
  std::string rope_type;
  int64_t rope_max_timescale;
  double rope_factor;
  double beta_fast;
  double beta_slow;
  int64_t original_max_position_embeddings;
  bool rope_truncate;
  bool rope_attention_scaling;
  double llama3_rope_factor;
  double llama3_low_freq_factor;
  double llama3_high_freq_factor;
  int64_t llama3_original_max_position_embeddings;
  int64_t local_rope_max_timescale;
  double rope_linear_scaling_factor;
  std::string attention_type;
  int64_t sliding_window_size;
  bool use_post_attn_norm;
  bool use_post_ffw_norm;
  double attn_logits_soft_cap;
  double final_logits_soft_cap;
  double query_pre_attn_scalar;
  std::string dtype;
  std::string weight_dtype;
  bool enable_dropout;
  double dropout_rate;
  int64_t init_weights_seed;
  // mixture of experts
  int64_t num_experts;
  int64_t num_experts_per_tok;
  double ragged_buffer_factor;
  int64_t base_moe_mlp_dim;
  bool sparse_matmul;
  double capacity_factor;
  double load_balance_loss_weight;
  bool routed_bias;

  // memory
  std::string remat_policy;
  bool scan_layers;

  // training
  int64_t steps;
  double per_device_batch_size;
  int64_t max_target_length;
  int64_t gradient_accumulation_steps;
  double gradient_clipping_threshold;
  bool abort_on_nan_loss;
  bool abort_on_inf_loss;

  // optimizer
  std::string opt_type;
  double adam_b1;
  double adam_b2;
  double adam_eps;
  double adam_eps_root;
  double adam_weight_decay;

  // schedule
  double learning_rate;
  std::string lr_schedule_type;
  double warmup_steps_fraction;
  double learning_rate_final_fraction;
  int64_t learning_rate_schedule_steps;
  double wsd_decay_steps_fraction;
  std::string wsd_decay_style;

  // data
  std::string dataset_type;
  std::string dataset_path;
  std::string tokenizer_path;
  std::string tokenizer_type;
  bool packing;
  bool add_bos;
  bool add_eos;
  bool enable_data_shuffling;
  int64_t data_shuffle_seed;

  // eval
  int64_t eval_interval;
  int64_t eval_steps;
  double eval_per_device_batch_size;

  // checkpointing
  bool enable_checkpointing;
  bool async_checkpointing;
  int64_t checkpoint_period;
  int64_t max_num_checkpoints_to_keep;
  std::string load_parameters_path;
  std::string load_full_state_path;

  // logging
  int64_t log_period;
  bool enable_tensorboard;
  std::string metrics_file;

  // parallelism
  int64_t ici_data_parallelism;
  int64_t ici_pipeline_parallelism;
  int64_t ici_fsdp_parallelism;
  int64_t ici_fsdp_transpose_parallelism;
  int64_t ici_sequence_parallelism;
  int64_t ici_context_parallelism;
  int64_t ici_tensor_parallelism;
  int64_t ici_tensor_transpose_parallelism;
  int64_t ici_expert_parallelism;
  int64_t dcn_data_parallelism;
  int64_t dcn_pipeline_parallelism;
  int64_t dcn_fsdp_parallelism;
  int64_t dcn_fsdp_transpose_parallelism;
  int64_t dcn_sequence_parallelism;
  int64_t dcn_context_parallelism;
  int64_t dcn_tensor_parallelism;
  int64_t dcn_tensor_transpose_parallelism;
  int64_t dcn_expert_parallelism;
  std::vector<AxisRule> logical_axis_rules;
  bool shard_optimizer_over_data;

  // inference
  int64_t max_prefill_predict_length;
  std::string prompt;
  std::string decode_sampling_strategy;
  double decode_sampling_temperature;
  double decode_sampling_nucleus_p;
  int64_t decode_sampling_top_k;
  int64_t decode_sampling_seed;
  std::string prompts_file;

  // compile
  std::string compile_topology;
  int64_t compile_topology_num_slices;
  std::string compiled_trainstep_file;

  // data preparation and eval data (schema: add_data_extra_keys)
  std::string eval_dataset_path;
  std::string data_output_path;
  int64_t tokens_per_shard;
  int64_t max_corpus_chars;
  std::string tokenizer_model_type;
  bool tokenizer_byte_fallback;

  // server (`tessera serve`; schema: add_server_keys)
  std::string server_host;
  int64_t server_port;
  int64_t server_max_queued_requests;
  int64_t server_max_request_bytes;
  double server_timeout_seconds;

  // diagnostics (schema: add_diagnostics_keys; train/diagnostics.h)
  bool collect_stack_trace;
  double stack_trace_interval_seconds;
  bool stack_trace_to_cloud;
  double hang_watchdog_step_multiple;
  double hang_watchdog_min_seconds;
  std::string profiler;
  int64_t skip_first_n_steps_for_profiler;
  int64_t profiler_steps;
  bool enable_goodput_recording;
  bool monitor_goodput;

  // ---- derived: filled by finalize_config() from the keys above; not keys, never parsed ----
  int64_t emb_dim;                                    // base_emb_dim scaled by global_parameter_scale
  int64_t num_query_heads;                            // base_num_query_heads scaled
  int64_t num_kv_heads;                               // base_num_kv_heads scaled like the query heads
  int64_t mlp_dim;                                    // base_mlp_dim scaled
  int64_t moe_mlp_dim;                                // base_moe_mlp_dim scaled like the MLP
  int64_t num_decoder_layers;                         // base_num_decoder_layers scaled
  int64_t num_devices;                                // devices taking part in the run
  int64_t num_slices;                                 // groups of devices joined by the slow network (dcn)
  int64_t micro_batch_size_to_train_on;               // sequences per optimizer micro-step, all devices
  int64_t global_batch_size_to_train_on;              // micro batch x gradient_accumulation_steps
  int64_t global_batch_size_to_eval_on;               // eval batch over all devices
  int64_t lr_schedule_steps;                          // learning_rate_schedule_steps, or steps when -1
  std::array<int64_t, kNumMeshAxes> ici_parallelism;  // mesh sizes inside a slice, -1 filled in
  std::array<int64_t, kNumMeshAxes> dcn_parallelism;  // mesh sizes across slices, -1 filled in
};

// Number of derived members (below the line in Config); the schema test uses it.
inline constexpr int kNumDerivedConfigMembers = 14;

// The devices a run sees: dist::count_devices fills it from the launcher (mpirun, srun), and a
// planning tool may pass a topology that is not present.
struct DeviceCount {
  int64_t num_devices = 1;
  int64_t num_slices = 1;
};

// Every key at its schema default (derived members not yet filled).
Config default_config();

// Loads `config_file`, then the model preset named by model_name, then `overrides` ("key=value"
// strings as given on the command line), and finalizes the result. Throws Error(kConfig) for a
// bad key, value or file, with a message that names the key, the value, where it came from and
// what is allowed.
Config load_config(const std::filesystem::path& config_file, std::span<const std::string> overrides,
                   const DeviceCount& devices = {});

// Cross-key checks, then the derived members (model dims from global_parameter_scale, batch
// sizes, mesh sizes). load_config calls it; code that edits a Config calls it again.
void finalize_config(Config& cfg, const DeviceCount& devices = {});

// The folders searched for configs/models/<model_name>.yml, in order: `models/` beside the given
// config file, then the source tree's configs/models.
std::vector<std::filesystem::path> model_search_path(const std::filesystem::path& config_file);

// The config as YAML: every key with its value, grouped as in the schema. Loading the text as a
// config gives the same keys back; model_name reads "default" with the preset's name in a comment,
// since the preset's values are already written out and must not be applied again.
struct YamlOptions {
  std::string_view header;     // comment lines at the top (without '#'), may be empty
  bool help_comments = false;  // each key's help text above it (a starter config file)
  bool derived = true;         // derived values as trailing comments (needs a finalized Config)
};
std::string config_to_yaml(const Config& cfg, const YamlOptions& options = {});

// Writes config_to_yaml(cfg) to {base_output_directory}/{run_name}/config.yml atomically
// (temporary name, fsync, rename) and returns the path. Throws kIo on failure, kConfig when
// run_name is empty.
std::filesystem::path write_resolved_config(const Config& cfg);

}  // namespace tessera
