#include "nn/train/train_step.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status/status.h"
#include "nn/layers/cross_entropy.h"
#include "nn/optim/grad_clip.h"

namespace colossal::nn {

absl::StatusOr<AccumulateResult> accumulate_gradients(core::Context& ctx, Module& model,
                                                      int64_t v_real,
                                                      absl::Span<const MicroBatch> micro_batches,
                                                      const AccumulateOptions& options) {
  if (micro_batches.empty()) {
    return absl::InvalidArgumentError("accumulate_gradients: no micro-batches");
  }
  if (!std::isfinite(options.loss_scale) || options.loss_scale <= 0.0f) {
    return absl::InvalidArgumentError(absl::StrCat(
        "accumulate_gradients: loss_scale must be positive and finite, got ", options.loss_scale));
  }
  const int64_t n = static_cast<int64_t>(micro_batches.size());
  CrossEntropyOptions ce_options;
  ce_options.dloss = static_cast<float>(static_cast<double>(options.loss_scale) / n);
  ce_options.ignore_index = options.ignore_index;
  ce_options.in_place = true;  // the logits are not needed after the loss
  double loss_sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const std::string where = absl::StrCat("micro-batch ", i, " of ", n);
    const MicroBatch& mb = micro_batches[i];
    absl::StatusOr<ForwardResult> out = model.forward(ctx, mb.tokens);
    if (!out.ok()) return core::annotate(out.status(), where);
    absl::StatusOr<CrossEntropyResult> ce =
        cross_entropy(ctx, out->output, mb.targets, v_real, ce_options);
    if (!ce.ok()) return core::annotate(ce.status(), where);
    loss_sum += ce->loss;
    COLOSSAL_RETURN_IF_ERROR(
        core::annotate(model.backward(ctx, *out->saved, ce->dlogits).status(), where));
  }
  AccumulateResult r;
  r.loss = static_cast<float>(loss_sum / static_cast<double>(n));
  r.micro_batches = n;
  return r;
}

absl::StatusOr<TrainStepResult> train_step(core::Context& ctx, Module& model, Optimizer& optimizer,
                                           int64_t v_real,
                                           absl::Span<const MicroBatch> micro_batches,
                                           const TrainStepOptions& options) {
  if (!std::isfinite(options.clip_value) || options.clip_value < 0.0f) {
    return absl::InvalidArgumentError(absl::StrCat(
        "train_step: clip_value must be >= 0 (0: off), got ", options.clip_value));
  }
  if (options.clip_value > 0.0f && options.scaler != nullptr) {
    return absl::InvalidArgumentError(
        "train_step: clip_value with a loss scaler is not supported (use max_norm)");
  }
  COLOSSAL_RETURN_IF_ERROR(optimizer.zero_grad());
  AccumulateOptions acc;
  acc.loss_scale = options.scaler != nullptr ? options.scaler->scale() : 1.0f;
  acc.ignore_index = options.ignore_index;
  TrainStepResult r;
  COLOSSAL_ASSIGN_OR_RETURN(AccumulateResult a,
                            accumulate_gradients(ctx, model, v_real, micro_batches, acc));
  r.loss = a.loss;
  if (options.clip_value > 0.0f) {
    const std::vector<core::Tensor> grads = optimizer.grads();
    COLOSSAL_RETURN_IF_ERROR(clip_grad_by_value(grads, options.clip_value, optimizer.stream()));
  }
  MixedPrecisionStepOptions step;
  step.max_norm = options.max_norm;
  COLOSSAL_ASSIGN_OR_RETURN(r.step, mixed_precision_step(optimizer, options.scaler, step));
  return r;
}

}  // namespace colossal::nn
