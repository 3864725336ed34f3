// The field table: every config key, in display order. Names and defaults are MaxText's where the
// meaning is the same; where MaxText's default only makes sense on TPUs or Google Cloud, the
// default is a local one (base_output_directory "runs", hardware "cpu", dataset_type "synthetic").
// Value parsing and formatting are in values.cc; loading and precedence in load.cc.
#include "tessera/config/schema.h"

#include <unordered_map>

namespace tessera::config {
namespace {

Range at_least(double lo) {
  Range r;
  r.lo = lo;
  return r;
}
Range above(double lo) {
  Range r = at_least(lo);
  r.lo_open = true;
  return r;
}
Range between(double lo, double hi, bool hi_open = false) {
  Range r = at_least(lo);
  r.hi = hi;
  r.hi_open = hi_open;
  return r;
}
Range above_up_to(double lo, double hi) {
  Range r = between(lo, hi);
  r.lo_open = true;
  return r;
}
// MaxText's convention: -1 selects an automatic value, anything else must lie in `r`.
Range or_minus_one(Range r, std::string_view meaning) {
  r.special = -1;
  r.special_meaning = meaning;
  return r;
}

// Appends entries of one group to the table; one method per value type keeps each entry short.
class Group {
 public:
  Group(std::vector<FieldSpec>& table, std::string_view name) : table_(table), name_(name) {}

  void boolean(std::string_view key, bool Config::*m, std::string_view def, std::string_view help) {
    add({key, FieldType::kBool, m, def, {}, {}, {}, name_, help});
  }
  void integer(std::string_view key, int64_t Config::*m, std::string_view def, Range r,
               std::string_view help) {
    add({key, FieldType::kInt, m, def, r, {}, {}, name_, help});
  }
  void real(std::string_view key, double Config::*m, std::string_view def, Range r, std::string_view help) {
    add({key, FieldType::kFloat, m, def, r, {}, {}, name_, help});
  }
  void text(std::string_view key, std::string Config::*m, std::string_view def, std::string_view help) {
    add({key, FieldType::kString, m, def, {}, {}, {}, name_, help});
  }
  void choice(std::string_view key, std::string Config::*m, std::string_view def,
              std::vector<std::string_view> choices, std::vector<std::string_view> unsupported,
              std::string_view help) {
    add({key, FieldType::kChoice, m, def, {}, std::move(choices), std::move(unsupported), name_, help});
  }
  void strings(std::string_view key, std::vector<std::string> Config::*m, std::string_view def,
               std::vector<std::string_view> elements, std::string_view help) {
    add({key, FieldType::kStringList, m, def, {}, std::move(elements), {}, name_, help});
  }
  void rules(std::string_view key, std::vector<AxisRule> Config::*m, std::string_view def,
             std::string_view help) {
    add({key, FieldType::kAxisRules, m, def, {}, {}, {}, name_, help});
  }

