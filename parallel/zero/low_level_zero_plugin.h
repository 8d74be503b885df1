// colossal::parallel — the `low_level_zero` plugin: ZeRO stages 1 and 2
// (Colossal-AI's LowLevelZeroPlugin, stage=1 / stage=2).
//
// Every rank holds the whole fp32 model, but the fp32 master weights and the
// Adam states (exp_avg, exp_avg_sq) of only one contiguous slice of the flat
// parameter buffer (nn/module/parameter.h): the buffer of N elements is
// padded to a multiple of the world size W, and rank r owns elements
// [r*S, min((r+1)*S, N)) with S = ceil(N / W). Slice boundaries need not fall
// on parameter boundaries.
//
//   * Gradients are reduced in buckets of reduce_bucket_size_in_m elements
//     over the flat gradient buffer, each issued from the module backward
//     hooks as soon as its parameters are final, while the backward goes on
//     (parallel/common/grad_buckets.h, the ddp plugin's machinery; always
//     overlapped, Colossal-AI's overlap_communication = true):
//       stage 1: all-reduce (average) in place, as ddp; no_sync accumulates
//                locally and the next synced backward reduces the sum;
//       stage 2: reduce-scatter (average): each rank receives its slice's part
//                of the bucket and adds it to its gradient shard; the
//                bucket's range of the flat gradient buffer is then zeroed
//                (after a stage-2 backward the model's gradients read 0; the
//                reduced ones are grad_shard()). Accumulation: every backward
//                reduces and the shards accumulate until Booster::zero_grad.
//                no_sync is refused (FailedPrecondition), as Colossal-AI
//                refuses it for stage 2.
//     At boost rank 0's parameters are broadcast.
//   * Booster::step (this plugin owns the step): each rank computes the
//     squared L2 norm of its gradient slice, one all_reduce(sum) gives the
//     global norm (clipping: clip_coef = min(1, max_norm / (norm + 1e-6)), as
//     nn::clip_grad_by_norm; a non-finite norm skips the step on every rank);
//     then the flat Adam kernel (kernels/adam adam_step_cpu) updates the
//     slice, one call per piece of the slice that lies in one parameter of
//     one optimizer group, with that group's hyper-parameters (lr, betas, eps,
//     weight_decay, adamw_mode, bias_correction read from the optimizer every
//     step, so LR schedules work). With nn::split_decay_groups, biases and
//     norm weights get no decay, as on one process. Finally all_gather puts
//     every rank's updated slice into the flat parameter buffer.
//
//   std::shared_ptr<comm::ProcessGroup> pg = ...;   // comm/builtin
//   auto params = *nn::optimizer_params(model->store().parameters(), Stream::cpu());
//   auto adam = *nn::make_adamw(nn::split_decay_groups(std::move(params), 0.1), o);
//   LowLevelZeroOptions zo;
//   zo.stage = 2;
//   zo.reduce_bucket_size_in_m = 12;
//   COLOSSAL_ASSIGN_OR_RETURN(std::unique_ptr<LowLevelZeroPlugin> zero,
//                             LowLevelZeroPlugin::create(pg, zo));
//   Booster booster(std::move(zero));
//   COLOSSAL_RETURN_IF_ERROR(booster.boost(*model, model->store(), *adam));
//   for (...) {
//     COLOSSAL_RETURN_IF_ERROR(booster.zero_grad());
//     for (micro-batches) ... booster.backward(...);   // stage 1: no_sync on all but the last
//     COLOSSAL_ASSIGN_OR_RETURN(auto r, booster.step({.max_norm = 1.0f}));
//   }
// (parallel/zero/low_level_zero_test.cc; the loop is in parallel/booster/booster.h)
//
// Limits (checked at create, boost or step: InvalidArgument / Unimplemented):
//   * fp32 parameters on the CPU only: no 16-bit weights (so no loss scaler),
//     no CUDA path (collectives are waited for on the host), no cpu_offload;
//   * the optimizer must be Adam-family (adamw, cpu_adam, hybrid_adam) over
//     fp32 parameters that are their own masters (optimizer_params). It
//     supplies the groups, hyper-parameters and zero_grad; its own step() is
//     not used and its state tensors only stage a loaded checkpoint, so its
//     own state_dict() is stale after boost (nn::Adam allocates full-size
//     states at creation, and the model's full flat gradient buffer still
//     exists in stage 2: the memory savings of ZeRO need an optimizer that
//     allocates lazily and gradients that are freed per bucket, not here).
//     One step count for the whole slice (every parameter steps together), so
//     a checkpoint whose parameters took different step counts is refused;
//   * a parameter whose gradient is written after its owner module's
//     backward hook would be reduced early (as for ddp).
//
// Checkpoints (Booster::optimizer_state_dict / load_optimizer_state_dict;
// parallel/zero/low_level_zero_checkpoint.h): the slices are gathered into
// the whole state nn::Adam::state_dict() would give on one process (every
// rank gets it: a collective), and a whole state (any world size, or one
// process's nn::Adam) loads on every rank, each keeping its slice. The model's
// weights are the masters: save and load them as the model's; the slice of
// the master is re-read from the model's weights at each step, so weights
// loaded after boost take effect.
#ifndef COLOSSAL_PARALLEL_ZERO_LOW_LEVEL_ZERO_PLUGIN_H_
#define COLOSSAL_PARALLEL_ZERO_LOW_LEVEL_ZERO_PLUGIN_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/process_group/process_group.h"
#include "nn/optim/optimizer.h"
#include "parallel/booster/plugin.h"

