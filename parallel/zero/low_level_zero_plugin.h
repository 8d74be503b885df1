// colossal::parallel — the `low_level_zero` plugin: ZeRO stages 1 and 2
// (Colossal-AI's LowLevelZeroPlugin, stage=1 / stage=2).
//
// Every rank holds the whole model, but the fp32 master weights and the
// Adam states (exp_avg, exp_avg_sq) of only one contiguous slice of the flat
// parameter buffer (nn/module/parameter.h): the buffer of N elements is
// padded to a multiple of the world size W, and rank r owns elements
// [r*S, min((r+1)*S, N)) with S = ceil(N / W). Slice boundaries need not fall
// on parameter boundaries.
//
//   * Gradients are reduced in buckets of reduce_bucket_size_in_m elements
//     of the flat gradient layout, each issued from the module backward
//     hooks as soon as its parameters are final, while the backward goes on
//     (parallel/zero/zero_grad_reduction.h over parallel/common/grad_buckets.h,
//     the ddp plugin's machinery; Colossal-AI's overlap_communication =
//     true; with false every bucket is issued after the backward returns):
//       stage 1: all-reduce (average) in place, as ddp; no_sync accumulates
//                locally and the next synced backward reduces the sum;
//       stage 2: partitioned gradients. At boost the store's flat gradient
//                buffer goes (ParameterStore::release_grads; the optimizer's
//                views with it: nn::Optimizer::drop_grads): a bucket's
//                gradients have memory only from the backward's first write
//                to their reduce-scatter (average), after which each rank
//                adds its slice's part to its gradient shard (1/W of the
//                gradients), which accumulates over the backwards until
//                Booster::zero_grad: grad_shard_tensor(). Outside a backward
//                a parameter's gradient() is an error naming it.
//                no_sync is refused (FailedPrecondition), as Colossal-AI
//                refuses it for stage 2. At world size 1 on CUDA nothing is
//                reduced and the flat buffer is the shard.
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
// CUDA (the model's flat buffer on a CUDA device, NCCL group): the same
// algorithm with every shard a device tensor on the model's device and every
// collective on the device, ordered by events as in the ddp plugin:
//   * buckets: issued from the backward hooks with the compute stream
//     (Context::compute_stream()) as the collective's input stream; the
//     streams that need the results (begin_backward: the compute stream;
//     before_step: the optimizer's) wait for the collectives with
//     Work::wait_stream (no host wait), and stage 2 adds the received parts
//     to the gradient shard there. Stage 2 buckets that lie in one rank's
//     slice (all but at most W-1) are reduced in place to that rank (NCCL's
//     reduce: about half an all-reduce's bytes), which adds the average to
//     its shard; the others pack the ranks' parts into a send buffer and
//     reduce-scatter it; a bucket's memory and buffers come from the device
//     pool for the bucket's lifetime only;
//   * gradients are reduced in the gradient dtype (16-bit for a 16-bit
//     model) unless communication_dtype says otherwise, as Colossal-AI's
//     low-level ZeRO does: half the bytes of fp32, no cast buffers, and on
//     one rank exactly nn::Adam's input. The price: the average is rounded
//     to 16 bits (the per-element sum over ranks in NCCL, and stage 2's
//     accumulation of micro-batch shards, round once per addition), and an
//     fp16 sum can overflow, which the loss scaler then treats as an
//     overflow (skip, back off). communication_dtype = float32 sums in
//     float32 and rounds the average once (twice the bytes, a converted copy
//     of each bucket in flight);
//   * step (on the optimizer's stream, a CUDA stream of the model's device):
//     kernels/multi_tensor's l2_norm of the gradient slice and its found_inf
//     flag, squared on the device, one NCCL all_reduce(sum) of
//     [sum of squares, found_inf], one 12-byte copy to the host (the step's
//     only host sync); then as nn::mixed_precision_step: with a
//     DynamicLossScaler s = scale(), norm = ||g|| / s, scaler->update(overflow)
//     on every rank (they all saw the same sums), overflow skips the step on
//     every rank (nothing changes, step count included), else the CUDA
//     multi-tensor Adam kernel, one launch per optimizer group over its
//     pieces, with grad_scale = s / clip_coef; finally the slice is
//     all_gathered on the stream: in place in the model's flat buffer when
//     it splits evenly over the ranks (no cpu_offload), else into a padded
//     device buffer then copied into the model's flat buffer;
//   * world size 1 (the slice is the whole buffer): Adam writes the model's
//     weights directly (no gather buffer, all_gather or copy), and stage 2's
//     gradient shard is the model's flat gradient buffer itself (so, unlike
//     at larger world sizes, the model's gradients keep their values after a
//     backward, accumulating as stage 1's do): one GPU costs what ddp does;
//   * cpu_offload: the master slice and moments are pinned host tensors and
//     the Adam step after the norm runs on the CPU (zero_offload.h); the
//     gradient slice crosses PCIe once down and the new weights once up;
//   * float32 parameters: the weights are the masters, as on the CPU;
//     bfloat16 / float16 parameters: the float32 master slice is this
//     plugin's (made at boost from the broadcast weights, exactly), the Adam
//     kernel writes its rounding (nearest even) straight into this rank's
//     block of the 16-bit gather buffer, and the optimizer's parameters must
//     come from optimizer_params (its float32 masters are separate tensors,
//     the store's 16-bit views are its model copies). Boost drops the
//     optimizer's own masters (nn::Optimizer::drop_masters): this plugin
//     holds the only float32 copy, its slice.
//
// Limits (checked at create, boost or step: InvalidArgument / Unimplemented):
//   * one parameter dtype per model (one flat buffer). CPU: float32 only, no
//     loss scaler, collectives waited for on the host. CUDA: float32,
//     bfloat16 or float16, the optimizer's stream a CUDA stream of the
//     model's device, the Booster's Context on that device; a loss scaler is
//     accepted with any dtype (it is meant for float16);
//   * 16-bit CUDA models: the master slice persists between steps, so
//     weights loaded into the model after boost do not reach it (load the
//     weights before boost, or load an optimizer state: its .master entries,
//     else the weights, become the master slice);
//   * the optimizer must be Adam-family (adamw, cpu_adam, hybrid_adam), its
//     parameters made by optimizer_params (float32: the weights are their own
//     masters) or declared (nn::declared_params: no tensors, so no full-size
//     float32 masters exist even before boost; what colossal's Lua API
//     builds for a store whose gradients are the plugin's, stage 2). It
//     supplies the groups, hyper-parameters and zero_grad; its
//     own step() is not used and its state tensors stay unallocated (a
//     checkpoint load restores only its hyper-parameters and step counts), so
//     its own state_dict() is meaningless after boost. Memory per rank beyond the 16-bit weights and
//     gradients: the slice's 12 bytes per element (master, moments; none on
//     the GPU with cpu_offload) plus, on CUDA, the gather buffer (one 16-bit
//     copy of the weights; none at world size 1). Gradients: stage 1 the
//     model's flat gradient buffer; stage 2 (world size > 1) the gradient
//     shard, 1/W of them, and the buckets in flight (a bucket's memory and,
//     when it spans ranks, its send / receive buffers). Loading a
//     checkpoint allocates only the slice on the device (the whole dict is
//     host memory, read by every rank).
//     One step count for the whole slice (every parameter steps together), so
//     a checkpoint whose parameters took different step counts is refused;
//   * a parameter whose gradient is written after its owner module's
//     backward hook is reduced early at stage 1 (as for ddp: the late part
//     is lost); stage 2 above one CUDA rank refuses the late write
//     (FailedPrecondition naming the parameter, the backward fails).
//
// Checkpoints (Booster::optimizer_state_dict / load_optimizer_state_dict;
// parallel/zero/low_level_zero_checkpoint.h): the slices are gathered into
// the whole state nn::Adam::state_dict() would give on one process (every
// rank gets it: a collective), and a whole state (any world size, or one
// process's nn::Adam) loads on every rank, each keeping its slice. float32:
// the model's weights are the masters: save and load them as the model's;
// the slice of the master is re-read from the model's weights at each step,
// so weights loaded after boost take effect. CUDA: the device slices are
// gathered on the device (NCCL) and the returned dict's tensors are on the
// CPU (float32 moments, int64 steps); 16-bit models also get
// state.<name>.master (float32), as nn::Adam's state_dict for a model copy,
// and loading one writes the masters (and, through the optimizer, their
// rounding into the model's weights).
#ifndef COLOSSAL_PARALLEL_ZERO_LOW_LEVEL_ZERO_PLUGIN_H_
#define COLOSSAL_PARALLEL_ZERO_LOW_LEVEL_ZERO_PLUGIN_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/process_group/process_group.h"
#include "core/dtype/dtype.h"
#include "core/tensor/tensor.h"
#include "nn/optim/optimizer.h"
#include "parallel/booster/plugin.h"
#include "parallel/zero/zero_shard.h"