 private:
  void add(FieldSpec f) { table_.push_back(std::move(f)); }
  std::vector<FieldSpec>& table_;
  std::string_view name_;
};

void add_run_keys(std::vector<FieldSpec>& t) {
  Group g(t, "run");
  g.text("run_name", &Config::run_name, R"("")",
         "Name of the run. Outputs (resolved config, checkpoints, metrics) go to "
         "{base_output_directory}/{run_name}/; a run started again under the same name resumes from "
         "its latest checkpoint. Commands that write outputs require it.");
  g.text("base_output_directory", &Config::base_output_directory, R"("runs")",
         "Folder that holds one sub-folder per run.");
  g.text("model_name", &Config::model_name, R"("default")",
         "Model preset: loads configs/models/<model_name>.yml over the config file. \"default\" loads "
         "none. Keys the preset sets can be overridden on the command line only with "
         "override_model_config=true.");
  g.boolean("override_model_config", &Config::override_model_config, "false",
            "Allow command-line key=value arguments to replace keys set by the model preset.");
  g.choice("hardware", &Config::hardware, "cpu", {"cpu", "gpu"}, {"tpu", "gpu_multiprocess"},
           "Device kind the run executes on.");
  g.integer("num_threads", &Config::num_threads, "0", between(0, 65536),
            "CPU threads for kernels and oneDNN (one OpenMP pool). 0 = one per core the process may "
            "run on.");
  g.real("device_peak_tflops", &Config::device_peak_tflops, "0.0", at_least(0),
         "Peak dense TFLOP/s of one device in the compute dtype, used for MFU. 0 = measure it at "
         "start-up with a short calibration loop (FMAs, or the bf16 dot product or AMX tiles, on every "
         "thread), and again whenever a step runs faster than it.");
}

void add_model_keys(std::vector<FieldSpec>& t) {
  Group g(t, "model");
  g.choice("decoder_block", &Config::decoder_block, "llama2",
           {"default",      "llama2",  "mistral", "mixtral",   "deepseek",
            "deepseek4",    "gemma",   "gemma2",  "gemma3",    "gemma4",
            "gemma4_small", "qwen2",   "qwen3",   "qwen3_moe", "qwen3_custom_moe",
            "qwen3_next",   "qwen3_5", "gpt3",    "gpt_oss",   "llama4",
            "olmo3",        "envy",    "simple",  "simple_mlp"},
           {}, "Decoder family (MaxText's names). The model builder says which families this build has.");
  g.integer("global_parameter_scale", &Config::global_parameter_scale, "1", at_least(1),
            "Scales the base_* dimensions; a power of 2. Each factor of 8 doubles embedding, heads, "
            "MLP and layers; factors 2 and 4 in between grow heads and MLP, then embedding "
            "(MaxText's get_individual_scales).");
  g.integer("base_emb_dim", &Config::base_emb_dim, "2048", at_least(1),
            "Model (embedding) width before global_parameter_scale.");
  g.integer("base_num_query_heads", &Config::base_num_query_heads, "16", at_least(1),
            "Attention query heads before global_parameter_scale.");
  g.integer("base_num_kv_heads", &Config::base_num_kv_heads, "16", at_least(1),
            "Key/value heads before global_parameter_scale; must divide the query heads (equal: MHA, "
            "fewer: GQA, 1: MQA).");
  g.integer("base_mlp_dim", &Config::base_mlp_dim, "7168", at_least(1),
            "MLP hidden width before global_parameter_scale.");
  g.integer("base_num_decoder_layers", &Config::base_num_decoder_layers, "16", at_least(1),
            "Decoder layers before global_parameter_scale.");
  g.integer("head_dim", &Config::head_dim, "128", at_least(1), "Width of one attention head (not scaled).");
  g.integer("vocab_size", &Config::vocab_size, "32000", at_least(1),
            "Vocabulary size of the embedding and output layers.");
  g.strings("mlp_activations", &Config::mlp_activations, R"(["silu", "linear"])",
            {"silu", "gelu", "relu", "sigmoid", "tanh", "linear"},
            "Activation of each MLP input projection; two entries make a gated MLP: [silu, linear] "
            "is SwiGLU, [gelu, linear] GeGLU.");
  g.real("normalization_layer_epsilon", &Config::normalization_layer_epsilon, "1e-05", above(0),
         "Epsilon of RMSNorm / LayerNorm.");
  g.boolean("logits_via_embedding", &Config::logits_via_embedding, "false",
            "Tie the output projection to the token embedding.");
  g.boolean("normalize_embedding_logits", &Config::normalize_embedding_logits, "false",
            "With logits_via_embedding: divide the logits by sqrt(emb_dim). MaxText's default is true; "
            "Tessera's is false, as the checkpoints of every family here (GPT-2, Gemma, Qwen) compute them.");
  g.integer("trainable_position_size", &Config::trainable_position_size, "-1", at_least(-1),
            "Learned absolute position embeddings for this many positions (GPT-2/3); -1: none. Families "
            "that use RoPE refuse it.");
  g.boolean("attention_bias", &Config::attention_bias, "false",
            "Biases on the query, key and value projections (qwen2 and gpt3 always have them; gpt3 also on "
            "the output projection).");
  g.boolean("use_qk_norm", &Config::use_qk_norm, "false",
            "RMSNorm over each head of the queries and keys before RoPE (qwen3 always has it).");
  g.boolean("attention_sink", &Config::attention_sink, "false",
            "One learned logit per query head in every attention softmax, with a zero value (gpt_oss "
            "always has them).");
  g.boolean("mlp_bias", &Config::mlp_bias, "false",
            "Biases on the MLP's (and the experts') projections (gpt3 and gpt_oss always have them).");
  g.real("mlp_activations_limit", &Config::mlp_activations_limit, "-1.0", or_minus_one(above(0), "no clamp"),
         "gpt_oss: the gate is clamped to at most this and the up projection to +-this (GPT-OSS: 7.0).");
  g.choice("rope_type", &Config::rope_type, "default", {"default", "llama3.1", "yarn"}, {},
           "Rotary embedding variant: plain RoPE, Llama 3.1 frequency scaling, or YaRN.");
  g.integer("rope_max_timescale", &Config::rope_max_timescale, "10000", at_least(1),
            "RoPE base wavelength (theta).");
  g.real("rope_factor", &Config::rope_factor, "40.0", at_least(1),
         "rope_type=yarn: the context extension factor (the low frequencies are divided by it).");
  g.real("beta_fast", &Config::beta_fast, "32.0", above(0),
         "rope_type=yarn: rotations over the original context above which a frequency is kept as is.");
  g.real("beta_slow", &Config::beta_slow, "1.0", above(0),
         "rope_type=yarn: rotations below which a frequency is fully interpolated (divided by rope_factor).");
  g.integer("original_max_position_embeddings", &Config::original_max_position_embeddings, "4096",
            at_least(1), "rope_type=yarn: the context length the model was pre-trained with.");
  g.boolean("rope_truncate", &Config::rope_truncate, "true",
            "rope_type=yarn: round the ramp's ends to whole dimensions (GPT-OSS: false).");
  g.boolean("rope_attention_scaling", &Config::rope_attention_scaling, "false",
            "rope_type=yarn: scale cos and sin by 0.1 ln(rope_factor) + 1 (GPT-OSS: true).");
  g.real("llama3_rope_factor", &Config::llama3_rope_factor, "8.0", above(0),
         "rope_type=llama3.1: the low frequencies are divided by this (Llama 3.1: 8, Llama 3.2: 32), as "
         "the checkpoint's rope_scaling.factor says.");
  g.real("llama3_low_freq_factor", &Config::llama3_low_freq_factor, "1.0", above(0),
         "rope_type=llama3.1: wavelengths above original context / this are fully scaled (rope_scaling's "
         "low_freq_factor).");
  g.real("llama3_high_freq_factor", &Config::llama3_high_freq_factor, "4.0", above(0),
         "rope_type=llama3.1: wavelengths below original context / this are kept (rope_scaling's "
         "high_freq_factor); must exceed llama3_low_freq_factor.");
  g.integer("llama3_original_max_position_embeddings", &Config::llama3_original_max_position_embeddings,
            "8192", at_least(1),
            "rope_type=llama3.1: the context the model was pre-trained with (rope_scaling's "
            "original_max_position_embeddings).");
  g.integer("local_rope_max_timescale", &Config::local_rope_max_timescale, "-1",
            or_minus_one(at_least(2), "the layers share rope_max_timescale"),
            "gemma3: RoPE theta of the local (sliding-window) layers; the global layers use "
            "rope_max_timescale with rope_linear_scaling_factor. -1: one theta for every layer.");
  g.real("rope_linear_scaling_factor", &Config::rope_linear_scaling_factor, "1.0", above(0),
         "Linear RoPE scaling: positions are divided by this (gemma3's global layers: 8). 1: none.");
  g.choice("attention_type", &Config::attention_type, "global",
           {"global", "local_sliding", "chunk", "mla", "full", "compressed", "block_diffusion"}, {},
           "Attention variant (MaxText's names): global causal, local_sliding uses "
           "sliding_window_size.");
  g.integer("sliding_window_size", &Config::sliding_window_size, "0", at_least(0),
            "Window of local_sliding attention in tokens; 0 = none.");
  g.boolean("use_post_attn_norm", &Config::use_post_attn_norm, "false",
            "Normalise the attention's output before the residual add (gemma2, gemma3 always do).");
  g.boolean("use_post_ffw_norm", &Config::use_post_ffw_norm, "false",
            "Normalise the MLP's output before the residual add (gemma2, gemma3 always do).");
  g.real("attn_logits_soft_cap", &Config::attn_logits_soft_cap, "0.0", at_least(0),
         "Attention logits s become c tanh(s / c) before the softmax (gemma2: 50). 0: off.");
  g.real("final_logits_soft_cap", &Config::final_logits_soft_cap, "0.0", at_least(0),
         "Output logits z become c tanh(z / c) before the loss and sampling (gemma2: 30). 0: off.");
  g.real("query_pre_attn_scalar", &Config::query_pre_attn_scalar, "0.0", at_least(0),
         "Attention scores are q.k / sqrt(query_pre_attn_scalar), as Gemma's checkpoints say (gemma2-27b: "
         "144); 0: head_dim.");
  g.choice("dtype", &Config::dtype, "bfloat16", {"float32", "bfloat16"}, {"float16"},
           "Activation and compute dtype.");
  g.choice("weight_dtype", &Config::weight_dtype, "float32", {"float32"}, {"bfloat16", "float16"},
           "Dtype of the master parameters and optimizer state.");
  g.boolean("enable_dropout", &Config::enable_dropout, "true",
            "Apply dropout at dropout_rate during training (only a rate of 0 is supported).");
  g.real("dropout_rate", &Config::dropout_rate, "0.0", between(0, 1, true),
         "Dropout probability. Tessera supports only 0.");
  g.integer("init_weights_seed", &Config::init_weights_seed, "0", at_least(0),
            "Seed of the parameter initialisation.");
  Group moe(t, "mixture of experts");
  moe.integer("num_experts", &Config::num_experts, "1", at_least(1),
              "Experts per MoE layer (1: a dense MLP); MoE families (mixtral) need more than one.");
  moe.integer("num_experts_per_tok", &Config::num_experts_per_tok, "1", at_least(1),
              "Experts each token is routed to (top-k).");
  moe.integer("base_moe_mlp_dim", &Config::base_moe_mlp_dim, "7168", at_least(1),
              "Hidden width of each expert's MLP before global_parameter_scale.");
  moe.boolean("sparse_matmul", &Config::sparse_matmul, "true",
              "Dropless MoE: tokens sorted by expert and one grouped matmul over the ragged groups; false "
              "runs every expert on every token (dense), or drops tokens over capacity_factor.");
  moe.real(
      "ragged_buffer_factor", &Config::ragged_buffer_factor, "-1.0", or_minus_one(above(0), "the worst case"),
      "Expert parallelism: each expert rank's receive buffer holds ragged_buffer_factor x its balanced "
      "share of the dispatched rows (tokens x num_experts_per_tok); -1 sizes it for the worst case. A step "
      "that routes more rows to a rank fails, naming the step and layer (no row is dropped).");
  moe.real("capacity_factor", &Config::capacity_factor, "-1.0", or_minus_one(above(0), "no capacity limit"),
           "With sparse_matmul=false: each expert takes at most capacity_factor x its balanced share of a "
           "sequence's tokens; later tokens are dropped (they pass through the residual).");
  moe.real("load_balance_loss_weight", &Config::load_balance_loss_weight, "0.0", at_least(0),
           "Weight of the load-balance loss (MaxText's, per sequence, averaged over MoE layers), added to "
           "the loss and logged as moe_lb_loss.");
  moe.boolean("routed_bias", &Config::routed_bias, "false",
              "A learned bias on the router's logits (gpt_oss always has it).");
}

void add_memory_and_training_keys(std::vector<FieldSpec>& t) {
  Group m(t, "memory");
  m.choice("remat_policy", &Config::remat_policy, "full",
           {"full", "minimal", "minimal_with_context", "save_dot_with_context_except_mlp",
            "save_dot_except_mlpwi", "save_dot_except_mlp", "save_qkv_proj", "save_out_proj",
            "qkv_proj_offloaded", "minimal_offloaded", "none"},
           {"custom"},
           "Which activations the backward pass recomputes (MaxText's names): full recomputes each "
           "layer from its input, none keeps everything, the others keep the named projections.");
  m.boolean("scan_layers", &Config::scan_layers, "false",
            "Stacked layer parameters (one tensor per weight kind over all layers), as MaxText's "
            "scanned checkpoints; false keeps one set per layer, which is what Tessera builds: true is "
            "refused by `tessera train` until stacked layers exist (MaxText's default is true).");

  Group g(t, "training");
  g.integer("steps", &Config::steps, "150001", at_least(1), "Optimizer steps to train for.");
  g.real("per_device_batch_size", &Config::per_device_batch_size, "12.0", above(0),
         "Sequences per device per micro-step; may be fractional when per_device_batch_size x "
         "devices is a whole number.");
  g.integer("max_target_length", &Config::max_target_length, "2048", at_least(1),
            "Sequence length in tokens.");
  g.integer("gradient_accumulation_steps", &Config::gradient_accumulation_steps, "1", at_least(1),
            "Micro-steps whose gradients are summed before one optimizer step.");
  g.real("gradient_clipping_threshold", &Config::gradient_clipping_threshold, "1.0", at_least(0),
         "Clip gradients to this global L2 norm; 0 disables clipping.");
  g.boolean("abort_on_nan_loss", &Config::abort_on_nan_loss, "true", "Stop the run when the loss is NaN.");
  g.boolean("abort_on_inf_loss", &Config::abort_on_inf_loss, "true",
            "Stop the run when the loss is infinite.");
}

void add_optimizer_keys(std::vector<FieldSpec>& t) {
  Group g(t, "optimizer");
  g.choice("opt_type", &Config::opt_type, "adamw", {"adamw", "sgd"}, {"adam_pax", "muon"},
           "Optimizer: AdamW (decoupled weight decay) or plain SGD.");
  g.real("adam_b1", &Config::adam_b1, "0.9", between(0, 1, true), "Decay rate of Adam's first moment.");
  g.real("adam_b2", &Config::adam_b2, "0.95", between(0, 1, true), "Decay rate of Adam's second moment.");
  g.real("adam_eps", &Config::adam_eps, "1e-08", at_least(0),
         "Added to the denominator outside the square root.");
  g.real("adam_eps_root", &Config::adam_eps_root, "0.0", at_least(0),
         "Added to the second moment inside the square root.");
  g.real("adam_weight_decay", &Config::adam_weight_decay, "0.1", at_least(0),
         "AdamW decoupled weight decay, multiplied by the learning rate.");

  Group s(t, "schedule");
  s.real("learning_rate", &Config::learning_rate, "3e-05", at_least(0), "Peak learning rate.");
  s.choice("lr_schedule_type", &Config::lr_schedule_type, "cosine", {"cosine", "wsd"}, {},
           "Linear warmup, then cosine decay to learning_rate x learning_rate_final_fraction; or "
           "warmup-stable-decay (wsd).");
  s.real("warmup_steps_fraction", &Config::warmup_steps_fraction, "0.1", between(0, 1),
         "Fraction of the schedule spent warming up linearly from 0.");
  s.real("learning_rate_final_fraction", &Config::learning_rate_final_fraction, "0.1", between(0, 1),
         "Final learning rate as a fraction of learning_rate.");
  s.integer("learning_rate_schedule_steps", &Config::learning_rate_schedule_steps, "-1",
            or_minus_one(at_least(1), "= steps"),
            "Length of the schedule; steps beyond it train at learning rate 0.");
  s.real("wsd_decay_steps_fraction", &Config::wsd_decay_steps_fraction, "0.1", between(0, 1),
         "wsd: fraction of the schedule spent decaying at the end.");
  s.choice("wsd_decay_style", &Config::wsd_decay_style, "linear", {"linear", "cosine"}, {},
           "wsd: shape of the final decay.");
}

void add_data_keys(std::vector<FieldSpec>& t) {
  Group g(t, "data");
  g.choice("dataset_type", &Config::dataset_type, "synthetic", {"synthetic", "tokens", "text"},
           {"tfds", "hf", "grain", "c4_mlperf", "olmo_grain"},
           "Input: synthetic random tokens, pre-tokenized token shards (prepare-data output), or "
           "text/JSONL tokenized on the fly.");
  g.text("dataset_path", &Config::dataset_path, R"("")",
         "File, folder or glob of the training data (tokens and text datasets).");
  g.text("tokenizer_path", &Config::tokenizer_path, R"("")", "Tokenizer model file.");
  g.choice("tokenizer_type", &Config::tokenizer_type, "sentencepiece",
           {"sentencepiece", "huggingface", "tiktoken"}, {},
           "Tokenizer format: SentencePiece model, Hugging Face tokenizer.json (byte-level BPE), or "
           "tiktoken ranks.");
  g.boolean("packing", &Config::packing, "true",
            "Pack several documents into one sequence, with segment ids that keep attention within "
            "each document.");
  g.boolean("add_bos", &Config::add_bos, "true", "Prepend the BOS token to each document.");
  g.boolean("add_eos", &Config::add_eos, "true", "Append the EOS token to each document.");
  g.boolean("enable_data_shuffling", &Config::enable_data_shuffling, "true", "Shuffle the training data.");
  g.integer("data_shuffle_seed", &Config::data_shuffle_seed, "0", at_least(0), "Seed of the data order.");

  Group e(t, "eval");
  e.integer("eval_interval", &Config::eval_interval, "-1", or_minus_one(at_least(1), "no eval"),
            "Run an evaluation every this many steps.");
  e.integer("eval_steps", &Config::eval_steps, "-1", or_minus_one(at_least(1), "the whole eval set"),
            "Batches per evaluation.");
  e.real("eval_per_device_batch_size", &Config::eval_per_device_batch_size, "0.0", at_least(0),
         "Eval sequences per device; 0 = per_device_batch_size.");
}

void add_checkpoint_and_logging_keys(std::vector<FieldSpec>& t) {
  Group g(t, "checkpointing");
  g.boolean("enable_checkpointing", &Config::enable_checkpointing, "true",
            "Save checkpoints to {base_output_directory}/{run_name}/checkpoints/<step>/ every "
            "checkpoint_period steps, after the last step and on SIGTERM/SIGINT, and resume from the "
            "newest intact one when the run is started again (docs/checkpoints.md).");
  g.boolean("async_checkpointing", &Config::async_checkpointing, "true",
            "Write checkpoints on a background thread: the step loop only copies parameters and "
            "optimizer state into a host buffer allocated once (their size) and continues.");
  g.integer("checkpoint_period", &Config::checkpoint_period, "10000", at_least(1),
            "Save a checkpoint every this many steps (and always after the last step).");
  g.integer("max_num_checkpoints_to_keep", &Config::max_num_checkpoints_to_keep, "-1",
            or_minus_one(at_least(1), "keep all"),
            "Keep at most this many checkpoints; the oldest are deleted after each save.");
  g.text("load_parameters_path", &Config::load_parameters_path, R"("")",
         "Start from the parameters of this checkpoint folder (.../checkpoints/<step>) or safetensors "
         "file, with fresh optimizer state at step 0, unless run_name has a checkpoint of its own. Not "
         "with load_full_state_path.");
  g.text("load_full_state_path", &Config::load_full_state_path, R"("")",
         "Start from this checkpoint folder's parameters, optimizer state and step, unless run_name "
         "has a checkpoint of its own. Not with load_parameters_path.");

  Group l(t, "logging");
  l.integer("log_period", &Config::log_period, "100", at_least(1),
            "Print a log line and flush metrics (TensorBoard, metrics_file) every this many steps.");
  l.boolean("enable_tensorboard", &Config::enable_tensorboard, "true",
            "Write TensorBoard event files (learning/loss, perf/step_time_seconds, ... every step) to "
            "{base_output_directory}/{run_name}/tensorboard/.");
  l.text("metrics_file", &Config::metrics_file, R"("")",
         "Also write per-step metrics as JSON lines to this file (keys as the TensorBoard tags, "
         "numbers to 17 digits); empty = none.");
}

void add_parallelism_keys(std::vector<FieldSpec>& t) {
  // Each ici/dcn key is spelt out so that the table stays greppable, one line per key.
  Group g(t, "parallelism");
  const Range r = or_minus_one(at_least(1), "fill: the devices the other axes leave");
  g.integer("ici_data_parallelism", &Config::ici_data_parallelism, "1", r,
            "Data parallelism within a slice.");
  g.integer("ici_pipeline_parallelism", &Config::ici_pipeline_parallelism, "1", r,
            "Pipeline stages within a slice (mesh axis `stage`).");
  g.integer("ici_fsdp_parallelism", &Config::ici_fsdp_parallelism, "-1", r,
            "Fully sharded data parallelism within a slice (parameters sharded on `embed`).");
  g.integer("ici_fsdp_transpose_parallelism", &Config::ici_fsdp_transpose_parallelism, "1", r,
            "FSDP over the `mlp` dimension within a slice.");
  g.integer("ici_sequence_parallelism", &Config::ici_sequence_parallelism, "1", r,
            "Sequence parallelism within a slice.");
  g.integer("ici_context_parallelism", &Config::ici_context_parallelism, "1", r,
            "Context parallelism within a slice (attention over a sharded sequence).");
  g.integer("ici_tensor_parallelism", &Config::ici_tensor_parallelism, "1", r,
            "Tensor parallelism within a slice (heads, mlp, vocab).");
  g.integer("ici_tensor_transpose_parallelism", &Config::ici_tensor_transpose_parallelism, "1", r,
            "Tensor parallelism over the `embed` dimension within a slice.");
  g.integer("ici_expert_parallelism", &Config::ici_expert_parallelism, "1", r,
            "Expert parallelism within a slice.");
  g.integer("dcn_data_parallelism", &Config::dcn_data_parallelism, "-1", r,
            "Data parallelism across slices.");
  g.integer("dcn_pipeline_parallelism", &Config::dcn_pipeline_parallelism, "1", r,
            "Pipeline stages across slices.");
  g.integer("dcn_fsdp_parallelism", &Config::dcn_fsdp_parallelism, "1", r, "FSDP across slices.");
  g.integer("dcn_fsdp_transpose_parallelism", &Config::dcn_fsdp_transpose_parallelism, "1", r,
            "FSDP over `mlp` across slices.");
  g.integer("dcn_sequence_parallelism", &Config::dcn_sequence_parallelism, "1", r,
            "Sequence parallelism across slices.");
  g.integer("dcn_context_parallelism", &Config::dcn_context_parallelism, "1", r,
            "Context parallelism across slices.");
  g.integer("dcn_tensor_parallelism", &Config::dcn_tensor_parallelism, "1", r,
            "Tensor parallelism across slices.");
  g.integer("dcn_tensor_transpose_parallelism", &Config::dcn_tensor_transpose_parallelism, "1", r,
            "Tensor parallelism over `embed` across slices.");
  g.integer("dcn_expert_parallelism", &Config::dcn_expert_parallelism, "1", r,
            "Expert parallelism across slices.");
  // MaxText's default rules, restricted to the mesh axes and logical axes Tessera has.
  g.rules("logical_axis_rules", &Config::logical_axis_rules,
          R"([[activation_batch, [data, fsdp, fsdp_transpose, expert]],
              [activation_heads, [tensor, tensor_transpose, sequence]],
              [activation_length, [sequence, context]],
              [activation_length, [context]],
              [activation_embed, [tensor, tensor_transpose]],
              [activation_mlp, [tensor, tensor_transpose]],
              [activation_kv, [tensor, tensor_transpose]],
              [activation_vocab, [tensor, tensor_transpose, sequence]],
              [activation_vocab, [tensor, tensor_transpose]],
              [activation_vocab, [sequence, context]],
              [mlp, [fsdp_transpose, tensor]],
              [vocab, [tensor, tensor_transpose]],
              [heads, [tensor, tensor_transpose]],
              [q_heads, [tensor, tensor_transpose]],
              [kv_heads, [tensor, tensor_transpose]],
              [embed, [fsdp, fsdp_transpose, sequence, tensor_transpose, context, expert]],
              [embed, [fsdp, sequence, tensor_transpose, context, expert]],
              [embed, [fsdp, fsdp_transpose, sequence, context, expert]],
              [embed, [fsdp, sequence, context, expert]],
              [embed_moe, [fsdp, fsdp_transpose, sequence, context]],
              [embed_moe, [fsdp, sequence, context]],
              [norm, [tensor, tensor_transpose]],
              [kv, []],
              [exp, [expert]]])",
          "Maps each logical tensor axis to the mesh axes it is sharded over: a list of "
          "[logical_axis, mesh_axis] or [logical_axis, [mesh_axis, ...]]. For each tensor dimension the "
          "first rule whose mesh axes are unused and divide the dimension wins.");
  g.boolean("shard_optimizer_over_data", &Config::shard_optimizer_over_data, "false",
            "ZeRO-1: shard the optimizer state over the data axis as well.");
}

