// colossal::nn — gradient clipping: by global L2 norm and by value.
//
// clip_grad_by_norm is torch.nn.utils.clip_grad_norm_ / Colossal-AI's
// clip_grad_by_norm over kernels/multi_tensor: the global L2 norm of every
// gradient (float32 partial sums in fixed order on CUDA, double on the CPU:
// deterministic), then, when clip_coef = min(1, max_norm / (norm + 1e-6)) is
// below 1, every gradient multiplied by it. It returns the pre-clip norm.
//
//   COLOSSAL_ASSIGN_OR_RETURN(ClipResult c, clip_grad_by_norm(opt->grads(), 1.0f, stream));
//   metrics["grad_norm"] = c.total_norm;
//
// With a loss scale (fp16), the gradients hold loss_scale * g: pass the scale
// as grad_scale so the norm and coefficient are those of g, and either clip in
// place and step with grad_scale = loss_scale, or (Colossal-AI's way, no extra
// pass over the gradients) leave them and fold the coefficient into the step:
//
//   ClipGradNormOptions o;
//   o.grad_scale = scaler.scale();
//   o.in_place = false;
//   COLOSSAL_ASSIGN_OR_RETURN(ClipResult c, clip_grad_by_norm(grads, 1.0f, stream, o));
//   bool overflow = !c.finite;                 // -> DynamicLossScaler::update
//   if (!overflow) opt->step({.grad_scale = scaler.scale() / c.clip_coef});
//
// Non-finite gradients: when any gradient element is inf or NaN (or the norm
// overflows), the result has finite = false, total_norm = the non-finite norm
// (inf or NaN) and clip_coef = 1, and the gradients are left untouched. torch
// with error_if_nonfinite=False also returns that norm without raising, but
// then multiplies the gradients by a 0 or NaN coefficient; here the caller
// decides, and the expected decision is to skip the step (the loss scaler's
// overflow path, or StepResult-style skipping in a bf16/fp32 loop).
//
// clip_grad_by_value is torch.nn.utils.clip_grad_value_: every gradient
// element clamped to [-clip_value, clip_value] in place (NaN stays NaN).
//
// Gradients may be float32, float16 or bfloat16 tensors on the CPU or on the
// CUDA device of `stream`, mixed freely (one kernel call per device and
// dtype). CUDA work is enqueued on `stream`; clip_grad_by_norm waits for the
// norm (a 8-byte copy to the host), clip_grad_by_value does not wait.
#ifndef COLOSSAL_NN_OPTIM_GRAD_CLIP_H_
#define COLOSSAL_NN_OPTIM_GRAD_CLIP_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/device/stream.h"
#include "core/tensor/tensor.h"

namespace colossal::nn {

struct GradNorm {
  float norm = 0.0f;    // sqrt of the sum of every element's square
  bool finite = true;   // no element was inf/NaN and the norm is finite
};

// The global L2 norm of `grads` (0 for none). Errors (InvalidArgument naming
// the gradient's index): undefined tensors, other dtypes, a CUDA tensor of
// another device than `stream`'s.
absl::StatusOr<GradNorm> grad_norm(absl::Span<const core::Tensor> grads,
                                   const core::Stream& stream);

struct ClipGradNormOptions {
  // The gradients hold grad_scale * g (the loss scale); norm and coefficient
  // are computed for g. Positive and finite.
  float grad_scale = 1.0f;
  // Multiply the gradients by clip_coef when it is below 1. false: only
  // report it (fold 1 / clip_coef into StepOptions::grad_scale).
  bool in_place = true;
};

struct ClipResult {
  float total_norm = 0.0f;  // pre-clip L2 norm of g (unscaled); inf/NaN when not finite
  float clip_coef = 1.0f;   // min(1, max_norm / (total_norm + 1e-6)); 1 when not finite
  bool finite = true;       // see GradNorm
  bool clipped = false;     // the gradients were multiplied by clip_coef
};

// Clips `grads` to a global L2 norm of `max_norm` (only the 2-norm is
// supported). Errors: max_norm not positive and finite, a bad grad_scale,
// and grad_norm's.
absl::StatusOr<ClipResult> clip_grad_by_norm(absl::Span<const core::Tensor> grads, float max_norm,
                                             const core::Stream& stream,
                                             const ClipGradNormOptions& options = {});

// Clamps every element of `grads` to [-clip_value, clip_value]. Errors:
// clip_value negative or not finite, and grad_norm's.
absl::Status clip_grad_by_value(absl::Span<const core::Tensor> grads, float clip_value,
                                const core::Stream& stream);

}  // namespace colossal::nn

#endif  // COLOSSAL_NN_OPTIM_GRAD_CLIP_H_
