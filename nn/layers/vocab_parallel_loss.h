// colossal::nn — cross-entropy over logits split along the vocabulary
// (Megatron's / Colossal-AI's DistCrossEntropy): each tensor-parallel rank
// holds columns [rank V/size, (rank+1) V/size) of the logits, which are never
// gathered. Three sums over the group (kernels/loss vocab_shard_*): the rows'
// maximum, each row's target logit (from the rank that holds it), and the
// rows' sum of exp(logit - max); then every rank knows
//   loss_i = max_i + log(sum_i) - logit_i[target_i]
// and writes its columns' gradient dloss / count * (softmax - onehot). The
// result is cross_entropy's (nn/layers/cross_entropy.h) for the gathered
// logits: the mean over the rows whose target is not ignore_index, the same
// on every rank. Columns past v_real (the whole vocabulary's real size) are
// padding.
#ifndef COLOSSAL_NN_LAYERS_VOCAB_PARALLEL_LOSS_H_
#define COLOSSAL_NN_LAYERS_VOCAB_PARALLEL_LOSS_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "core/context/context.h"
#include "core/tensor/tensor.h"
#include "nn/layers/cross_entropy.h"
#include "nn/layers/tensor_parallel.h"

namespace colossal::nn {

// logits [..., V / tp.size()] (this rank's columns), int32 targets of the
// rows (whole-vocabulary ids). Errors: shapes that do not fit; on the CPU a
// target outside [0, v_real) that is not ignore_index; a collective's.
absl::StatusOr<CrossEntropyResult> vocab_parallel_cross_entropy(core::Context& ctx,
                                                                const TensorParallel& tp,
                                                                const core::Tensor& logits,
                                                                const core::Tensor& targets,
                                                                int64_t v_real,
                                                                const CrossEntropyOptions& options);

}  // namespace colossal::nn

#endif  // COLOSSAL_NN_LAYERS_VOCAB_PARALLEL_LOSS_H_