namespace colossal::parallel {

struct LowLevelZeroOptions {
  // 1: optimizer states sharded, gradients all-reduced; 2: gradients also
  // sharded (reduce-scattered). Colossal-AI's `stage`.
  int stage = 1;
  // Elements per gradient bucket (all-reduce, stage 2: reduce-scatter), in units of 1024*1024
  // (Colossal-AI's reduce_bucket_size_in_m; default 12). Positive, finite.
  double reduce_bucket_size_in_m = 12.0;
};

// Rank `rank`'s slice of a flat buffer of `numel` elements over `world` ranks.
struct ZeroShard {
  int64_t padded = 0;  // numel rounded up to a multiple of world
  int64_t size = 0;    // padded / world
  int64_t begin = 0;   // rank * size
  int64_t end = 0;     // min(begin + size, numel): elements past numel are padding
};
ZeroShard zero_shard(int64_t numel, int world, int rank);

// A piece of a slice lying in one parameter: flat offset, length, and the
// optimizer group that parameter belongs to.
struct ShardPiece {
  int64_t offset = 0;
  int64_t count = 0;
  int group = 0;
};
// The pieces of [shard.begin, shard.end) covered by `optimizer`'s parameters
// (table entries of `table`), ordered by offset. Errors: an optimizer
// parameter not in the table (InvalidArgument).
absl::StatusOr<std::vector<ShardPiece>> shard_pieces(const nn::ParameterTable& table,
                                                     const nn::Optimizer& optimizer,
                                                     const ZeroShard& shard);

class LowLevelZeroPlugin : public Plugin {
 public:
  // Errors: a null group, a bad reduce_bucket_size_in_m (InvalidArgument).
  static absl::StatusOr<std::unique_ptr<LowLevelZeroPlugin>> create(
      std::shared_ptr<comm::ProcessGroup> pg, const LowLevelZeroOptions& options = {});
  ~LowLevelZeroPlugin() override;

  const char* name() const override { return "low_level_zero"; }
  int dp_rank() const override;
  int dp_size() const override;

  absl::Status boost(nn::Module& model, const nn::ParameterStore& store,
                     nn::Optimizer& optimizer) override;
  absl::Status begin_backward(core::Context& ctx, bool sync) override;
  absl::Status end_backward(bool ok) override;
  absl::Status before_step(const core::Stream& stream) override;
  bool owns_step() const override { return true; }
  absl::Status zero_grad() override;
  // Errors: a loss scaler (fp32 only: Unimplemented); a collective's or the
  // Adam kernel's failure.
  absl::StatusOr<nn::MixedPrecisionStepResult> step(nn::DynamicLossScaler* scaler,
                                                    float max_norm) override;
  // See "Checkpoints" above. Errors: before boost (FailedPrecondition);
  // another optimizer than the boosted one; a state that does not fit
  // (InvalidArgument: nn::Optimizer::load_state_dict's checks, or step
  // counts that differ between parameters); the all_gather's failure.
  absl::StatusOr<nn::OptimizerStateDict> optimizer_state_dict(
      const nn::Optimizer& optimizer) override;
  absl::Status load_optimizer_state_dict(nn::Optimizer& optimizer,
                                         const nn::OptimizerStateDict& state) override;

  // This rank's slice (valid after boost) and its pieces.
  const ZeroShard& shard() const;
  const std::vector<ShardPiece>& pieces() const;
  // This rank's fp32 master weights and Adam moments of its slice
  // (shard().end - shard().begin elements each), and its step count.
  const std::vector<float>& master_shard() const;
  const std::vector<float>& exp_avg_shard() const;
  const std::vector<float>& exp_avg_sq_shard() const;
  int64_t step_count() const;
  // Stage 2: this rank's averaged gradients of its slice (shard().size
  // elements, the tail past shard().end is padding), summed over the
  // backwards since the last zero_grad. Empty for stage 1.
  const std::vector<float>& grad_shard() const;
  // Bucket collectives issued so far, and how many from a module's backward
  // hook (the rest when the model's backward returned).
  int64_t reductions_issued() const;
  int64_t reductions_issued_in_hooks() const;

  struct State;

 private:
  explicit LowLevelZeroPlugin(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace colossal::parallel

#endif  // COLOSSAL_PARALLEL_ZERO_LOW_LEVEL_ZERO_PLUGIN_H_