void add_inference_and_compile_keys(std::vector<FieldSpec>& t) {
  Group g(t, "inference");
  g.integer("max_prefill_predict_length", &Config::max_prefill_predict_length, "64", at_least(1),
            "Longest prompt (prefill) in tokens; generation continues up to max_target_length.");
  g.text("prompt", &Config::prompt, R"("I love to")", "Prompt that `tessera decode` completes.");
  g.choice("decode_sampling_strategy", &Config::decode_sampling_strategy, "greedy",
           {"greedy", "weighted", "nucleus", "topk", "composite"}, {},
           "Sampling: greedy argmax; weighted by temperature; nucleus (top-p); top-k; or composite "
           "(top-k, then top-p, then temperature).");
  g.real("decode_sampling_temperature", &Config::decode_sampling_temperature, "1.0", above(0),
         "Softmax temperature of the weighted, nucleus, topk and composite strategies.");
  g.real("decode_sampling_nucleus_p", &Config::decode_sampling_nucleus_p, "-1.0",
         or_minus_one(above_up_to(0, 1), "unset"), "Probability mass kept by nucleus sampling.");
  g.integer("decode_sampling_top_k", &Config::decode_sampling_top_k, "0", at_least(0),
            "Tokens kept by top-k sampling; 0 = unset.");
  g.integer("decode_sampling_seed", &Config::decode_sampling_seed, "0", at_least(0),
            "Seed of the sampling draws of `tessera decode` (Tessera's key; MaxText's decode uses a "
            "fixed one): prompt i draws from the stream seeded with decode_sampling_seed + i, so "
            "outputs do not depend on batching.");
  g.text("prompts_file", &Config::prompts_file, R"("")",
         "A text file of prompts for `tessera decode`, one per line (empty lines skipped), used "
         "instead of `prompt`; they share per_device_batch_size slots, a finished sequence's slot "
         "taking the next prompt (Tessera's key).");

  Group c(t, "compile");
  c.text("compile_topology", &Config::compile_topology, R"("")",
         "Target of `tessera compile`, which plans a run without the hardware: a GPU node (h100-80gb), "
         "N GPUs (h100-80gb-4), a TPU slice (v5e-256) or this machine's cores (cpu-4, cpu-1x2); "
         "configs/targets.yml lists them.");
  c.integer("compile_topology_num_slices", &Config::compile_topology_num_slices, "-1",
            or_minus_one(at_least(1), "one slice"),
            "Slices (TPU slices, GPU nodes) of compile_topology, joined by the dcn_* axes.");
  c.text("compiled_trainstep_file", &Config::compiled_trainstep_file, R"("")",
         "`tessera compile` writes the plan (JSON) here; `tessera train` with the same key checks its "
         "model, shapes, mesh and schedule against the run and names the first difference.");
}

