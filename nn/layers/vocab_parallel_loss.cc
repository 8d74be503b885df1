#include "nn/layers/vocab_parallel_loss.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/status/status.h"
#include "kernels/loss/loss.h"
#include "nn/layers/tensor_util.h"

namespace colossal::nn {
absl::StatusOr<CrossEntropyResult> vocab_parallel_cross_entropy(
    core::Context& ctx, const TensorParallel& tp, const core::Tensor& logits,
    const core::Tensor& targets, int64_t v_real, const CrossEntropyOptions& options) {
  COLOSSAL_RETURN_IF_ERROR(require_device(ctx, logits, "logits"));
  COLOSSAL_RETURN_IF_ERROR(require_device(ctx, targets, "targets"));
  COLOSSAL_RETURN_IF_ERROR(require_dtype(targets, core::DType::kI32, "targets"));
  if (logits.rank() < 1 ||
      logits.numel() / std::max<int64_t>(1, logits.dim(-1)) != targets.numel()) {
    return absl::InvalidArgumentError(
        absl::StrCat("logits ", logits.to_string(), " do not fit targets ", targets.to_string()));
  }
  const int64_t v = logits.dim(-1), n = targets.numel(), v_start = tp.rank() * v;
  if (v_real < 1 || v_real > v * tp.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("v_real ", v_real, " is outside [1, ", v * tp.size(), "]"));
  }
  const core::DType dtype = logits.dtype();
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor row_max, empty(ctx, {n}, core::DType::kF32));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor target, empty(ctx, {n}, core::DType::kF32));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor row_sum, empty(ctx, {n}, core::DType::kF32));
  COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
      COLOSSAL_NN_ON_DEVICE(
          ctx,
          kernels::loss::vocab_shard_max_cpu(row_max.data<float>(), target.data<float>(),
                                             logits.raw_data(), targets.data<int32_t>(), n, v,
                                             v_start, v_real, options.ignore_index, dtype),
          kernels::loss::vocab_shard_max_cuda(row_max.data<float>(), target.data<float>(),
                                              logits.raw_data(), targets.data<int32_t>(), n, v,
                                              v_start, v_real, options.ignore_index, dtype,
                                              cuda_stream(ctx))),
      "vocabulary-parallel cross-entropy"));
  COLOSSAL_RETURN_IF_ERROR(all_reduce(ctx, tp, row_max, comm::ReduceOp::kMax, "the rows' maximum"));
  COLOSSAL_RETURN_IF_ERROR(all_reduce(ctx, tp, target, comm::ReduceOp::kSum, "the target logits"));
  COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
      COLOSSAL_NN_ON_DEVICE(ctx,
                            kernels::loss::vocab_shard_sum_exp_cpu(
                                row_sum.data<float>(), logits.raw_data(), row_max.data<float>(), n,
                                v, v_start, v_real, dtype),
                            kernels::loss::vocab_shard_sum_exp_cuda(
                                row_sum.data<float>(), logits.raw_data(), row_max.data<float>(), n,
                                v, v_start, v_real, dtype, cuda_stream(ctx))),
      "vocabulary-parallel cross-entropy"));
  COLOSSAL_RETURN_IF_ERROR(all_reduce(ctx, tp, row_sum, comm::ReduceOp::kSum, "the rows' exp sums"));
  // The loss on the host, in double (one copy of three floats and a target per row).
  const core::Stream& st = ctx.compute_stream();
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor h_max, row_max.to(core::Device::cpu(), st));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor h_sum, row_sum.to(core::Device::cpu(), st));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor h_target, target.to(core::Device::cpu(), st));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor h_ids, targets.to(core::Device::cpu(), st));
  st.synchronize();
  double total = 0.0;
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (h_ids.data<int32_t>()[i] == options.ignore_index) continue;
    total += static_cast<double>(h_max.data<float>()[i]) +
             std::log(static_cast<double>(h_sum.data<float>()[i])) -
             static_cast<double>(h_target.data<float>()[i]);
    ++count;
  }
  CrossEntropyResult result;
  result.loss = count > 0 ? static_cast<float>(total / static_cast<double>(count)) : 0.0f;
  if (!options.gradient) return result;
  if (options.in_place) {
    result.dlogits = logits;  // shares the storage: the kernel writes over the logits
  } else {
    COLOSSAL_ASSIGN_OR_RETURN(result.dlogits, empty(ctx, logits.shape(), dtype));
  }
  const float scale =
      count > 0 ? static_cast<float>(options.dloss / static_cast<double>(count)) : 0.0f;
  COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
      COLOSSAL_NN_ON_DEVICE(ctx,
                            kernels::loss::vocab_shard_backward_cpu(
                                result.dlogits.raw_data(), logits.raw_data(), row_max.data<float>(),
                                row_sum.data<float>(), targets.data<int32_t>(), scale, n, v,
                                v_start, v_real, options.ignore_index, dtype),
                            kernels::loss::vocab_shard_backward_cuda(
                                result.dlogits.raw_data(), logits.raw_data(), row_max.data<float>(),
                                row_sum.data<float>(), targets.data<int32_t>(), scale, n, v,
                                v_start, v_real, options.ignore_index, dtype, cuda_stream(ctx))),
      "vocabulary-parallel cross-entropy backward"));
  return result;
}

}  // namespace colossal::nn
