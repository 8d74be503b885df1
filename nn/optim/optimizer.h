// colossal::nn — the optimizer interface shared by Adam (AdamW, CPUAdam,
// HybridAdam) and SGD: parameter groups, stepping with unscaling and an
// overflow skip, zero_grad, learning rates, and state save/load.
//
//   std::vector<ParamGroup> groups = split_decay_groups(std::move(params), 0.1);
//   COLOSSAL_ASSIGN_OR_RETURN(std::unique_ptr<Adam> opt,
//                             make_hybrid_adam(std::move(groups), AdamOptions{.lr = 6e-4},
//                                              ctx.compute_stream()));
//   for (int64_t it = 0; it < steps; ++it) {
//     ... forward, backward into the gradients ...
//     COLOSSAL_RETURN_IF_ERROR(opt->set_lrs(scheduler.lrs()));       // nn/schedule
//     COLOSSAL_ASSIGN_OR_RETURN(StepResult r, opt->step());
//     COLOSSAL_RETURN_IF_ERROR(opt->zero_grad());
//     scheduler.step();
//   }
//
// Mixed precision (nn/amp/loss_scaler.h): pass the loss scale (times
// 1 / clip_coef when clipping is folded in, as Colossal-AI's `div_scale`) as
// StepOptions::grad_scale, and skip the step on overflow, either by not calling
// step() or by handing it the overflow flag as StepOptions::found_inf.
//
// Step counts are per parameter and live on the host, so Adam's bias
// correction is exactly torch's. Consequently a flag in GPU memory is read back
// (one 4-byte copy that waits for the stream, as Colossal-AI's `found_inf.item()`)
// before anything is launched; kernels/adam's device-side skip is not needed.
//
// Threading and ordering: an optimizer is used by one thread at a time. CUDA
// work is enqueued on the stream given at creation and not synchronised (make
// that stream wait for whatever produced the gradients); CPU work runs in the
// calling thread (OpenMP inside the CPU Adam kernel), so CPU-resident
// gradients must be complete when step() is called (e.g. synchronise after an
// asynchronous device-to-host gradient copy into pinned memory).
#ifndef COLOSSAL_NN_OPTIM_OPTIMIZER_H_
#define COLOSSAL_NN_OPTIM_OPTIMIZER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/device/stream.h"
#include "core/tensor/tensor.h"
#include "nn/optim/param.h"
#include "nn/optim/state_dict.h"

namespace colossal::nn {

struct StepOptions {
  // Gradients are divided by this before use: the loss scale, or Colossal-AI's
  // div_scale (loss scale / clip_coef). Positive and finite; 1 means none.
  float grad_scale = 1.0f;
  // Optional overflow flag: a float32 tensor of one element on the CPU or on
  // the optimizer stream's CUDA device (kernels/multi_tensor's found_inf).
  // Non-zero: the step is skipped and nothing changes, step counts included.
  const core::Tensor* found_inf = nullptr;
};

struct StepResult {
  bool skipped = false;  // found_inf was set
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // "adamw", "cpu_adam", "hybrid_adam" or "sgd".
  const std::string& type() const { return type_; }
  // The stream CUDA work is enqueued on (the CPU stream when all is on the CPU).
  const core::Stream& stream() const { return stream_; }

  // One update of every parameter from its gradient. Errors: a bad
  // grad_scale or found_inf (InvalidArgument); a kernel failure.
  absl::StatusOr<StepResult> step(const StepOptions& options = {});

  // Sets every gradient to zero (on the stream for CUDA gradients).
  absl::Status zero_grad();

  int num_groups() const { return static_cast<int>(groups_.size()); }
  // Group `group`'s hyper-parameters; `group` must be in [0, num_groups()).
  const GroupHyperParams& group_hyper(int group) const;
  // Group `group`'s parameters, in order.
  std::vector<ParamRef> group_params(int group) const;
  // Every parameter's gradient, group by group (e.g. for clip_grad_by_norm).
  std::vector<core::Tensor> grads() const;

  // Learning rates, one per group (what an LR scheduler sets every step).
  std::vector<double> lrs() const;
  // Errors: a group index out of range, a negative or non-finite lr, a span
  // whose length is not num_groups().
  absl::Status set_lr(int group, double lr);
  absl::Status set_lrs(absl::Span<const double> lrs);

  // Points parameter `name` at new gradient memory (same shape and device;
  // float32, float16 or bfloat16). Errors: unknown name, mismatched tensor.
  absl::Status set_grad(absl::string_view name, core::Tensor grad);

  // Steps parameter `name` has taken. Errors: unknown name.
  absl::StatusOr<int64_t> param_step(absl::string_view name) const;
  // Parameter `name`'s state tensor `state` ("exp_avg", "exp_avg_sq",
  // "momentum_buffer"), sharing memory. Errors: unknown name or state, or a
  // group without that state (SGD without momentum).
  absl::StatusOr<core::Tensor> state_tensor(absl::string_view name, absl::string_view state) const;

