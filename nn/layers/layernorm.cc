#include "nn/layers/layernorm.h"

#include "core/status/status.h"
#include "kernels/layernorm/layernorm.h"
#include "nn/layers/tensor_util.h"

namespace colossal::nn {
namespace {

struct LayerNormSaved : Saved {
  SavedStats stats() const override { return saved_stats({input, mean, rstd}); }
  core::Tensor input, mean, rstd;
};

}  // namespace

LayerNorm::LayerNorm(std::string name, int64_t channels, LayerNormOptions options)
    : Module(std::move(name)), channels_(channels), options_(options) {}

absl::Status LayerNorm::declare_own(ParameterTable& table) {
  COLOSSAL_RETURN_IF_ERROR(
      table.add(name() + ".weight", {channels_}, options_.dtype, InitRule::ones()));
  return table.add(name() + ".bias", {channels_}, options_.dtype, InitRule::zeros());
}

absl::Status LayerNorm::bind_own(const ParameterStore& store) {
  COLOSSAL_ASSIGN_OR_RETURN(weight_, store.handle(name() + ".weight"));
  COLOSSAL_ASSIGN_OR_RETURN(bias_, store.handle(name() + ".bias"));
  return absl::OkStatus();
}

absl::StatusOr<ForwardResult> LayerNorm::forward_impl(core::Context& ctx,
                                                      const core::Tensor& input) {
  COLOSSAL_RETURN_IF_ERROR(require_device(ctx, input, "input"));
  COLOSSAL_RETURN_IF_ERROR(require_dtype(input, options_.dtype, "input"));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor x, as_rows(input, channels_, "input"));
  const int64_t rows = x.dim(0);
  COLOSSAL_ASSIGN_OR_RETURN(const core::Tensor weight, weight_.value());
  COLOSSAL_ASSIGN_OR_RETURN(const core::Tensor bias, bias_.value());
  auto saved = std::make_unique<LayerNormSaved>();
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor y, empty(ctx, input.shape(), options_.dtype));
  COLOSSAL_ASSIGN_OR_RETURN(saved->mean, empty(ctx, {rows}, core::DType::kF32));
  COLOSSAL_ASSIGN_OR_RETURN(saved->rstd, empty(ctx, {rows}, core::DType::kF32));
  COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
      COLOSSAL_NN_ON_DEVICE(
          ctx,
          kernels::layernorm::layernorm_forward_cpu(
              y.raw_data(), saved->mean.data<float>(), saved->rstd.data<float>(), x.raw_data(),
              weight.raw_data(), bias.raw_data(), rows, channels_, options_.dtype,
              {.eps = options_.eps}),
          kernels::layernorm::layernorm_forward_cuda(
              y.raw_data(), saved->mean.data<float>(), saved->rstd.data<float>(), x.raw_data(),
              weight.raw_data(), bias.raw_data(), rows, channels_, options_.dtype,
              {.eps = options_.eps}, cuda_stream(ctx))),
      "layernorm forward"));
  saved->input = input;
  return ForwardResult{y, std::move(saved)};
}

absl::StatusOr<core::Tensor> LayerNorm::backward_impl(core::Context& ctx, Saved& saved,
                                                      const core::Tensor& grad_output) {
  COLOSSAL_RETURN_IF_ERROR(require_device(ctx, grad_output, "grad_output"));
  COLOSSAL_ASSIGN_OR_RETURN(LayerNormSaved * s, saved_as<LayerNormSaved>(saved));
  COLOSSAL_RETURN_IF_ERROR(require_dtype(grad_output, options_.dtype, "grad_output"));
  if (grad_output.shape() != s->input.shape()) {
    return absl::InvalidArgumentError("grad_output does not match the forward's input shape");
  }
  const int64_t rows = s->mean.numel();
  COLOSSAL_ASSIGN_OR_RETURN(const core::Tensor weight, weight_.value());
  COLOSSAL_ASSIGN_OR_RETURN(const core::Tensor dweight, weight_.grad());
  COLOSSAL_ASSIGN_OR_RETURN(const core::Tensor dbias, bias_.grad());
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dx, empty(ctx, s->input.shape(), options_.dtype));
  const size_t scratch_bytes = ctx.device().is_cpu()
                                   ? 0
                                   : kernels::layernorm::layernorm_backward_scratch_bytes(rows,
                                                                                          channels_);
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor work, scratch(ctx, scratch_bytes));
  (void)work;
  COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
      COLOSSAL_NN_ON_DEVICE(
          ctx,
          kernels::layernorm::layernorm_backward_cpu(
              dx.raw_data(), dweight.raw_data(), dbias.raw_data(),
              grad_output.raw_data(), s->input.raw_data(), s->mean.data<float>(),
              s->rstd.data<float>(), weight.raw_data(), rows, channels_, options_.dtype,
              {.accumulate_dx = false}),
          kernels::layernorm::layernorm_backward_cuda(
              dx.raw_data(), dweight.raw_data(), dbias.raw_data(),
              grad_output.raw_data(), s->input.raw_data(), s->mean.data<float>(),
              s->rstd.data<float>(), weight.raw_data(), work.raw_data(), scratch_bytes,
              rows, channels_, options_.dtype, {.accumulate_dx = false}, cuda_stream(ctx))),
      "layernorm backward"));
  return dx;
}

}  // namespace colossal::nn
