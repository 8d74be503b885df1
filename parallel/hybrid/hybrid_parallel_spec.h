// colossal::parallel — the `hybrid_parallel` plugin as recipes write it
// (Colossal-AI's HybridParallelPlugin), with its option names:
//   tp_size (1), pp_size (1; > 1: pipeline stages, the 1F1B schedule,
//   parallel/booster/pipeline.h; zero_stage <= 1 then), pp_style "1f1b" |
//   "interleaved" ("1f1b") with num_model_chunks (1; > 1 with interleaved),
//   enable_sequence_parallelism (false) with sequence_parallelism_mode
//   "split_gather" (needs tp_size > 1 and zero_stage <= 1; sp_size stays 1:
//   it uses the tp ranks) or "all_to_all" (Ulysses over sp_size > 1 ranks;
//   composes with tp and pp),
//   zero_stage 0 | 1 | 2 (0), precision "fp32" | "bf16" | "fp16" ("fp32", as
//   low_level_zero here), max_norm >= 0 (0), zero_bucket_size_in_m (12),
//   ddp_bucket_cap_mb (25), cpu_offload (false; with zero_stage >= 1),
//   overlap_communication (true; false: the data-parallel gradients are
//   reduced after the backward), fp16 loss scaling:
//   initial_scale (2^16) and the rest (plugin_spec.h, read_loss_scaler).
// It owns the precision, supports no_sync below zero_stage 2, clips by norm.
#ifndef COLOSSAL_PARALLEL_HYBRID_HYBRID_PARALLEL_SPEC_H_
#define COLOSSAL_PARALLEL_HYBRID_HYBRID_PARALLEL_SPEC_H_

#include <memory>

#include "absl/status/statusor.h"
#include "parallel/registry/plugin_spec.h"

namespace colossal::parallel {

// Errors: option_error naming the first bad option.
absl::StatusOr<std::unique_ptr<PluginSpec>> make_hybrid_parallel_spec(OptionSource& options);

}  // namespace colossal::parallel

#endif  // COLOSSAL_PARALLEL_HYBRID_HYBRID_PARALLEL_SPEC_H_
