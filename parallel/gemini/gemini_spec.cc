#include "parallel/gemini/gemini_spec.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status/status.h"
#include "parallel/gemini/gemini_plugin.h"

namespace colossal::parallel {
namespace {

constexpr double kMi = 1024.0 * 1024.0;

class GeminiSpec : public PrecisionOwningSpec {
 public:
  GeminiSpec(GeminiOptions options, std::string precision, float max_norm,
             nn::DynamicLossScalerOptions scaler)
      : PrecisionOwningSpec(std::move(precision), max_norm, scaler), options_(std::move(options)) {}
  const char* name() const override { return "gemini"; }
  PluginCapabilities capabilities() const override {
    PluginCapabilities c = owned_precision();
    c.supports_no_sync = true;  // accepted; every micro-batch is reduced anyway
    return c;
  }
  absl::StatusOr<std::unique_ptr<Plugin>> make(std::shared_ptr<comm::ProcessGroup> pg,
                                               const PluginEnv& env) const override {
    COLOSSAL_ASSIGN_OR_RETURN(std::unique_ptr<GeminiPlugin> p, GeminiPlugin::create(std::move(pg), options_));
    return std::unique_ptr<Plugin>(std::move(p));
  }

 private:
  GeminiOptions options_;
};

// The value of `newer` or of its older name, never both.
absl::StatusOr<bool> pick(OptionSource& o, const char* newer, const char* older) {
  if (o.has(newer) && o.has(older)) {
    return option_error(older, absl::StrCat("and ", newer, " name the same setting: give one"));
  }
  return o.has(older);
}

}  // namespace

absl::StatusOr<std::unique_ptr<PluginSpec>> make_gemini_spec(OptionSource& options) {
  // Every option is read before any is judged: the front end reports keys
  // nobody read as unknown, so an early return would blame the wrong key.
  GeminiOptions g;
  g.placement_policy = options.string("placement_policy", "static");
  g.shard_param_frac = options.number("shard_param_frac", g.shard_param_frac);
  g.offload_optim_frac = options.number("offload_optim_frac", g.offload_optim_frac);
  g.offload_param_frac = options.number("offload_param_frac", g.offload_param_frac);
  g.warmup_non_model_data_ratio =
      options.number("warmup_non_model_data_ratio", g.warmup_non_model_data_ratio);
  g.steady_cuda_cap_ratio = options.number("steady_cuda_cap_ratio", g.steady_cuda_cap_ratio);
  const double margin = options.number("gpu_margin_mem_ratio", 0.0);
  g.enable_distributed_storage = options.boolean("enable_distributed_storage", true);

  // Chunk search, newer names in MiElements, older ones in elements.
  const absl::StatusOr<bool> old_range = pick(options, "search_range_m", "chunk_search_range");
  g.chunks.search_range_m = old_range.value_or(false) ? options.number("chunk_search_range", 0) / kMi
                                                      : options.number("search_range_m", 32.0);
  const absl::StatusOr<bool> old_min = pick(options, "min_chunk_size_m", "min_chunk_size");
  g.chunks.min_chunk_size_m = old_min.value_or(false) ? options.number("min_chunk_size", 0) / kMi
                                                      : options.number("min_chunk_size_m", 32.0);
  const absl::StatusOr<bool> old_grids = pick(options, "hidden_dim", "chunk_search_n_grids");
  const int64_t grids = options.integer("chunk_search_n_grids", 1024);
  const int64_t hidden_dim = options.integer("hidden_dim", 1024);
  const bool fixed_chunk = options.has("chunk_size");
  const double chunk_size = options.number("chunk_size", 0);
  const bool use_chunk = options.boolean("use_chunk", true);
  const bool force_outputs_fp32 = options.boolean("force_outputs_fp32", false);
  const int64_t prefetch = options.integer("max_prefetch", 0);
  g.gpu_shares_host_adam = options.boolean("gpu_shares_host_adam", g.gpu_shares_host_adam);
  g.device_grad_accumulation = options.boolean("device_grad_accumulation", g.device_grad_accumulation);
  options.boolean("enable_async_reduce", true);
  options.boolean("pin_memory", false);
  options.boolean("enable_gradient_accumulation", false);  // accumulation always works
  const bool master_weights = options.boolean("master_weights", true);
  const std::string precision = options.string("precision", "fp32");
  const float max_norm = static_cast<float>(options.number("max_norm", 0.0));
  // Colossal-AI's GeminiPlugin starts at 2^16.
  const absl::StatusOr<nn::DynamicLossScalerOptions> scaler = read_loss_scaler(options, 65536.0);

  for (const absl::StatusOr<bool>* both : {&old_range, &old_min, &old_grids}) {
    if (!both->ok()) return both->status();
  }
  if (*old_grids) {
    if (grids < 1) return option_error("chunk_search_n_grids", "must be >= 1");
    g.chunks.hidden_dim = std::max<int64_t>(1, static_cast<int64_t>(g.chunks.search_range_m * kMi) / grids);
  } else {
    g.chunks.hidden_dim = hidden_dim;
  }
  if (fixed_chunk) {  // a fixed size: the search starts there and scans nothing
    if (!(chunk_size > 0)) return option_error("chunk_size", "must be a positive number of elements");
    g.chunks.min_chunk_size_m = chunk_size / kMi;
    g.chunks.search_range_m = 0;
  }
  if (!use_chunk) {
    return option_error("use_chunk", "= false is not available: gemini always manages chunks");
  }
  if (force_outputs_fp32) {
    return option_error("force_outputs_fp32",
                        "= true is not available: the model's outputs are in its own dtype");
  }
  g.max_prefetch = static_cast<int>(std::min<int64_t>(prefetch, 1 << 20));
  if (!master_weights) {
    return option_error("master_weights", "= false is not available: the shards keep float32 masters");
  }
  if (precision != "fp32" && precision != "bf16" && precision != "fp16") {
    return option_error("precision",
                        absl::StrCat("must be \"fp32\", \"bf16\" or \"fp16\", got \"", precision, "\""));
  }
  if (max_norm < 0) return option_error("max_norm", "must be >= 0 (0: no clipping)");
  if (prefetch < 0) return option_error("max_prefetch", "must be >= 0");
  if (margin < 0 || margin > 1) return option_error("gpu_margin_mem_ratio", "must be in [0, 1]");
  if (margin > 0) {
    return option_error("gpu_margin_mem_ratio",
                        "> 0 is not available yet: auto places the optimizer state with its chunk "
                        "(leave it at 0)");
  }
  COLOSSAL_RETURN_IF_ERROR(validate_gemini_options(g));  // naming the key, as the options above
  COLOSSAL_ASSIGN_OR_RETURN(const nn::DynamicLossScalerOptions s, scaler);
  return std::unique_ptr<PluginSpec>(std::make_unique<GeminiSpec>(std::move(g), precision, max_norm, s));
}

}  // namespace colossal::parallel