  // The state (nn/optim/state_dict.h). State tensors and masters are views of
  // the optimizer's memory, not copies: write them out (or copy them) before
  // the next step(). Step counts are new CPU tensors.
  absl::StatusOr<OptimizerStateDict> state_dict() const;

  // Restores a state_dict() of an optimizer with the same groups of the same
  // parameter names (Adam-family states load into any Adam-family optimizer).
  // Hyper-parameters, step counts, state tensors (copied, from any device) and
  // saved masters (the model copy is then rewritten from the master) are
  // restored. Everything is checked before anything changes; errors are
  // InvalidArgument naming the group, parameter or key: another optimizer
  // family, different groups or names, a missing or unexpected key, a tensor
  // of the wrong shape or dtype, invalid hyper-parameters.
  absl::Status load_state_dict(const OptimizerStateDict& state);

  // For a plugin that takes over the step and keeps its own shard of the
  // masters and state (parallel/zero), so that no full-size copy stays:
  // drop_masters() frees the separate float32 masters of 16-bit parameters
  // (group_params() then gives them undefined); afterwards step() fails
  // (FailedPrecondition), state_dict() has no "master" entries, and
  // load_state_dict() writes a saved master's rounding straight into the model
  // copy. release_state() frees the state tensors (a later use allocates
  // them again, zeroed).
  void drop_masters();
  void release_state();
  // For a plugin that keeps only its shard of the gradients (low_level_zero
  // stage 2, nn::ParameterStore::release_grads): forgets the gradient views,
  // so that the store's flat gradient buffer can go. group_params() then
  // gives them undefined; zero_grad() has nothing to zero and step() fails
  // (FailedPrecondition), as after drop_masters().
  void drop_grads();
  // True when the parameters are declared (declared_param): no tensors.
  bool declared() const { return declared_; }
  // For the same plugin, whose checkpoint load keeps only its slice of a
  // saved state: check_state_dict() runs load_state_dict()'s checks (same
  // errors) without changing anything; load_state_meta() runs them and then
  // restores only the hyper-parameters and step counts. Neither allocates
  // state tensors nor touches masters or model copies.
  absl::Status check_state_dict(const OptimizerStateDict& state) const;
  absl::Status load_state_meta(const OptimizerStateDict& state);

 protected:
  struct Slot {
    ParamRef ref;
    int64_t step = 0;
    std::vector<core::Tensor> state;  // one per state_names_ entry; empty when the group has none
  };
  struct Group {
    GroupHyperParams hyper;
    std::vector<Slot> slots;
  };

  Optimizer(std::string type, std::vector<std::string> state_names, const core::Stream& stream);

  // Resolves and validates groups and checks every parameter. Subclasses call
  // it from their factory. The state tensors are allocated (zeroed) on first
  // use: step(), state_dict(), state_tensor() or load_state_dict(). So an
  // optimizer whose step a plugin takes over (low_level_zero keeps only its
  // shard of the state) never holds full-size state.
  absl::Status init(std::vector<ParamGroup> groups, const GroupHyperParams& defaults);

  // InvalidArgument naming the group for hyper-parameters this optimizer rejects.
  virtual absl::Status validate_hyper(const GroupHyperParams& hyper, int group) const = 0;
  // Extra per-parameter checks (CPUAdam: CPU only).
  virtual absl::Status validate_param(const ParamRef& param) const { return absl::OkStatus(); }
  // Whether parameters of a group with `hyper` keep state tensors.
  virtual bool group_has_state(const GroupHyperParams& hyper) const { return true; }
  // Updates every parameter; increments each stepped slot's `step`.
  virtual absl::Status do_step(float grad_scale) = 0;

  std::vector<Group> groups_;

 private:
  absl::Status check_param(const ParamRef& p) const;
  absl::Status allocate_state();
  absl::Status allocate_slot_state(Slot& slot);
  const Slot* find_slot(absl::string_view name) const;
  Slot* find_slot(absl::string_view name);
  // The tensor giving a slot's shape and device: its master, or its model
  // copy once the masters were dropped.
  static const core::Tensor& shape_of(const Slot& slot);
  // The parameter's shape (its master's, model copy's, or declared shape).
  static const core::Shape& slot_shape(const Slot& slot);
  // FailedPrecondition naming `what` when the parameters are declared.
  absl::Status check_not_declared(absl::string_view what) const;

  std::string type_;
  std::vector<std::string> state_names_;
  core::Stream stream_;
  bool state_allocated_ = false;
  bool masters_dropped_ = false;
  bool grads_dropped_ = false;
  bool declared_ = false;  // every parameter is a declared_param
};

}  // namespace colossal::nn

#endif  // COLOSSAL_NN_OPTIM_OPTIMIZER_H_
