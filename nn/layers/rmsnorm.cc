#include "nn/layers/rmsnorm.h"

#include "core/status/status.h"
#include "kernels/layernorm/layernorm.h"
#include "nn/layers/tensor_util.h"

namespace colossal::nn {
namespace {

struct RMSNormSaved : Saved {
  SavedStats stats() const override { return saved_stats({input, rstd}); }
  core::Tensor input, rstd;
};

}  // namespace

RMSNorm::RMSNorm(std::string name, int64_t channels, LayerNormOptions options)
    : Module(std::move(name)), channels_(channels), options_(options) {}

absl::Status RMSNorm::declare_own(ParameterTable& table) {
  return table.add(name() + ".weight", {channels_}, options_.dtype, InitRule::ones());
}

absl::Status RMSNorm::bind_own(const ParameterStore& store) {
  COLOSSAL_ASSIGN_OR_RETURN(weight_, store.handle(name() + ".weight"));
  return absl::OkStatus();
}

absl::StatusOr<ForwardResult> RMSNorm::forward_impl(core::Context& ctx, const core::Tensor& input) {
  COLOSSAL_RETURN_IF_ERROR(require_device(ctx, input, "input"));
  COLOSSAL_RETURN_IF_ERROR(require_dtype(input, options_.dtype, "input"));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor x, as_rows(input, channels_, "input"));
  const int64_t rows = x.dim(0);
  COLOSSAL_ASSIGN_OR_RETURN(const core::Tensor weight, weight_.value());
  auto saved = std::make_unique<RMSNormSaved>();
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor y, empty(ctx, input.shape(), options_.dtype));
  COLOSSAL_ASSIGN_OR_RETURN(saved->rstd, empty(ctx, {rows}, core::DType::kF32));
  COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
      COLOSSAL_NN_ON_DEVICE(
          ctx,
          kernels::layernorm::rmsnorm_forward_cpu(y.raw_data(), saved->rstd.data<float>(),
                                                  x.raw_data(), weight.raw_data(), rows,
                                                  channels_, options_.dtype, {.eps = options_.eps}),
          kernels::layernorm::rmsnorm_forward_cuda(
              y.raw_data(), saved->rstd.data<float>(), x.raw_data(), weight.raw_data(), rows,
              channels_, options_.dtype, {.eps = options_.eps}, cuda_stream(ctx))),
      "rmsnorm forward"));
  saved->input = input;
  return ForwardResult{y, std::move(saved)};
}

absl::StatusOr<core::Tensor> RMSNorm::backward_impl(core::Context& ctx, Saved& saved,
                                                    const core::Tensor& grad_output) {
  COLOSSAL_RETURN_IF_ERROR(require_device(ctx, grad_output, "grad_output"));
  COLOSSAL_ASSIGN_OR_RETURN(RMSNormSaved * s, saved_as<RMSNormSaved>(saved));
  COLOSSAL_RETURN_IF_ERROR(require_dtype(grad_output, options_.dtype, "grad_output"));
  if (grad_output.shape() != s->input.shape()) {
    return absl::InvalidArgumentError("grad_output does not match the forward's input shape");
  }
  const int64_t rows = s->rstd.numel();
  COLOSSAL_ASSIGN_OR_RETURN(const core::Tensor weight, weight_.value());
  COLOSSAL_ASSIGN_OR_RETURN(const core::Tensor dweight, weight_.grad());
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dx, empty(ctx, s->input.shape(), options_.dtype));
  const size_t scratch_bytes =
      ctx.device().is_cpu() ? 0 : kernels::layernorm::rmsnorm_backward_scratch_bytes(rows, channels_);
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor work, scratch(ctx, scratch_bytes));
  (void)work;
  COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
      COLOSSAL_NN_ON_DEVICE(
          ctx,
          kernels::layernorm::rmsnorm_backward_cpu(
              dx.raw_data(), dweight.raw_data(), grad_output.raw_data(), s->input.raw_data(),
              s->rstd.data<float>(), weight.raw_data(), rows, channels_, options_.dtype,
              {.accumulate_dx = false}),
          kernels::layernorm::rmsnorm_backward_cuda(
              dx.raw_data(), dweight.raw_data(), grad_output.raw_data(), s->input.raw_data(),
              s->rstd.data<float>(), weight.raw_data(), work.raw_data(), scratch_bytes, rows,
              channels_, options_.dtype, {.accumulate_dx = false}, cuda_stream(ctx))),
      "rmsnorm backward"));
  return dx;
}

}  // namespace colossal::nn
