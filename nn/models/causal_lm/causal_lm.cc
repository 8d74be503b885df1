#include "nn/models/causal_lm/causal_lm.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status/status.h"
#include "nn/layers/vocab_parallel_loss.h"

namespace colossal::nn {

absl::StatusOr<PipelineStage> pipeline_stage(int64_t layers, int count, int index) {
  if (count < 1 || index < 0 || index >= count) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline stage ", index, " of ", count, " does not exist"));
  }
  if (layers < count) {
    return absl::InvalidArgumentError(absl::StrCat("the model's ", layers, " layers do not fill ",
                                                   count, " pipeline stages (pp_size)"));
  }
  std::vector<int64_t> per(count, layers / count);
  const int64_t remainder = layers % count;
  const int64_t start = count / 2 - remainder / 2;
  for (int64_t i = start; i < start + remainder; ++i) ++per[i];
  PipelineStage s;
  s.index = index;
  s.count = count;
  for (int i = 0; i < index; ++i) s.first_layer += per[i];
  s.end_layer = s.first_layer + per[index];
  return s;
}

absl::Status check_stage(const PipelineStage& stage, int64_t layers, absl::string_view what) {
  const int64_t end = stage.end_layer < 0 ? layers : stage.end_layer;
  if (stage.count < 1 || stage.index < 0 || stage.index >= stage.count || stage.first_layer < 0 ||
      end > layers || stage.first_layer >= end) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is ", layers, "; pipeline stage ", stage.index, " of ", stage.count,
                     " asks for layers [", stage.first_layer, ", ", end, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<CrossEntropyResult> CausalLM::loss(core::Context& ctx, const core::Tensor& logits,
                                                  const core::Tensor& targets,
                                                  const CrossEntropyOptions& options) const {
  const TensorParallel& tp = tensor_parallel();
  // Split models' heads give this rank's vocabulary columns of every position.
  if (tp.enabled())
    return vocab_parallel_cross_entropy(ctx, tp, logits, targets, vocab_size(), options);
  return cross_entropy(ctx, logits, targets, vocab_size(), options);
}

}  // namespace colossal::nn
