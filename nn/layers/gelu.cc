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

absl::StatusOr<core::Tensor> gelu_forward(core::Context& ctx, const core::Tensor& x) {
  COLOSSAL_RETURN_IF_ERROR(require_device(ctx, x, "input"));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor y, empty(ctx, x.shape(), x.dtype()));
  COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
      COLOSSAL_NN_ON_DEVICE(ctx,
                            kernels::activation::gelu_forward_cpu(y.raw_data(), x.raw_data(),
                                                                  x.numel(), x.dtype()),
                            kernels::activation::gelu_forward_cuda(y.raw_data(), x.raw_data(),
                                                                   x.numel(), x.dtype(),
                                                                   cuda_stream(ctx))),
      "gelu forward"));
  return y;
}

absl::StatusOr<core::Tensor> gelu_backward(core::Context& ctx, const core::Tensor& dy,
                                           const core::Tensor& x) {
  COLOSSAL_RETURN_IF_ERROR(require_device(ctx, dy, "grad_output"));
  if (dy.shape() != x.shape() || dy.dtype() != x.dtype()) {
    return absl::InvalidArgumentError("grad_output does not match the forward's input");
  }
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dx, empty(ctx, x.shape(), x.dtype()));
  COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
      COLOSSAL_NN_ON_DEVICE(ctx,
                            kernels::activation::gelu_backward_cpu(dx.raw_data(), dy.raw_data(),
                                                                   x.raw_data(), x.numel(),
                                                                   x.dtype()),
                            kernels::activation::gelu_backward_cuda(dx.raw_data(), dy.raw_data(),
                                                                    x.raw_data(), x.numel(),
                                                                    x.dtype(), cuda_stream(ctx))),
      "gelu backward"));
  return dx;
}

absl::StatusOr<ForwardResult> Gelu::forward_impl(core::Context& ctx, const core::Tensor& input) {
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor y, gelu_forward(ctx, input));
  auto saved = std::make_unique<GeluSaved>();
  saved->input = input;
  return ForwardResult{y, std::move(saved)};
}

absl::StatusOr<core::Tensor> Gelu::backward_impl(core::Context& ctx, Saved& saved,
                                                 const core::Tensor& grad_output) {
  COLOSSAL_ASSIGN_OR_RETURN(GeluSaved * s, saved_as<GeluSaved>(saved));
  return gelu_backward(ctx, grad_output, s->input);
}

}  // namespace colossal::nn
