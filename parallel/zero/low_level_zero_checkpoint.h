// colossal::parallel — the whole Adam state from the low_level_zero plugin's
// slices, and back (LowLevelZeroPlugin::optimizer_state_dict and
// load_optimizer_state_dict are these two functions on the plugin's state).
//
// The whole state is exactly what nn::Adam::state_dict() holds for the same
// parameters on one process (nn/optim/state_dict.h): per optimizer parameter
// state.<name>.exp_avg and .exp_avg_sq (float32, the parameter's shape) and
// .step (int64 scalar, CPU), and the optimizer's meta (type, each group's
// hyper-parameters and parameter names). .master only for 16-bit models (the
// CUDA path): nn::Adam writes it only for parameters with a 16-bit model
// copy; float32 parameters are their own masters (the model's weights are
// the master; checkpoint them as the model's).
//
//   slices of rank r:  [exp_avg | exp_avg_sq (| master)] of flat elements [r*S, r*S + S)
//   gather: all_gathers of [exp_avg | exp_avg_sq (| master)] per rank, in chunks of 8M
//           slice elements so the staging stays small, on the CPU or the device alike;
//           the writing rank builds the dict, whose tensors are the only full-size copy made
//   load:   every rank reads the whole dict and keeps its own slice, so a dict
//           from any world size (or from one process's nn::Adam) loads.
#ifndef COLOSSAL_PARALLEL_ZERO_LOW_LEVEL_ZERO_CHECKPOINT_H_
#define COLOSSAL_PARALLEL_ZERO_LOW_LEVEL_ZERO_CHECKPOINT_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/process_group/process_group.h"
#include "nn/module/parameter.h"
#include "nn/optim/optimizer.h"
#include "nn/optim/state_dict.h"
#include "parallel/zero/low_level_zero_plugin.h"

namespace colossal::parallel {

// One rank's Adam state: moments of [shard.begin, shard.end) and the step
// count shared by every parameter; `master` (the same range, float32) only
// for 16-bit models (load_zero_adam_state's with_master).
struct ZeroAdamSlice {
  std::vector<float> exp_avg, exp_avg_sq;
  std::vector<float> master;
  int64_t step = 0;
};

// One rank's slice as float32 tensors of shard.end - shard.begin elements, on
// the CPU or one CUDA device; `master` defined only for 16-bit models (then
// the dict gets state.<name>.master, as nn::Adam's for a 16-bit model copy).
struct ZeroAdamTensors {
  core::Tensor exp_avg, exp_avg_sq, master;
  int64_t step = 0;
};

// The whole state (a collective over `pg`: every rank calls it with its own
// slice; `shard` is the caller's slice of the `table`'s flat buffer), built
// on every rank (whole = false: this rank takes part in the collective but
// gets only the meta, no tensors: it never holds the whole state; the rank
// that writes the file passes true). all_gathers ordered after the work on
// `stream` (the slices' device; Stream::cpu() for host slices), chunk by
// chunk (staging on that device: world * (2 or 3) * 32 MiB), each copied to
// the host and into the dict's tensors. The returned tensors are on the CPU
// (float32; steps int64), whatever the device of the model. chunk_elements:
// slice elements per chunk (0: 8M; tests pass small ones to exercise many
// chunks). Errors: the collective's.
// The same state streamed (nn::StreamedOptimizerState): `held` the meta and
// the step counts, `streamed` the K float32 tensors of each optimizer
// parameter (by flat offset), declared on every rank; `write` runs the same
// chunked all_gathers (every rank calls it once) and, where `whole`, hands
// each gathered piece to its function, so the writing rank never holds more
// than one chunk. `write` uses `pg` when called, which must outlive it (the
// plugin's own group); the slice tensors it keeps.
absl::StatusOr<nn::StreamedOptimizerState> stream_zero_adam_state(
    comm::ProcessGroup& pg, const nn::ParameterTable& table, const nn::Optimizer& optimizer,
    const ZeroShard& shard, const ZeroAdamTensors& slice, const core::Stream& stream,
    bool whole = true, int64_t chunk_elements = 0);

absl::StatusOr<nn::OptimizerStateDict> gather_zero_adam_state(
    comm::ProcessGroup& pg, const nn::ParameterTable& table, const nn::Optimizer& optimizer,
    const ZeroShard& shard, const ZeroAdamTensors& slice, const core::Stream& stream,
    bool whole = true, int64_t chunk_elements = 0);

// Checks `state` against `optimizer` (nn::Optimizer::check_state_dict: type
// family, groups, parameter names, shapes, hyper-parameters, step counts)
// and returns `shard`'s slice of it; then restores the optimizer's
// hyper-parameters and step counts (load_state_meta: the plugin steps with
// them) and writes every saved master into the model's weights (`store`'s
// values), as nn::Optimizer::load_state_dict would: its rounding into 16-bit
// weights (the model copies), its values into float32 weights (their own
// masters). The optimizer may be declared (no tensors). The optimizer's
// own state tensors are never allocated: a resume costs the slice, not a
// full-size copy of the state on the device. Nothing changes on a checking
// error: InvalidArgument naming the mismatch, or step counts that differ
// between parameters (the plugin keeps one). The dict's tensors may be on
// the CPU or on the optimizer's CUDA device (copied to the host one
// parameter at a time). with_master (16-bit models): also the slice of the
// float32 masters: a parameter's state.<name>.master when the dict has one,
// else its 16-bit weight widened.
//
// `into` (float32 tensors of at least shard.end - shard.begin elements;
// `master` only with_master): the slice is written there and the returned
// slice holds only the step count. Host tensors (the plugin's pinned
// offloaded shards) are written in place; device tensors (its slices on the
// GPU) a parameter's piece at a time on the optimizer's stream, straight
// from the dict's memory (views of a checkpoint's mapping), so a resume
// makes no host copy of this rank's state. Every check runs before any is
// written.
struct ZeroAdamTargets {
  core::Tensor exp_avg;
  core::Tensor exp_avg_sq;
  core::Tensor master;
};
absl::StatusOr<ZeroAdamSlice> load_zero_adam_state(const nn::OptimizerStateDict& state,
                                                   const nn::ParameterStore& store,
                                                   nn::Optimizer& optimizer,
                                                   const ZeroShard& shard,
                                                   bool with_master = false,
                                                   const ZeroAdamTargets* into = nullptr);

}  // namespace colossal::parallel

#endif  // COLOSSAL_PARALLEL_ZERO_LOW_LEVEL_ZERO_CHECKPOINT_H_
