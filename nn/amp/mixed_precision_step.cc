#include "nn/amp/mixed_precision_step.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status/status.h"
#include "nn/optim/grad_clip.h"

namespace colossal::nn {

absl::StatusOr<MixedPrecisionStepResult> mixed_precision_step(
    Optimizer& optimizer, DynamicLossScaler* scaler, const MixedPrecisionStepOptions& options) {
  if (!std::isfinite(options.max_norm) || options.max_norm < 0.0f) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mixed_precision_step: max_norm must be >= 0 (0: no clipping), got ", options.max_norm));
  }
  MixedPrecisionStepResult r;
  r.loss_scale = scaler != nullptr ? scaler->scale() : 1.0f;
  const std::vector<core::Tensor> grads = optimizer.grads();
  bool finite = true;
  if (options.global_norm) {
    COLOSSAL_ASSIGN_OR_RETURN(GradNorm n, options.global_norm(grads, optimizer.stream()));
    const double norm = static_cast<double>(n.norm) / r.loss_scale;
    r.grad_norm = r.loss_scale == 1.0f ? n.norm : static_cast<float>(norm);
    finite = n.finite && std::isfinite(n.norm);
    if (finite && options.max_norm > 0.0f) {  // as clip_grad_by_norm: in double, eps 1e-6
      const double coef = static_cast<double>(options.max_norm) / (norm + 1e-6);
      r.clip_coef = coef < 1.0 ? static_cast<float>(coef) : 1.0f;
    }
  } else if (options.max_norm > 0.0f) {
    ClipGradNormOptions clip;
    clip.grad_scale = r.loss_scale;
    clip.in_place = false;
    COLOSSAL_ASSIGN_OR_RETURN(ClipResult c,
                              clip_grad_by_norm(grads, options.max_norm, optimizer.stream(), clip));
    r.grad_norm = c.total_norm;
    r.clip_coef = c.clip_coef;
    finite = c.finite;
  } else {
    COLOSSAL_ASSIGN_OR_RETURN(GradNorm n, grad_norm(grads, optimizer.stream()));
    r.grad_norm = r.loss_scale == 1.0f
                      ? n.norm
                      : static_cast<float>(static_cast<double>(n.norm) / r.loss_scale);
    finite = n.finite;
  }
  if (scaler != nullptr) scaler->update(!finite);
  if (!finite) {
    r.skipped = true;
    return r;
  }
  StepOptions step;
  step.grad_scale = r.clip_coef < 1.0f ? r.loss_scale / r.clip_coef : r.loss_scale;
  COLOSSAL_RETURN_IF_ERROR(optimizer.step(step).status());
  return r;
}

}  // namespace colossal::nn
