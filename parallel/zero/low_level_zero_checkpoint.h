// colossal::parallel — the whole Adam state from the low_level_zero plugin's
// slices, and back (LowLevelZeroPlugin::optimizer_state_dict and
// load_optimizer_state_dict are these two functions on the plugin's state).
//
// The whole state is exactly what nn::Adam::state_dict() holds for the same
// parameters on one process (nn/optim/state_dict.h): per optimizer parameter
// state.<name>.exp_avg and .exp_avg_sq (float32, the parameter's shape) and
// .step (int64 scalar, CPU), and the optimizer's meta (type, each group's
// hyper-parameters and parameter names). No .master: nn::Adam writes it only
// for parameters with a 16-bit model copy, and the plugin takes only float32
// parameters that are their own masters (the model's weights are the
// master; checkpoint them as the model's).
//
//   slices of rank r:  [exp_avg | exp_avg_sq] of flat elements [r*S, r*S + S)
//   gather: one all_gather of 2*S floats per rank; every rank builds the dict
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
// count shared by every parameter.
struct ZeroAdamSlice {
  std::vector<float> exp_avg, exp_avg_sq;
  int64_t step = 0;
};

// The whole state, on every rank (a collective over `pg`: every rank calls
// it with its own slice; `shard` is the caller's slice of the `table`'s
// float32 buffer). Errors: the collective's.
absl::StatusOr<nn::OptimizerStateDict> gather_zero_adam_state(comm::ProcessGroup& pg,
                                                              const nn::ParameterTable& table,
                                                              const nn::Optimizer& optimizer,
                                                              const ZeroShard& shard,
                                                              const ZeroAdamSlice& slice);

// Checks `state` against `optimizer` and loads it there
// (nn::Optimizer::load_state_dict: type family, groups, parameter names,
// shapes, hyper-parameters, step counts; the hyper-parameters are what the
// plugin steps with), then returns `shard`'s slice of it. Nothing changes on
// an error: InvalidArgument naming the mismatch, or step counts that differ
// between parameters (the plugin keeps one).
absl::StatusOr<ZeroAdamSlice> load_zero_adam_state(const nn::OptimizerStateDict& state,
                                                   const nn::ParameterTable& table,
                                                   nn::Optimizer& optimizer,
                                                   const ZeroShard& shard);

}  // namespace colossal::parallel

#endif  // COLOSSAL_PARALLEL_ZERO_LOW_LEVEL_ZERO_CHECKPOINT_H_
