#include "nn/layers/cross_entropy.h"

#include "absl/strings/str_cat.h"
#include "core/status/status.h"
#include "kernels/loss/loss.h"
#include "nn/layers/tensor_util.h"

namespace colossal::nn {

absl::StatusOr<CrossEntropyResult> cross_entropy(core::Context& ctx, const core::Tensor& logits,
                                                 const core::Tensor& targets, int64_t v_real,
                                                 const CrossEntropyOptions& options) {
  COLOSSAL_RETURN_IF_ERROR(require_device(ctx, logits, "logits"));
  COLOSSAL_RETURN_IF_ERROR(require_device(ctx, targets, "targets"));
  COLOSSAL_RETURN_IF_ERROR(require_dtype(targets, core::DType::kI32, "targets"));
  if (logits.rank() < 1 || logits.numel() / std::max<int64_t>(1, logits.dim(-1)) !=
                               targets.numel()) {
    return absl::InvalidArgumentError(absl::StrCat("logits ", logits.to_string(),
                                                   " do not fit targets ", targets.to_string()));
  }
  const int64_t V = logits.dim(-1), n = targets.numel();
  if (v_real < 1 || v_real > V) {
    return absl::InvalidArgumentError(absl::StrCat("v_real ", v_real, " is outside [1, ", V, "]"));
  }
  CrossEntropyResult result;
  if (options.gradient) {
    if (options.in_place) {
      result.dlogits = logits;  // shares the storage: the kernel writes over the logits
    } else {
      COLOSSAL_ASSIGN_OR_RETURN(result.dlogits, empty(ctx, logits.shape(), logits.dtype()));
    }
  }
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor row_losses, empty(ctx, {n}, core::DType::kF32));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor loss, empty(ctx, {1}, core::DType::kF32));
  kernels::loss::CrossEntropyOptions opts;
  opts.reduction = kernels::loss::Reduction::kMean;
  opts.ignore_index = options.ignore_index;
  if (!options.gradient) {
    COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
        COLOSSAL_NN_ON_DEVICE(
            ctx,
            kernels::loss::cross_entropy_forward_cpu(loss.data<float>(), row_losses.data<float>(),
                                                     nullptr, logits.raw_data(),
                                                     targets.data<int32_t>(), n, V, v_real,
                                                     logits.dtype(), opts),
            kernels::loss::cross_entropy_forward_cuda(loss.data<float>(), row_losses.data<float>(),
                                                      nullptr, logits.raw_data(),
                                                      targets.data<int32_t>(), n, V, v_real,
                                                      logits.dtype(), opts, cuda_stream(ctx))),
        "cross entropy"));
  } else {
    COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
        COLOSSAL_NN_ON_DEVICE(
            ctx,
            kernels::loss::cross_entropy_fused_cpu(loss.data<float>(), row_losses.data<float>(),
                                                   nullptr, result.dlogits.raw_data(),
                                                   logits.raw_data(), targets.data<int32_t>(),
                                                   options.dloss, n, V, v_real, logits.dtype(),
                                                   opts),
            kernels::loss::cross_entropy_fused_cuda(loss.data<float>(), row_losses.data<float>(),
                                                    nullptr, result.dlogits.raw_data(),
                                                    logits.raw_data(), targets.data<int32_t>(),
                                                    options.dloss, n, V, v_real, logits.dtype(),
                                                    opts, cuda_stream(ctx))),
        "cross entropy"));
  }
  // On CUDA this copy waits for the result (pageable host memory).
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor host_loss,
                            loss.to(core::Device::cpu(), ctx.compute_stream()));
  result.loss = host_loss.data<float>()[0];
  return result;
}

}  // namespace colossal::nn
