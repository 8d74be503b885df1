// colossal::nn — the last position's logits for generation when a model's
// activations split the sequence over ranks.
//
// Under sequence parallelism (TensorParallel::chunks_sequence: split_gather
// over the tensor-parallel ranks, or all_to_all over the sequence group) a
// forward takes a multiple of the ranks' count of positions, and under
// all_to_all each rank ends with its own positions' logits. Generation grows
// the sequence one token at a time, so it pads: the tokens go right-padded to
// a multiple of the ranks (the oldest dropped where that would pass the
// model's max_seq_len); causal attention keeps the padding out of the real
// positions, and the last real position's logits are returned on every rank
// (all_to_all: the rank holding it broadcasts them over the sequence group).
#ifndef COLOSSAL_NN_MODELS_CAUSAL_LM_LAST_LOGITS_H_
#define COLOSSAL_NN_MODELS_CAUSAL_LM_LAST_LOGITS_H_

#include <functional>

#include "absl/status/statusor.h"
#include "core/context/context.h"
#include "core/tensor/tensor.h"
#include "nn/models/causal_lm/causal_lm.h"

namespace colossal::nn {

// A forward of the model: int32 tokens [1, T] on ctx's device -> logits
// (the model's, or its booster's with the plugin's hooks).
using LogitsFn = std::function<absl::StatusOr<core::Tensor>(const core::Tensor& tokens)>;

// The logits of the last of `tokens` (int32 [1, T], T >= 1, any device) as
// [1, columns] in the model's dtype on ctx's device: every vocabulary column
// of this tensor-parallel rank (padded_vocab / tp). Without a split sequence,
// `forward` of the last max_seq_len tokens as they are. Every rank of the
// model's groups calls it. Errors: forward's; a model whose max_seq_len does
// not hold one position per rank (InvalidArgument).
absl::StatusOr<core::Tensor> last_position_logits(core::Context& ctx, const CausalLM& model,
                                                  const LogitsFn& forward,
                                                  const core::Tensor& tokens);

}  // namespace colossal::nn

#endif  // COLOSSAL_NN_MODELS_CAUSAL_LM_LAST_LOGITS_H_