namespace colossal::parallel {

struct LowLevelZeroOptions {
  // 1: optimizer states sharded, gradients all-reduced; 2: gradients also
  // sharded (reduce-scattered). Colossal-AI's `stage`.
  int stage = 1;
  // Elements per gradient bucket (all-reduce, stage 2: reduce-scatter), in units of 1024*1024
  // (Colossal-AI's reduce_bucket_size_in_m; default 12). Positive, finite.
  double reduce_bucket_size_in_m = 12.0;
  // Colossal-AI's cpu_offload: the float32 master slice and Adam moments live
  // in pinned host memory and CPU Adam updates them, pipelined with the
  // gradient download and the weight upload (parallel/zero/zero_offload.h).
  // On the CPU path the shards are host memory updated by CPU Adam already,
  // so it changes nothing there.
  bool cpu_offload = false;
  // Colossal-AI's overlap_allgather: after the step, each rank's updated
  // slice reaches the others in rounds of bucket-sized pieces (round i: every
  // rank's i-th piece to every other rank), and the next forward waits for a
  // round only before the first module that uses it
  // (parallel/zero/zero_param_gather.h), instead of one
  // all_gather of the whole model before the forward. The same bytes: the
  // results are bitwise those without it. Applies at world size > 1, on CUDA
  // without cpu_offload (whose upload writes the weights as they arrive).
  bool overlap_allgather = true;
  // Colossal-AI's overlap_communication: true reduces each gradient bucket
  // as soon as the backward has finished it, beside the rest of the
  // backward; false reduces every bucket after the backward returns (the
  // same collectives, the same results: for debugging, or measuring what
  // the overlap buys).
  bool overlap_communication = true;
  // CPU Adam's OpenMP threads with cpu_offload (0: OpenMP's default). Give each
  // process of a host its share of the cores.
  int cpu_offload_threads = 0;
  // Colossal-AI's communication_dtype: the dtype gradient buckets cross
  // between ranks in (float32, bfloat16 or float16); unset: the parameters'.
  // Each bucket is converted before its collective and the average back to
  // the parameters' dtype after it (zero_grad_reduction.h): float32 for a
  // 16-bit model sums and averages the ranks' gradients in float32 at twice
  // the bytes (one rounding instead of one per addition, and no float16
  // overflow in the sum); bfloat16 for a float32 model halves the bytes.
  // At world size 1 nothing is sent and it changes nothing.
  std::optional<core::DType> communication_dtype;
  // Under hybrid parallelism (parallel/hybrid) this plugin's group is one
  // data-parallel group and other ranks hold other parameters (tensor-parallel
  // pieces): the gradient norm's sum of squares is summed over `norm_group`
  // (null: this plugin's group), and parameters for which `in_norm` is false
  // are left out of this rank's sum (a parameter whole on every
  // tensor-parallel rank counts on one of them). Null in_norm: all count.
  std::shared_ptr<comm::ProcessGroup> norm_group;
  std::function<bool(const nn::ParameterEntry&)> in_norm;
};

class LowLevelZeroPlugin : public Plugin {
 public:
  // Errors: a null group, a bad reduce_bucket_size_in_m (InvalidArgument).
  static absl::StatusOr<std::unique_ptr<LowLevelZeroPlugin>> create(
      std::shared_ptr<comm::ProcessGroup> pg, const LowLevelZeroOptions& options = {});
  ~LowLevelZeroPlugin() override;

