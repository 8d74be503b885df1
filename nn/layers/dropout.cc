#include "nn/layers/dropout.h"

#include "absl/strings/str_cat.h"
#include "core/dtype/dtype.h"
#include "core/status/status.h"
#include "kernels/dropout/dropout.h"
#include "nn/layers/tensor_util.h"

namespace colossal::nn {
namespace {

// No tensors: the mask is regenerated from (seed, offset) in backward.
struct DropoutSaved : Saved {
  SavedStats stats() const override { return {}; }
  bool active = false;  // false: the forward was the identity
  core::RngState rng;
  double p = 0.0;
  core::Shape shape;
  core::DType dtype = core::DType::kF32;
};

// out = in * mask / (1 - p) with the mask of (rng.seed, rng.offset).
absl::Status apply(core::Context& ctx, core::Tensor& out, const core::Tensor& in, double p,
                   const core::RngState& rng, const char* what) {
  return core::from_kernel_status(
      COLOSSAL_NN_ON_DEVICE(
          ctx,
          kernels::dropout::dropout_cpu(out.raw_data(), in.raw_data(), p, rng.seed, rng.offset,
                                        in.numel(), in.dtype()),
          kernels::dropout::dropout_cuda(out.raw_data(), in.raw_data(), p, rng.seed, rng.offset,
                                         in.numel(), in.dtype(), cuda_stream(ctx))),
      what);
}

}  // namespace

absl::StatusOr<ForwardResult> Dropout::forward_impl(core::Context& ctx, const core::Tensor& input) {
  if (!(p_ >= 0.0 && p_ < 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("dropout probability is ", p_, "; it must be in [0, 1)"));
  }
  COLOSSAL_RETURN_IF_ERROR(require_device(ctx, input, "input"));
  if (!core::dtype_is_floating(input.dtype())) {
    return absl::InvalidArgumentError(
        absl::StrCat("dropout input is ", input.to_string(), "; it must be floating point"));
  }
  auto saved = std::make_unique<DropoutSaved>();
  if (!training() || p_ == 0.0) return ForwardResult{input, std::move(saved)};
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor y, empty(ctx, input.shape(), input.dtype()));
  saved->active = true;
  saved->p = p_;
  saved->shape = input.shape();
  saved->dtype = input.dtype();
  // Validated before reserving: a failing call draws nothing.
  if (input.numel() > 0) {
    saved->rng = ctx.next_offset(static_cast<uint64_t>(input.numel()));
    COLOSSAL_RETURN_IF_ERROR(apply(ctx, y, input, p_, saved->rng, "dropout forward"));
  }
  return ForwardResult{y, std::move(saved)};
}

absl::StatusOr<core::Tensor> Dropout::backward_impl(core::Context& ctx, Saved& saved,
                                                    const core::Tensor& grad_output) {
  COLOSSAL_RETURN_IF_ERROR(require_device(ctx, grad_output, "grad_output"));
  COLOSSAL_ASSIGN_OR_RETURN(DropoutSaved * s, saved_as<DropoutSaved>(saved));
  if (!s->active) return grad_output;
  if (grad_output.shape() != s->shape || grad_output.dtype() != s->dtype) {
    return absl::InvalidArgumentError("grad_output does not match the forward's input");
  }
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dx, empty(ctx, s->shape, s->dtype));
  if (dx.numel() > 0) {
    COLOSSAL_RETURN_IF_ERROR(apply(ctx, dx, grad_output, s->p, s->rng, "dropout backward"));
  }
  return dx;
}

}  // namespace colossal::nn
