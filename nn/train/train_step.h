// colossal::nn — gradient accumulation and one training step of a language
// model: N micro-batches, each loss scaled by 1/N, gradients accumulated (+=)
// across them, then one optimizer step with optional clipping (by value, by
// global norm) and fp16 loss scaling.
//
//   std::vector<MicroBatch> mbs = {{tokens0, targets0}, {tokens1, targets1}};  // [b, T] int32 each
//   COLOSSAL_ASSIGN_OR_RETURN(TrainStepResult r,
//       train_step(ctx, *model, *opt, config.vocab_size, mbs, {.max_norm = 1.0f}));
//   metrics["loss"] = r.loss; metrics["grad_norm"] = r.step.grad_norm;
// (the same step is tested against one batch of 2b rows in train_step_test.cc)
//
// Accumulation (accumulate_gradients): for each micro-batch i of N, in order,
//   logits = model.forward(tokens_i)
//   ce = cross_entropy(logits, targets_i, v_real, {.dloss = loss_scale / N})
//   model.backward(dlogits)      // parameter gradients += (loss_scale / N) dL_i/dw
// one micro-batch at a time (its activations are freed before the next
// forward). The gradients are not zeroed first. Since each L_i is a mean over
// its counted rows, sum_i L_i / N is the mean loss of the concatenated batch
// when every micro-batch counts the same number of rows (same shape and no
// ignore_index targets, or equally many); the accumulated gradients are then
// those of the concatenated batch up to float rounding (the summation order
// differs: one GEMM over all rows versus N partial GEMMs added with +=). The
// model must be a Module mapping int32 tokens [b, T] to logits [b, T, V]
// (GPT2), with the optimizer's gradients being its gradient views
// (optimizer_params(model.store().parameters(), ...)).
//
// train_step: optimizer.zero_grad(); accumulate_gradients with loss_scale =
// scaler->scale() (1 without a scaler); clip_grad_by_value when clip_value > 0;
// then mixed_precision_step (nn/amp/mixed_precision_step.h: global norm and
// overflow check, scaler update, skip or step with unscaling and clipping by
// norm folded in). The gradients are left as they are after the step (for
// inspection; the next train_step zeroes them). Clipping by value runs before
// the norm, so the reported norm is that of the clamped gradients.
#ifndef COLOSSAL_NN_TRAIN_TRAIN_STEP_H_
#define COLOSSAL_NN_TRAIN_TRAIN_STEP_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/context/context.h"
#include "core/tensor/tensor.h"
#include "nn/amp/loss_scaler.h"
#include "nn/amp/mixed_precision_step.h"
#include "nn/layers/documents.h"
#include "nn/module/module.h"
#include "nn/optim/optimizer.h"

namespace colossal::nn {

struct MicroBatch {
  core::Tensor tokens;   // int32 [b, T] on the context's device
  core::Tensor targets;  // int32 [b, T]; ignore_index rows are not counted
  // Packed documents to attend within (CausalLM::set_documents); null: none.
  std::shared_ptr<const Documents> documents;
};

struct AccumulateOptions {
  // Multiplies every dloss (the fp16 loss scale); positive and finite.
  float loss_scale = 1.0f;
  int32_t ignore_index = -100;
};

struct AccumulateResult {
  float loss = 0.0f;  // (1/N) sum of the micro-batches' mean losses, unscaled
  int64_t micro_batches = 0;
};

// Runs the N micro-batches as described above, accumulating into the model's
// gradients. Errors: no micro-batches, a bad loss_scale (InvalidArgument);
// the model's and cross_entropy's, prefixed with the micro-batch index.
absl::StatusOr<AccumulateResult> accumulate_gradients(core::Context& ctx, Module& model,
                                                      int64_t v_real,
                                                      absl::Span<const MicroBatch> micro_batches,
                                                      const AccumulateOptions& options = {});

struct TrainStepOptions {
  float max_norm = 0.0f;    // clip by global L2 norm; 0: no clipping
  float clip_value = 0.0f;  // clamp every gradient to [-clip_value, clip_value]; 0: off
  // fp16 dynamic loss scaling; null for fp32/bf16. Not with clip_value (a
  // clamp would hide overflows, and the value would have to be scaled).
  DynamicLossScaler* scaler = nullptr;
  int32_t ignore_index = -100;
};

struct TrainStepResult {
  float loss = 0.0f;              // accumulate_gradients' loss
  MixedPrecisionStepResult step;  // grad_norm, clip_coef, skipped, loss_scale
};

// One optimizer step over N micro-batches (see the file comment). Errors:
// clip_value negative or not finite, clip_value with a scaler
// (InvalidArgument); accumulate_gradients', clip_grad_by_value's and
// mixed_precision_step's.
absl::StatusOr<TrainStepResult> train_step(core::Context& ctx, Module& model, Optimizer& optimizer,
                                           int64_t v_real,
                                           absl::Span<const MicroBatch> micro_batches,
                                           const TrainStepOptions& options = {});

}  // namespace colossal::nn

#endif  // COLOSSAL_NN_TRAIN_TRAIN_STEP_H_