void add_data_extra_keys(std::vector<FieldSpec>& t) {
  Group g(t, "data preparation");
  g.text("eval_dataset_path", &Config::eval_dataset_path, R"("")",
         "File, folder or glob of the evaluation data, read like dataset_path (same dataset_type and "
         "tokenizer) in order, once per evaluation; empty = no eval data.");
  g.text("data_output_path", &Config::data_output_path, R"("")",
         "Folder where `tessera prepare-data` writes the token shards of dataset_path (then train with "
         "dataset_type=tokens dataset_path=<this folder>).");
  g.integer("tokens_per_shard", &Config::tokens_per_shard, "134217728", at_least(1),
            "prepare-data: tokens per shard file; a shard closes at the first document boundary past it.");
  g.integer("max_corpus_chars", &Config::max_corpus_chars, "10000000", at_least(1),
            "train-tokenizer: characters of dataset_path read to train the tokenizer (MaxText's "
            "train_tokenizer flag).");
  g.choice("tokenizer_model_type", &Config::tokenizer_model_type, "unigram", {"unigram", "bpe"}, {},
           "train-tokenizer: SentencePiece model type (MaxText's trainer uses unigram).");
  g.boolean("tokenizer_byte_fallback", &Config::tokenizer_byte_fallback, "true",
            "train-tokenizer: characters outside the vocabulary become byte tokens instead of <unk>, so "
            "decoding gives the text back exactly.");
}

