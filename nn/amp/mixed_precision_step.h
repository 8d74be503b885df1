// colossal::nn — one optimizer step in Colossal-AI's mixed-precision order:
// global gradient norm with overflow check, loss-scaler update, then either a
// skipped step (overflow) or the optimizer step with unscaling and clipping
// folded into one division (Colossal-AI's div_scale).
//
//   COLOSSAL_ASSIGN_OR_RETURN(DynamicLossScaler scaler, DynamicLossScaler::create());
//   for (...) {
//     loss * scaler.scale() -> backward into the gradients
//     COLOSSAL_ASSIGN_OR_RETURN(MixedPrecisionStepResult r,
//                               mixed_precision_step(*opt, &scaler, {.max_norm = 1.0f}));
//     COLOSSAL_RETURN_IF_ERROR(opt->zero_grad());
//     metrics["grad_norm"] = r.grad_norm;  // r.skipped on overflow
//   }
//
// The sequence, with s = scaler->scale() read first (the scale the loss was
// multiplied by) and g the optimizer's gradients (holding s times the true ones):
//   1. norm = ||g|| / s over every gradient (nn/optim/grad_clip.h); overflow =
//      any element inf/NaN (or the norm overflowing);
//   2. scaler->update(overflow);
//   3. overflow: nothing is updated (step counts included), result.skipped;
//      otherwise clip_coef = min(1, max_norm / (norm + 1e-6)) (1 without
//      clipping) and optimizer.step({.grad_scale = s / clip_coef}).
// Unlike Colossal-AI (whose div_scale reads the scale after the update, so the
// step right after a growth divides by twice the scale the loss was multiplied
// by), the division uses s. Gradients are left as they are: zero them after,
// as after any step.
//
// Without a scaler (bf16 or fp32 training) s = 1 and a non-finite gradient
// still skips the step (no update from inf/NaN; torch's clip_grad_norm_ would
// have multiplied them in).
#ifndef COLOSSAL_NN_AMP_MIXED_PRECISION_STEP_H_
#define COLOSSAL_NN_AMP_MIXED_PRECISION_STEP_H_

#include "absl/status/statusor.h"
#include <functional>
#include <vector>

#include "core/device/stream.h"
#include "core/tensor/tensor.h"
#include "nn/amp/loss_scaler.h"
#include "nn/optim/grad_clip.h"
#include "nn/optim/optimizer.h"

namespace colossal::nn {

struct MixedPrecisionStepOptions {
  float max_norm = 0.0f;  // clip gradients to this global L2 norm; 0: no clipping
  // Where other ranks hold other parameters (tensor parallelism): the norm of
  // the whole model's (scaled) gradients from this rank's optimizer.grads(),
  // computed by the caller (its share, summed over the ranks). Null: the norm
  // of optimizer.grads(). The clip coefficient is then min(1, max_norm /
  // (norm / s + 1e-6)), as clip_grad_by_norm computes it.
  std::function<absl::StatusOr<GradNorm>(const std::vector<core::Tensor>& grads,
                                         const core::Stream& stream)>
      global_norm{};
};

struct MixedPrecisionStepResult {
  bool skipped = false;     // overflow: nothing was updated
  float grad_norm = 0.0f;   // the true (unscaled) pre-clip norm; inf/NaN on overflow
  float loss_scale = 1.0f;  // s, the scale the gradients were divided by
  float clip_coef = 1.0f;
};

// One step of `optimizer` (its gradients, on its stream). `scaler` may be null.
// Errors: max_norm negative or not finite; the optimizer's and grad_norm's.
absl::StatusOr<MixedPrecisionStepResult> mixed_precision_step(
    Optimizer& optimizer, DynamicLossScaler* scaler, const MixedPrecisionStepOptions& options = {});

}  // namespace colossal::nn

#endif  // COLOSSAL_NN_AMP_MIXED_PRECISION_STEP_H_
