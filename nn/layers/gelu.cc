#include "nn/layers/gelu.h"

#include "core/status/status.h"
#include "kernels/activation/activation.h"
#include "nn/layers/tensor_util.h"

namespace colossal::nn {
namespace {

struct GeluSaved : Saved {
  SavedStats stats() const override { return saved_stats({input}); }
  core::Tensor input;
};

}  // namespace

absl::StatusOr<ForwardResult> Gelu::forward_impl(core::Context& ctx, const core::Tensor& input) {
  COLOSSAL_RETURN_IF_ERROR(require_device(ctx, input, "input"));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor y, empty(ctx, input.shape(), input.dtype()));
  COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
      COLOSSAL_NN_ON_DEVICE(ctx,
                            kernels::activation::gelu_forward_cpu(y.raw_data(), input.raw_data(),
                                                                  input.numel(), input.dtype()),
                            kernels::activation::gelu_forward_cuda(y.raw_data(), input.raw_data(),
                                                                   input.numel(), input.dtype(),
                                                                   cuda_stream(ctx))),
      "gelu forward"));
  auto saved = std::make_unique<GeluSaved>();
  saved->input = input;
  return ForwardResult{y, std::move(saved)};
}

absl::StatusOr<core::Tensor> Gelu::backward_impl(core::Context& ctx, Saved& saved,
                                                 const core::Tensor& grad_output) {
  COLOSSAL_RETURN_IF_ERROR(require_device(ctx, grad_output, "grad_output"));
  COLOSSAL_ASSIGN_OR_RETURN(GeluSaved * s, saved_as<GeluSaved>(saved));
  if (grad_output.shape() != s->input.shape() || grad_output.dtype() != s->input.dtype()) {
    return absl::InvalidArgumentError("grad_output does not match the forward's input");
  }
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dx, empty(ctx, s->input.shape(), s->input.dtype()));
  COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
      COLOSSAL_NN_ON_DEVICE(
          ctx,
          kernels::activation::gelu_backward_cpu(dx.raw_data(), grad_output.raw_data(),
                                                 s->input.raw_data(), s->input.numel(),
                                                 s->input.dtype()),
          kernels::activation::gelu_backward_cuda(dx.raw_data(), grad_output.raw_data(),
                                                  s->input.raw_data(), s->input.numel(),
                                                  s->input.dtype(), cuda_stream(ctx))),
      "gelu backward"));
  return dx;
}

}  // namespace colossal::nn
