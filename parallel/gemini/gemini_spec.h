// colossal::parallel — the `gemini` plugin as recipes write it, in both of
// Colossal-AI's vocabularies:
//   GeminiPlugin: placement_policy "static" | "auto" | "cpu" | "cuda" ("static"),
//     shard_param_frac (1.0), offload_optim_frac (0.0), offload_param_frac (0.0),
//     warmup_non_model_data_ratio (0.8), steady_cuda_cap_ratio (0.9),
//     gpu_margin_mem_ratio (0.0; > 0 is refused: the optimizer state moves
//     with its chunk), search_range_m (32), hidden_dim (1024),
//     min_chunk_size_m (32), max_prefetch (0; chunks all-gathered, or host
//     chunks copied in, this many ahead of their use), enable_async_reduce
//     (true; reductions always run beside the backward),
//     pin_memory (false; host shards are always pinned on CUDA), enable_gradient_accumulation (false; accumulation
//     always works), precision ("fp32" here: the CPU path trains float32),
//     master_weights (true; false is refused), max_norm (0: no clipping),
//     fp16 loss scaling: initial_scale (2^16), min_scale (1), growth_factor
//     (2), backoff_factor (0.5), growth_interval (1000), hysteresis (2),
//     max_scale (2^32).
//   The Lightning strategy's older names map onto these: use_chunk (true;
//     false is refused), chunk_size (elements: a fixed size, search_range_m 0),
//     enable_distributed_storage (true), chunk_search_range (elements ->
//     search_range_m), chunk_search_n_grids (-> hidden_dim = range / grids),
//     min_chunk_size (elements -> min_chunk_size_m), force_outputs_fp32
//     (false; true is refused: outputs are the model's dtype).
// Giving a key in both vocabularies is an error. It owns the precision,
// accepts no_sync (which saves no communication, see gemini_plugin.h) and
// clips by norm only.
#ifndef COLOSSAL_PARALLEL_GEMINI_GEMINI_SPEC_H_
#define COLOSSAL_PARALLEL_GEMINI_GEMINI_SPEC_H_

#include <memory>

#include "absl/status/statusor.h"
#include "parallel/registry/plugin_spec.h"

namespace colossal::parallel {

// Errors: option_error naming the first bad option.
absl::StatusOr<std::unique_ptr<PluginSpec>> make_gemini_spec(OptionSource& options);

}  // namespace colossal::parallel

#endif  // COLOSSAL_PARALLEL_GEMINI_GEMINI_SPEC_H_