void add_server_keys(std::vector<FieldSpec>& t) {
  Group g(t, "server");
  g.text("server_host", &Config::server_host, R"("127.0.0.1")",
         "`tessera serve` listens on this address (\"0.0.0.0\" or \"::\" for every interface). The "
         "server has no authentication and no TLS: expose it only to a network you trust. Concurrent "
         "requests (KV-cache slots) = per_device_batch_size; prompts up to max_prefill_predict_length "
         "tokens, prompt + completion up to max_target_length.");
  g.integer("server_port", &Config::server_port, "8000", between(0, 65535),
            "`tessera serve` TCP port; 0 = a free port chosen by the system (printed at start-up).");
  g.integer("server_max_queued_requests", &Config::server_max_queued_requests, "64", at_least(0),
            "Requests that may wait for a free slot; beyond that the server answers 503.");
  g.integer("server_max_request_bytes", &Config::server_max_request_bytes, "1048576", at_least(1024),
            "Largest request body the server reads; larger ones get 413.");
  g.real("server_timeout_seconds", &Config::server_timeout_seconds, "30.0", above(0),
         "Time a client has to send a whole request, and to accept the bytes of a response; also how "
         "long an idle keep-alive connection stays open.");
}

// MaxText's diagnostics keys (its collect_stack_trace family, profiler, goodput) and the hang
// watchdog's two, with Tessera's meanings (docs/diagnostics.md).
void add_diagnostics_keys(std::vector<FieldSpec>& t) {
  Group g(t, "diagnostics");
  g.boolean("collect_stack_trace", &Config::collect_stack_trace, "false",
            "Dump every thread's native stack (with rank, host, step and graph node) every "
            "stack_trace_interval_seconds and on SIGSEGV, SIGBUS, SIGFPE, SIGILL and SIGABRT.");
  g.real("stack_trace_interval_seconds", &Config::stack_trace_interval_seconds, "600", above(0),
         "Seconds between the periodic stack dumps of collect_stack_trace.");
  g.boolean("stack_trace_to_cloud", &Config::stack_trace_to_cloud, "false",
            "false: stack dumps go to the console (stderr); true: to "
            "{base_output_directory}/{run_name}/diagnostics/stack_traces.rank<R>.txt, one file per rank.");
  g.real("hang_watchdog_step_multiple", &Config::hang_watchdog_step_multiple, "10", at_least(0),
         "A step taking longer than this multiple of the median step so far (and than "
         "hang_watchdog_min_seconds) is a hang: every rank dumps its stacks and the collective it waits "
         "in, and the job exits non-zero naming the slow rank. 0 = no watchdog.");
  g.real("hang_watchdog_min_seconds", &Config::hang_watchdog_min_seconds, "300", above(0),
         "The hang watchdog's floor: no step shorter than this is a hang. The first step, which has no "
         "median yet, may take hang_watchdog_step_multiple times this.");
  g.choice(
      "profiler", &Config::profiler, R"("")", {"", "trace"}, {"xplane", "nsys"},
      "\"trace\": a Chrome trace-event JSON per rank (Perfetto, chrome://tracing) under "
      "{base_output_directory}/{run_name}/profile/; \"\" = none. MaxText's xplane and nsys are refused.");
  g.integer("skip_first_n_steps_for_profiler", &Config::skip_first_n_steps_for_profiler, "1", at_least(0),
            "The first profiled step is the run's first step plus this many.");
  g.integer("profiler_steps", &Config::profiler_steps, "5", at_least(1),
            "Steps the profiler records (up to the last step of the run).");
  g.boolean("enable_goodput_recording", &Config::enable_goodput_recording, "false",
            "Account the job's wall time: productive steps against start-up, data waiting, checkpoint "
            "save and restore, and steps lost (recomputed) after a resume; a goodput line in the log every "
            "log_period steps and at the end, carried across restarts in {run_name}/goodput.json.");
  g.boolean("monitor_goodput", &Config::monitor_goodput, "false",
            "Also write the goodput figures as TensorBoard scalars (goodput/...) every log_period steps; "
            "needs enable_goodput_recording.");
}

std::vector<FieldSpec> build_schema() {
  std::vector<FieldSpec> t;
  add_run_keys(t);
  add_model_keys(t);
  add_memory_and_training_keys(t);
  add_optimizer_keys(t);
  add_data_keys(t);
  add_checkpoint_and_logging_keys(t);
  add_parallelism_keys(t);
  add_inference_and_compile_keys(t);
  add_data_extra_keys(t);
  add_server_keys(t);
  add_diagnostics_keys(t);
  return t;
}

}  // namespace

const std::vector<FieldSpec>& schema() {
  static const std::vector<FieldSpec> table = build_schema();
  return table;
}

const FieldSpec* find_field(std::string_view name) {
  static const std::unordered_map<std::string_view, const FieldSpec*> index = [] {
    std::unordered_map<std::string_view, const FieldSpec*> m;
    for (const FieldSpec& f : schema()) m.emplace(f.name, &f);
    return m;
  }();
  auto it = index.find(name);
  return it == index.end() ? nullptr : it->second;
}

}  // namespace tessera::config