  const char* name() const override { return "low_level_zero"; }
  int dp_rank() const override;
  int dp_size() const override;

  // Stage 2 above one CUDA rank: the values only (ParameterStore::Gradients::
  // kPlugin), since a step never holds the gradients whole. Otherwise
  // Plugin's (values and the flat gradient buffer).
  absl::Status materialize(nn::ParameterStore& store, uint64_t seed,
                           const core::Stream& stream) override;
  absl::Status boost(nn::Module& model, const nn::ParameterStore& store,
                     nn::Optimizer& optimizer) override;
  absl::Status begin_forward(core::Context& ctx) override;
  absl::Status end_forward(bool ok) override;
  absl::Status begin_backward(core::Context& ctx, bool sync) override;
  absl::Status end_backward(bool ok) override;
  absl::Status before_step(const core::Stream& stream) override;
  bool owns_step() const override { return true; }
  bool steps_declared_optimizer() const override { return true; }
  // The gradient shard (stage 2) and, for a declared optimizer, which
  // zeroes nothing, the model's flat gradient buffer.
  absl::Status zero_grad() override;
  absl::Status sync_weights() override;
  // Errors: a loss scaler on the CPU path (float32 only: Unimplemented); a
  // collective's or a kernel's failure.
  absl::StatusOr<nn::MixedPrecisionStepResult> step(nn::DynamicLossScaler* scaler,
                                                    float max_norm) override;
  // See "Checkpoints" above. Errors: before boost (FailedPrecondition);
  // another optimizer than the boosted one; a state that does not fit
  // (InvalidArgument: nn::Optimizer::load_state_dict's checks, or step
  // counts that differ between parameters); the all_gather's failure.
  absl::StatusOr<nn::OptimizerStateDict> optimizer_state_dict(const nn::Optimizer& optimizer,
                                                              int to_rank = -1) override;
  absl::Status load_optimizer_state_dict(nn::Optimizer& optimizer,
                                         const nn::OptimizerStateDict& state) override;
  // Plugin's (every rank holds the whole model), once the weights' gather
  // after the last step has finished (overlap_allgather).
  // Saves stream (Plugin::streams_state): the model a parameter at a time,
  // the Adam state a gathered chunk at a time (stream_zero_adam_state), so
  // a model whose offloaded state fills the host is saved too.
  bool streams_state() const override { return true; }
  absl::Status stream_model_state(const nn::ParameterStore& store, int to_rank,
                                  const nn::StatePieceFn& piece) override;
  absl::StatusOr<nn::StreamedOptimizerState> stream_optimizer_state(const nn::Optimizer& optimizer,
                                                                    int to_rank) override;
  absl::StatusOr<nn::ParameterStore> model_state_dict(const nn::ParameterStore& store, int to_rank,
                                                      const core::Stream& stream) override;
  absl::Status load_model_state_dict(nn::ParameterStore& store, const nn::ParameterStore& state,
                                     const core::Stream& stream) override;

