// colossal::parallel — the `low_level_zero` plugin as recipes write it
// (Colossal-AI's LowLevelZeroPlugin), with its option names and defaults:
//   stage 1 | 2 (1), precision "fp32" | "bf16" | "fp16" ("fp32"),
//   max_norm >= 0 (0: no clipping), reduce_bucket_size_in_m > 0 (12),
//   overlap_communication (true; false: buckets reduced after the backward),
//   cpu_offload (false), overlap_allgather (true here, false in Colossal-AI:
//   the weights' gather after the step overlaps the next forward, with the
//   same results), communication_dtype ("fp32" | "bf16" | "fp16"; the
//   dtype gradients are reduced in, by default the precision's),
//   fp16 loss scaling: initial_scale (2^32), min_scale, max_scale (2^32),
//   growth_factor, backoff_factor, growth_interval, hysteresis.
// It owns the precision, supports no_sync at stage 1 only, clips by norm only.
#ifndef COLOSSAL_PARALLEL_ZERO_LOW_LEVEL_ZERO_SPEC_H_
#define COLOSSAL_PARALLEL_ZERO_LOW_LEVEL_ZERO_SPEC_H_

#include <memory>

#include "absl/status/statusor.h"
#include "parallel/registry/plugin_spec.h"

namespace colossal::parallel {

// Errors: option_error naming the first bad option.
absl::StatusOr<std::unique_ptr<PluginSpec>> make_low_level_zero_spec(OptionSource& options);

}  // namespace colossal::parallel

#endif  // COLOSSAL_PARALLEL_ZERO_LOW_LEVEL_ZERO_SPEC_H_
