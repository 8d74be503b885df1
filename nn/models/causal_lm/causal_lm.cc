#include "nn/models/causal_lm/causal_lm.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status/status.h"

namespace colossal::nn {

absl::StatusOr<PipelineStage> pipeline_stage(int64_t layers, int count, int index) {
  if (count < 1 || index < 0 || index >= count) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline stage ", index, " of ", count, " does not exist"));
  }
  if (layers < count) {
    return absl::InvalidArgumentError(absl::StrCat("the model's ", layers,
                                                   " layers do not fill ", count,
                                                   " pipeline stages (pp_size)"));
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
  if (stage.count < 1 || stage.index < 0 || stage.index >= stage.count ||
      stage.first_layer < 0 || end > layers || stage.first_layer >= end) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " is ", layers, "; pipeline stage ", stage.index, " of ", stage.count,
        " asks for layers [", stage.first_layer, ", ", end, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<CrossEntropyResult> CausalLM::loss(core::Context& ctx, const core::Tensor& logits,
                                                  const core::Tensor& targets,
                                                  const CrossEntropyOptions& options) const {
  const TensorParallel& tp = tensor_parallel();
  if (!tp.splits_sequence()) return cross_entropy(ctx, logits, targets, vocab_size(), options);
  // This rank's positions; how many count here and over the group.
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor mine, sequence_chunk(ctx, tp, targets));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor host, mine.to(core::Device::cpu(), ctx.compute_stream()));
  ctx.compute_stream().synchronize();
  double counts[2] = {0, 0};  // [counted positions, their loss sum]
  for (int64_t i = 0; i < host.numel(); ++i) counts[0] += host.data<int32_t>()[i] != options.ignore_index;
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor n, core::Tensor::empty({1}, core::DType::kF64,
                                                                core::Stream::cpu()));
  n.data<double>()[0] = counts[0];
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor total, sum_on_host(ctx, tp, n));
  const double all = total.data<double>()[0];
  CrossEntropyOptions o = options;
  if (all > 0) o.dloss = static_cast<float>(options.dloss * counts[0] / all);
  COLOSSAL_ASSIGN_OR_RETURN(CrossEntropyResult r, cross_entropy(ctx, logits, mine, vocab_size(), o));
  n.data<double>()[0] = static_cast<double>(r.loss) * counts[0];
  COLOSSAL_ASSIGN_OR_RETURN(total, sum_on_host(ctx, tp, n));
  r.loss = all > 0 ? static_cast<float>(total.data<double>()[0] / all) : 0.0f;
  return r;
}

}  // namespace colossal::nn
