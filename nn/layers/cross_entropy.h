// colossal::nn — the loss head: fused softmax cross-entropy (kernels/loss).
//
// Mean loss over the rows whose target is not ignore_index, and its gradient
// dlogits = dloss * d(mean loss)/d(logits) in one pass. logits [..., V] with
// `v_real` <= V real classes (columns >= v_real are vocabulary padding: no
// part in the softmax, dlogits 0 there); targets int32 of logits' shape
// without the last dimension. The loss is computed in float64 on the CPU and
// returned rounded to float32 (the kernel's output type). On CUDA the call
// synchronises to bring the loss to the host, and a target outside [0, v_real)
// gives a NaN loss instead of an error (kernels/loss).
//
//   COLOSSAL_ASSIGN_OR_RETURN(CrossEntropyResult ce,
//                             cross_entropy(ctx, logits, targets, /*v_real=*/50257, {}));
//   ... model.backward(ctx, *saved, ce.dlogits) ...
#ifndef COLOSSAL_NN_LAYERS_CROSS_ENTROPY_H_
#define COLOSSAL_NN_LAYERS_CROSS_ENTROPY_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "core/context/context.h"
#include "core/tensor/tensor.h"

namespace colossal::nn {

struct CrossEntropyOptions {
  // The upstream gradient of the loss (1, or a loss scale).
  float dloss = 1.0f;
  int32_t ignore_index = -100;
  // false: the loss alone (evaluation); dlogits stays empty.
  bool gradient = true;
  // true: dlogits is written over the logits' own memory (it shares their
  // storage), saving a logits-sized buffer when the caller needs only the
  // gradient afterwards (a training step). The logits then hold dlogits.
  bool in_place = false;
};

struct CrossEntropyResult {
  float loss = 0;       // mean over counted rows (0 when every row is ignored)
  core::Tensor dlogits;  // logits' shape and dtype; empty when !gradient
};

// Errors: shapes that do not fit, a target outside [0, v_real) that is not
// ignore_index, v_real outside [1, V].
absl::StatusOr<CrossEntropyResult> cross_entropy(core::Context& ctx, const core::Tensor& logits,
                                                 const core::Tensor& targets, int64_t v_real,
                                                 const CrossEntropyOptions& options);

}  // namespace colossal::nn

#endif  // COLOSSAL_NN_LAYERS_CROSS_ENTROPY_H_
