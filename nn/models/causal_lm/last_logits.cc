#include "nn/models/causal_lm/last_logits.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "comm/process_group/process_group.h"
#include "core/status/status.h"

namespace colossal::nn {

absl::StatusOr<core::Tensor> last_position_logits(core::Context& ctx, const CausalLM& model,
                                                  const LogitsFn& forward,
                                                  const core::Tensor& tokens) {
  if (tokens.rank() != 2 || tokens.dim(0) != 1 || tokens.dim(1) < 1 ||
      tokens.dtype() != core::DType::kI32) {
    return absl::InvalidArgumentError(
        absl::StrCat("last_position_logits: tokens are ", tokens.to_string(), ", not int32 [1, T]"));
  }
  const TensorParallel& tp = model.tensor_parallel();
  // Ranks the positions split over (1: none).
  const int64_t n = tp.all_to_all() ? tp.sequence_size() : tp.splits_sequence() ? tp.size() : 1;
  const int64_t limit = model.max_seq_len() / n * n;  // the longest padded window
  if (limit < 1) {
    return absl::InvalidArgumentError(absl::StrCat("generation: the model's ", model.max_seq_len(),
                                                   " positions do not fill ", n,
                                                   " sequence-parallel ranks"));
  }
  const core::Stream& stream = ctx.compute_stream();
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor given, tokens.to(core::Device::cpu(), stream));
  stream.synchronize();
  const int64_t drop = std::max<int64_t>(0, given.dim(1) - limit);
  const int64_t T = given.dim(1) - drop, padded_T = (T + n - 1) / n * n;
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor host, core::Tensor::empty({1, padded_T}, core::DType::kI32,
                                                                    core::Stream::cpu()));
  int32_t* out = std::copy(given.data<int32_t>() + drop, given.data<int32_t>() + drop + T,
                           host.data<int32_t>());
  std::fill(out, host.data<int32_t>() + padded_T, 0);  // any token: no real position sees it
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor input, host.to(ctx.device(), stream));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor logits, forward(input));
  const int64_t columns = model.padded_vocab_size() / tp.size();
  const int64_t rows = logits.numel() / columns;
  if (rows < 1 || rows * columns != logits.numel()) {
    return absl::InternalError(absl::StrCat("generation: the logits are ", logits.to_string(),
                                            ", not rows of ", columns));
  }
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor flat, logits.reshape({rows, columns}));
  if (!tp.all_to_all()) {
    // Every position's logits on every rank (split_gather's head gathers them).
    return flat.narrow(0, T - 1, 1);
  }
  // all_to_all: each rank holds padded_T / n positions.
  const int64_t owner = (T - 1) / rows;
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor row, core::Tensor::empty({1, columns}, logits.dtype(), stream));
  if (tp.sequence_rank() == owner) {
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor mine, flat.narrow(0, (T - 1) % rows, 1));
    COLOSSAL_RETURN_IF_ERROR(row.copy_from(mine, stream));
  }
  comm::CollectiveOptions o;
  if (stream.is_cuda()) o.stream = stream;
  COLOSSAL_ASSIGN_OR_RETURN(comm::WorkPtr w,
                            tp.sequence_group->broadcast(row, static_cast<int>(owner), o));
  COLOSSAL_RETURN_IF_ERROR(
      core::annotate(w->wait(), "generation: sharing the last position's logits"));
  return row;
}

}  // namespace colossal::nn
