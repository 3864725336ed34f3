// finalize_config: the checks that involve more than one key (or a value that is known but not
// supported), then every derived value, computed here and nowhere else:
//   - model dims from global_parameter_scale (MaxText's get_individual_scales);
//   - batch sizes from per_device_batch_size, the device count and gradient accumulation;
//   - mesh sizes from ici_*/dcn_*_parallelism, one -1 per family filled with what the others leave.
// Single-key type and range checks happen earlier, while parsing (values.cc).
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>

#include "tessera/config/config.h"
#include "tessera/config/schema.h"
#include "tessera/core/error.h"

namespace tessera {
namespace {

using config::FieldSpec;
using config::FieldType;

template <typename... Args>
[[noreturn]] void config_error(fmt::format_string<Args...> f, Args&&... args) {
  fail(ErrorKind::kConfig, f, std::forward<Args>(args)...);
}

// Values every part of MaxText accepts but Tessera does not (yet). Checked on the final value, so
// that a file may name one and the command line replace it.
void check_supported(const Config& cfg) {
  for (const FieldSpec& f : config::schema()) {
    if (f.type != FieldType::kChoice) continue;
    const std::string& v = cfg.*std::get<std::string Config::*>(f.member);
    if (std::find(f.unsupported.begin(), f.unsupported.end(), v) != f.unsupported.end())
      config_error("config key '{}': '{}' is not supported in this build of Tessera (supported: {})", f.name,
                   v, fmt::join(f.choices, ", "));
  }
  if (cfg.dropout_rate > 0)
    config_error(
        "config key 'dropout_rate': {} is not supported: Tessera has no dropout yet, only 0 is allowed",
        cfg.dropout_rate);
  if (cfg.run_name == "." || cfg.run_name == ".." || cfg.run_name.find('/') != std::string::npos)
    config_error("config key 'run_name': '{}' is not a plain folder name", cfg.run_name);
}

int64_t scaled(int64_t base, int exponent, std::string_view key) {
  int64_t out;
  if (__builtin_mul_overflow(base, int64_t{1} << exponent, &out))
    config_error("config key '{}': {} scaled by 2^{} overflows", key, base, exponent);
  return out;
}

// MaxText's get_individual_scales: log2(scale) = 3*base + rem; heads and MLP grow first, then the
// embedding, then layers, so each factor of 8 doubles all four.
void derive_model_dims(Config& cfg) {
  const int64_t s = cfg.global_parameter_scale;
  if (s < 1 || (s & (s - 1)) != 0)
    config_error("config key 'global_parameter_scale': {} is not a power of 2 (1, 2, 4, 8, ...)", s);
  const int log2_scale = std::countr_zero(static_cast<uint64_t>(s));
  const int base = log2_scale / 3, rem = log2_scale % 3;
  const int head_scale = base + (rem > 0 ? 1 : 0);
  const int mlp_scale = head_scale;
  const int emb_scale = base + (rem > 1 ? 1 : 0);
  const int layer_scale = base;
  cfg.emb_dim = scaled(cfg.base_emb_dim, emb_scale, "base_emb_dim");
  cfg.num_query_heads = scaled(cfg.base_num_query_heads, head_scale, "base_num_query_heads");
  cfg.num_kv_heads = scaled(cfg.base_num_kv_heads, head_scale, "base_num_kv_heads");
  cfg.mlp_dim = scaled(cfg.base_mlp_dim, mlp_scale, "base_mlp_dim");
  cfg.moe_mlp_dim = scaled(cfg.base_moe_mlp_dim, mlp_scale, "base_moe_mlp_dim");
  cfg.num_decoder_layers = scaled(cfg.base_num_decoder_layers, layer_scale, "base_num_decoder_layers");
}

void check_cross_keys(const Config& cfg) {
  if (cfg.num_query_heads % cfg.num_kv_heads != 0)
    config_error(
        "num_query_heads {} is not a multiple of num_kv_heads {} (base_num_query_heads {} and "
        "base_num_kv_heads {} at global_parameter_scale {})",
        cfg.num_query_heads, cfg.num_kv_heads, cfg.base_num_query_heads, cfg.base_num_kv_heads,
        cfg.global_parameter_scale);
  if (cfg.mlp_activations.empty()) config_error("config key 'mlp_activations': the list is empty");
  if (!cfg.load_parameters_path.empty() && !cfg.load_full_state_path.empty())
    config_error("load_parameters_path ('{}') and load_full_state_path ('{}') are both set; set at most one",
                 cfg.load_parameters_path, cfg.load_full_state_path);
  if (cfg.lr_schedule_type == "wsd" && cfg.warmup_steps_fraction + cfg.wsd_decay_steps_fraction > 1)
    config_error(
        "warmup_steps_fraction {} + wsd_decay_steps_fraction {} exceeds 1: the wsd schedule has no room",
        cfg.warmup_steps_fraction, cfg.wsd_decay_steps_fraction);
  if (cfg.attention_type == "local_sliding" && cfg.sliding_window_size <= 0)
    config_error("attention_type 'local_sliding' needs sliding_window_size > 0 (it is {})",
                 cfg.sliding_window_size);
  if ((cfg.dataset_type == "tokens" || cfg.dataset_type == "text") && cfg.dataset_path.empty())
    config_error("dataset_type '{}' needs dataset_path", cfg.dataset_type);
  if (cfg.dataset_type == "text" && cfg.tokenizer_path.empty())
    config_error("dataset_type 'text' needs tokenizer_path (the text is tokenized on the fly)");
  const std::string& sampling = cfg.decode_sampling_strategy;
  if ((sampling == "nucleus" || sampling == "composite") && cfg.decode_sampling_nucleus_p <= 0)
    config_error("decode_sampling_strategy '{}' needs decode_sampling_nucleus_p in (0, 1] (it is {})",
                 sampling, cfg.decode_sampling_nucleus_p);
  if ((sampling == "topk" || sampling == "composite") && cfg.decode_sampling_top_k < 1)
    config_error("decode_sampling_strategy '{}' needs decode_sampling_top_k >= 1 (it is {})", sampling,
                 cfg.decode_sampling_top_k);
}

// x * n as a whole number, or an error naming the key.
int64_t whole_batch(double per_device, int64_t n, std::string_view key) {
  const double total = per_device * static_cast<double>(n);
  const double rounded = std::round(total);
  if (rounded < 1 || std::abs(total - rounded) > 1e-9 * std::max(1.0, total))
    config_error("{} {} x {} device(s) = {} sequences, which is not a whole number >= 1", key, per_device, n,
                 total);
  return static_cast<int64_t>(rounded);
}

void derive_batch(Config& cfg, const DeviceCount& dev) {
  cfg.num_devices = dev.num_devices;
  cfg.num_slices = dev.num_slices;
  cfg.micro_batch_size_to_train_on =
      whole_batch(cfg.per_device_batch_size, dev.num_devices, "per_device_batch_size");
  cfg.global_batch_size_to_train_on = cfg.micro_batch_size_to_train_on * cfg.gradient_accumulation_steps;
  const bool own_eval_batch = cfg.eval_per_device_batch_size > 0;
  cfg.global_batch_size_to_eval_on =
      whole_batch(own_eval_batch ? cfg.eval_per_device_batch_size : cfg.per_device_batch_size,
                  dev.num_devices, own_eval_batch ? "eval_per_device_batch_size" : "per_device_batch_size");
  cfg.lr_schedule_steps =
      cfg.learning_rate_schedule_steps == -1 ? cfg.steps : cfg.learning_rate_schedule_steps;
}

// One family (ici or dcn) of mesh sizes: at most one -1, filled so that the product is `target`.
std::array<int64_t, kNumMeshAxes> fill_mesh(const Config& cfg, std::string_view family, int64_t target,
                                            const std::string& target_what) {
  std::array<std::string, kNumMeshAxes> keys;
  std::array<int64_t, kNumMeshAxes> sizes;
  int auto_axis = -1;
  int64_t product = 1;
  for (int i = 0; i < kNumMeshAxes; ++i) {
    keys[i] = fmt::format("{}_{}_parallelism", family, kMeshAxes[i].key);
    const FieldSpec* f = config::find_field(keys[i]);
    TESSERA_ASSERT(f != nullptr);
    sizes[i] = cfg.*std::get<int64_t Config::*>(f->member);
    if (sizes[i] == -1) {
      if (auto_axis >= 0)
        config_error(
            "{} and {} are both -1; at most one {}_*_parallelism may be -1 (filled with the devices the "
            "others leave)",
            keys[auto_axis], keys[i], family);
      auto_axis = i;
    } else {
      product *= sizes[i];
    }
  }
  auto listing = [&] {
    std::vector<std::string> parts;
    for (int i = 0; i < kNumMeshAxes; ++i)
      if (i != auto_axis && sizes[i] != 1) parts.push_back(fmt::format("{}={}", keys[i], sizes[i]));
    return parts.empty() ? fmt::format("all {}_*_parallelism are 1", family)
                         : fmt::format("{}", fmt::join(parts, " x "));
  };
  if (auto_axis >= 0) {
    if (target % product != 0)
      config_error("{}=-1 cannot be filled: the other {} axes multiply to {} ({}), which does not divide {}",
                   keys[auto_axis], family, product, listing(), target_what);
    sizes[auto_axis] = target / product;
  } else if (product != target) {
    config_error("the {} parallelism does not match: {} = {}, but there are {}", family, listing(), product,
                 target_what);
  }
  return sizes;
}

void derive_mesh(Config& cfg, const DeviceCount& dev) {
  const int64_t per_slice = dev.num_devices / dev.num_slices;
  cfg.ici_parallelism = fill_mesh(cfg, "ici", per_slice,
                                  fmt::format("{} device(s) per slice ({} device(s) in {} slice(s))",
                                              per_slice, dev.num_devices, dev.num_slices));
  cfg.dcn_parallelism = fill_mesh(cfg, "dcn", dev.num_slices, fmt::format("{} slice(s)", dev.num_slices));
}

}  // namespace

void finalize_config(Config& cfg, const DeviceCount& devices) {
  if (devices.num_devices < 1 || devices.num_slices < 1 || devices.num_devices % devices.num_slices != 0)
    config_error("{} device(s) cannot be split into {} equal slice(s)", devices.num_devices,
                 devices.num_slices);
  check_supported(cfg);
  derive_model_dims(cfg);
  check_cross_keys(cfg);
  derive_batch(cfg, devices);
  derive_mesh(cfg, devices);
}

}  // namespace tessera