  // This rank's slice (valid after boost) and its pieces.
  const ZeroShard& shard() const;
  const std::vector<ShardPiece>& pieces() const;
  // This rank's fp32 master weights and Adam moments of its slice
  // (shard().end - shard().begin elements each), and its step count.
  const std::vector<float>& master_shard() const;
  const std::vector<float>& exp_avg_shard() const;
  const std::vector<float>& exp_avg_sq_shard() const;
  int64_t step_count() const;
  // The CUDA path (on_cuda(): the model's parameters are on a CUDA device;
  // the vector accessors above are then empty): the same as device tensors
  // on the model's device, written on the optimizer's stream (synchronise it
  // before reading them on the host). master / exp_avg / exp_avg_sq: float32
  // [shard().end - shard().begin] (with cpu_offload: pinned host tensors);
  // grad_shard_tensor (both paths): stage 2's averaged gradients of this
  // rank's slice, summed over the backwards since the last zero_grad, a view
  // of param_dtype() with at least shard().end - shard().begin elements (the
  // gradient shard, [shard().size], whose tail past shard().end is padding);
  // undefined for stage 1; on CUDA at world size 1 the model's flat gradient
  // buffer itself.
  // Valid after boost.
  bool on_cuda() const;
  core::DType param_dtype() const;
  const core::Tensor& master_shard_tensor() const;
  const core::Tensor& exp_avg_shard_tensor() const;
  const core::Tensor& exp_avg_sq_shard_tensor() const;
  core::Tensor grad_shard_tensor() const;
  // Bucket collectives issued so far, and how many from a module's backward
  // hook (the rest when the model's backward returned).
  int64_t reductions_issued() const;
  // Stage 2: the most buckets whose collectives ran at once beside a backward.
  int64_t reductions_most_in_flight() const;
  int64_t reductions_issued_in_hooks() const;
  // Rounds of the weights' pieces issued so far (overlap_allgather).
  int64_t gathers_issued() const;

  struct State;

 private:
  explicit LowLevelZeroPlugin(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace colossal::parallel

#endif  // COLOSSAL_PARALLEL_ZERO_LOW_LEVEL_ZERO_PLUGIN_H_
