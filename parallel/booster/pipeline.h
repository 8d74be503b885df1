// colossal::parallel — a step's micro-batches through pipeline stages:
// Colossal-AI's booster.execute_pipeline with the 1F1B schedule
// (OneForwardOneBackwardSchedule; Megatron-LM's non-interleaved schedule) or,
// when the plugin's stages hold several model chunks (Plugin::Pipeline::
// chunks), the interleaved one (InterleavedSchedule; described in
// pipeline_interleaved.cc): a micro-batch goes round the stages once per
// chunk, which shrinks the pipeline bubble by the chunk count. It takes a
// multiple of the stage count of micro-batches.
//
// Every rank of a pipeline group calls it with the same micro-batches (each
// stage reads the batch: the first its tokens, the last its targets, every
// one its shape, so no shapes are exchanged). Stage s of P runs
// min(P - s - 1, M) forwards, then alternates one forward and one backward,
// then the remaining backwards; activations go forward and gradients back
// over point-to-point sends of [b, T, hidden_size] (batched where a stage
// sends and receives at once, so no pair of stages waits on each other). At
// most P micro-batches are in flight per stage (the module contract's
// per-call saved state). The last stage computes the loss (model.loss, mean
// cross-entropy scaled by loss_scale / M) and starts each backward. Gradient
// reduction (the plugin's) runs with the last micro-batch's backward only:
// the others run under no_sync.
//
//   COLOSSAL_ASSIGN_OR_RETURN(PipelineStepResult r,
//                             execute_pipeline(ctx, booster, *model, micro_batches));
//   COLOSSAL_ASSIGN_OR_RETURN(auto step, booster.step({.max_norm = 1.0f}));
//   // r.loss: the mean loss over the micro-batches, on every stage
#ifndef COLOSSAL_PARALLEL_BOOSTER_PIPELINE_H_
#define COLOSSAL_PARALLEL_BOOSTER_PIPELINE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/context/context.h"
#include "nn/models/causal_lm/causal_lm.h"
#include "nn/train/train_step.h"
#include "parallel/booster/booster.h"

namespace colossal::parallel {

struct PipelineStepOptions {
  float loss_scale = 1.0f;  // fp16: the loss scaler's scale
  int32_t ignore_index = -100;
  // Each micro-batch's share of the step's loss (its mean loss's gradient is
  // scaled by it; finite, >= 0, one per micro-batch). Empty: 1 / M each.
  // Token-weighted steps give counted_i / (the step's counted targets), so
  // the step's loss is the mean over all of them (execute_pipeline only).
  std::vector<double> weights;
};

struct PipelineStepResult {
  float loss = 0.0f;  // sum of weights[i] * micro-batch i's mean loss; their mean without weights
                      // (every stage gets it)
  int64_t micro_batches = 0;
};

// Errors: a plugin without pipeline stages, no micro-batches, a model not
// split as the plugin's stages (FailedPrecondition / InvalidArgument); for
// the interleaved schedule a number of micro-batches not a multiple of the
// stages (InvalidArgument); the model's, the loss's, the plugin's and the
// sends' (annotated with the micro-batch, stage and chunk).
absl::StatusOr<PipelineStepResult> execute_pipeline(core::Context& ctx, Booster& booster,
                                                    nn::CausalLM& model,
                                                    absl::Span<const nn::MicroBatch> micro_batches,
                                                    const PipelineStepOptions& options = {});

// Evaluation through the stages: each micro-batch's forward only (no saved
// state kept, no gradients), its mean loss on the last stage, the mean over
// the micro-batches given to every stage. Same errors.
absl::StatusOr<float> evaluate_pipeline(core::Context& ctx, Booster& booster, nn::CausalLM& model,
                                        absl::Span<const nn::MicroBatch> micro_batches,
                                        const PipelineStepOptions& options = {});

// Generation through the stages (every stage calls it): `tokens` (int32
// [B, T] on ctx's device) forward through every stage and model chunk, no
// saved state kept; returns the last stage's logits, as the whole model's
// forward gives them on this rank ([B, T, padded_vocab / tp]; [B, T / n, ...]
// under all_to_all over n ranks), on every stage; with `last_position_only`
// only each sequence's last row of them ([B, 1, ...]: what sampling the next
// token reads, without sending the rest). Same errors as evaluate_pipeline.
absl::StatusOr<core::Tensor> pipeline_logits(core::Context& ctx, Booster& booster,
                                             nn::CausalLM& model, const core::Tensor& tokens,
                                             bool last_position_only = false);

}  // namespace colossal::parallel

#endif  // COLOSSAL_PARALLEL_BOOSTER_PIPELINE_H_
