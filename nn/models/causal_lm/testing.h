// colossal::nn — helpers for the model families' tests (testonly): token
// tensors, and training one batch to overfit it with a plain Adam written out
// over the flat float32 buffers (so a model test needs no optimizer).
//
//   core::Tensor tokens = tokens_of({3, 1, 4, 1}, /*B=*/1, /*T=*/4);
//   OverfitResult r = overfit_one_batch(ctx, *model, tokens, targets, {.steps = 300});
//   EXPECT_LT(r.last_loss, 0.1f);
#ifndef COLOSSAL_NN_MODELS_CAUSAL_LM_TESTING_H_
#define COLOSSAL_NN_MODELS_CAUSAL_LM_TESTING_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "core/context/context.h"
#include "core/tensor/tensor.h"
#include "nn/models/causal_lm/causal_lm.h"

namespace colossal::nn {

// int32 [B, T] on the CPU holding `ids` (B * T of them).
core::Tensor tokens_of(const std::vector<int32_t>& ids, int64_t B, int64_t T);

struct OverfitOptions {
  int steps = 300;
  float lr = 1e-2f;
  float stop_below = 0.05f;  // stops early once the loss is below this
};
struct OverfitResult {
  float first_loss = 0;
  float last_loss = 0;
};
// Adam (betas 0.9, 0.999, eps 1e-8, no weight decay) on the float32 CPU model
// `model` until the cross-entropy of `targets` (real vocabulary only) drops
// below options.stop_below or options.steps have run.
absl::StatusOr<OverfitResult> overfit_one_batch(core::Context& ctx, CausalLM& model,
                                                const core::Tensor& tokens,
                                                const core::Tensor& targets,
                                                const OverfitOptions& options = {});

}  // namespace colossal::nn

#endif  // COLOSSAL_NN_MODELS_CAUSAL_LM_TESTING_H_
