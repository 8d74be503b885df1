// colossal::parallel — the low_level_zero plugin's state, shared by its
// implementation files (low_level_zero_plugin.cc: boost, backward hooks,
// checkpoints; low_level_zero_step.cc: the optimizer step). Internal: not a
// public header of the package.
#ifndef COLOSSAL_PARALLEL_ZERO_LOW_LEVEL_ZERO_STATE_H_
#define COLOSSAL_PARALLEL_ZERO_LOW_LEVEL_ZERO_STATE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/device/device.h"
#include "core/device/stream.h"
#include "core/status/status.h"
#include "core/tensor/tensor.h"
#include "parallel/zero/low_level_zero_checkpoint.h"
#include "parallel/zero/low_level_zero_plugin.h"
#include "parallel/zero/zero_grad_reduction.h"
#include "parallel/zero/zero_offload.h"
#include "parallel/zero/zero_param_gather.h"
#include "parallel/zero/zero_shard.h"

namespace colossal::parallel {

struct LowLevelZeroPlugin::State {
  std::shared_ptr<comm::ProcessGroup> pg;
  LowLevelZeroOptions options;
  std::unique_ptr<ZeroGradReduction> grads;  // after boost
  // overlap_allgather (world size > 1, no cpu_offload): the weights' pieces
  // sent in rounds after the step, waited for by the forward's hooks.
  std::shared_ptr<ZeroParamGather> gather;
  bool boosted = false;
  nn::ParameterStore store;
  nn::Optimizer* optimizer = nullptr;
  int64_t numel = 0;
  ZeroShard shard;
  std::vector<ShardPiece> pieces;
  // The parts [first, second) of the slice (offsets from shard.begin) whose
  // gradients count in this rank's share of the norm (options.in_norm).
  std::vector<std::pair<int64_t, int64_t>> norm_ranges;
  comm::ProcessGroup& norm_group() const {
    return options.norm_group != nullptr ? *options.norm_group : *pg;
  }
  std::vector<float> master;    // this rank's slice
  ZeroAdamSlice adam;           // its moments and the step count
  std::vector<float> gathered;  // shard.padded elements

  // The CUDA path (cuda true): parameters of `dtype` (float32, bfloat16 or
  // float16) on `stream`'s device; every shard is a device tensor and the
  // host vectors above stay empty.
  bool cuda = false;
  // CUDA at world size 1: the slice is the whole buffer, so the step writes
  // the model's weights directly (no gather buffer, no all_gather, no copy
  // back) and stage 2's gradient shard is the model's gradient buffer itself
  // (no per-bucket accumulation pass): ZeRO on one GPU costs what ddp does.
  bool local = false;
  core::DType dtype = core::DType::kF32;
  core::Stream stream;             // the optimizer's (CUDA) stream: the step's work
  core::Tensor d_master;           // float32 [n]: this rank's master slice
  core::Tensor d_exp_avg, d_exp_avg_sq;  // float32 [n]
  core::Tensor d_norm;             // float32 [3]: sum of squares, found_inf, local norm
  core::Tensor d_norm_scratch;     // l2_norm_cuda's scratch
  int64_t norm_scratch_bytes = 0;
  // The slice's pieces by optimizer group, and per group a region of
  // d_adam_scratch: one multi-tensor Adam launch per group instead of one
  // per piece (a 1.5B GPT-2 has ~580 pieces, whose launches the GPU would
  // otherwise wait for after the step's host sync).
  std::vector<std::vector<ShardPiece>> group_pieces;
  std::vector<int64_t> adam_scratch_at, adam_scratch_bytes;
  core::Tensor d_adam_scratch;
  // Orders a backward's compute stream after the step's stream when they differ.
  std::optional<core::Event> step_done;
  // cpu_offload on CUDA: the master slice and moments on the host (d_master,
  // d_exp_avg and d_exp_avg_sq stay undefined).
  std::unique_ptr<ZeroOffload> offload;

  bool sixteen_bit() const { return dtype != core::DType::kF32; }
  // Stage 2 keeps only its gradient shard, except on one CUDA rank, where the
  // model's flat gradient buffer is the shard (`local`).
  bool partitions_grads(bool on_cuda) const {
    return options.stage == 2 && !(on_cuda && pg->size() == 1);
  }
  int64_t esize() const { return static_cast<int64_t>(core::dtype_size(dtype)); }

  // Checkpoint calls: boosted, with the boosted optimizer.
  absl::Status check_optimizer(const nn::Optimizer& o, const char* what) const {
    if (!boosted) {
      return absl::FailedPreconditionError(absl::StrCat("low_level_zero: ", what, " before boost"));
    }
    if (&o != optimizer) {
      return absl::InvalidArgumentError(
          absl::StrCat("low_level_zero: ", what, ": not the boosted optimizer"));
    }
    return absl::OkStatus();
  }

  // The fp32 weights are the masters: this slice of them. The 16-bit CUDA
  // path keeps its float32 master slice (the weights are its rounding).
  absl::Status read_master() {
    if (cuda) {
      // cpu_offload reads float32 masters from the weights in its own step.
      if (sixteen_bit() || shard.end == shard.begin || offload) return absl::OkStatus();
      COLOSSAL_ASSIGN_OR_RETURN(core::Tensor v,
                                store.flat_values(dtype).slice(shard.begin, shard.end));
      return d_master.copy_from(v, stream);
    }
    const float* v = store.flat_values(core::DType::kF32).data<float>();
    master.assign(v + shard.begin, v + shard.end);
    return absl::OkStatus();
  }

  // Waits on `on` for the weights' gather after the last step (the CPU
  // stream: the host waits): before anything but the forward reads or writes them.
  absl::Status settle_weights(const core::Stream& on) {
    return gather != nullptr ? gather->settle(on) : absl::OkStatus();
  }

  // Waits for the gradient reductions on `on` (the CPU stream: the host waits).
  absl::Status wait(const core::Stream& on) {
    return grads != nullptr ? grads->wait(on) : absl::OkStatus();
  }
};

}  // namespace colossal::parallel

#endif  // COLOSSAL_PARALLEL_ZERO_LOW_LEVEL_ZERO_STATE_H_
