#include "nn/layers/layernorm.h"

#include "core/ops/elementwise.h"
#include "core/status/status.h"
#include "kernels/layernorm/layernorm.h"
#include "nn/layers/tensor_util.h"

namespace colossal::nn {
namespace {

namespace ln = kernels::layernorm;

struct RowNormSaved : Saved {
  SavedStats stats() const override { return saved_stats({input, mean, rstd}); }
  core::Tensor input, mean, rstd;  // mean: LayerNorm only
};

// Raw pointers of one norm call; null where unused (mean and bias for RMSNorm,
// the residual buffers without a residual).
struct ForwardArgs {
  void* out;
  float* mean;
  float* rstd;
  void* sum;
  const void* x;
  const void* residual;
  const void* gamma;
  const void* beta;
};

kernels::KernelStatus forward_kernel(core::Context& ctx, bool rms, const ForwardArgs& a,
                                     int64_t rows, int64_t C, core::DType dtype,
                                     ln::ForwardOptions o) {
  if (a.residual != nullptr) {
    return rms ? COLOSSAL_NN_ON_DEVICE(
                     ctx,
                     ln::fused_residual_rmsnorm_forward_cpu(a.sum, a.out, a.rstd, a.x, a.residual,
                                                            a.gamma, rows, C, dtype, o),
                     ln::fused_residual_rmsnorm_forward_cuda(a.sum, a.out, a.rstd, a.x, a.residual,
                                                             a.gamma, rows, C, dtype, o,
                                                             cuda_stream(ctx)))
               : COLOSSAL_NN_ON_DEVICE(
                     ctx,
                     ln::fused_residual_layernorm_forward_cpu(a.sum, a.out, a.mean, a.rstd, a.x,
                                                              a.residual, a.gamma, a.beta, rows, C,
                                                              dtype, o),
                     ln::fused_residual_layernorm_forward_cuda(a.sum, a.out, a.mean, a.rstd, a.x,
                                                               a.residual, a.gamma, a.beta, rows,
                                                               C, dtype, o, cuda_stream(ctx)));
  }
  return rms ? COLOSSAL_NN_ON_DEVICE(
                   ctx, ln::rmsnorm_forward_cpu(a.out, a.rstd, a.x, a.gamma, rows, C, dtype, o),
                   ln::rmsnorm_forward_cuda(a.out, a.rstd, a.x, a.gamma, rows, C, dtype, o,
                                            cuda_stream(ctx)))
             : COLOSSAL_NN_ON_DEVICE(
                   ctx,
                   ln::layernorm_forward_cpu(a.out, a.mean, a.rstd, a.x, a.gamma, a.beta, rows, C,
                                             dtype, o),
                   ln::layernorm_forward_cuda(a.out, a.mean, a.rstd, a.x, a.gamma, a.beta, rows, C,
                                              dtype, o, cuda_stream(ctx)));
}

}  // namespace

RowNorm::RowNorm(std::string name, int64_t channels, LayerNormOptions options, bool rms)
    : Module(std::move(name)), channels_(channels), options_(options), rms_(rms) {}

absl::Status RowNorm::declare_own(ParameterTable& table) {
  COLOSSAL_RETURN_IF_ERROR(
      table.add(name() + ".weight", {channels_}, options_.dtype, InitRule::ones()));
  if (rms_) return absl::OkStatus();
  return table.add(name() + ".bias", {channels_}, options_.dtype, InitRule::zeros());
}

absl::Status RowNorm::bind_own(const ParameterStore& store) {
  COLOSSAL_ASSIGN_OR_RETURN(weight_, store.handle(name() + ".weight"));
  if (!rms_) {
    COLOSSAL_ASSIGN_OR_RETURN(bias_, store.handle(name() + ".bias"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ForwardResult> RowNorm::run_forward_kernel(core::Context& ctx,
                                                          const core::Tensor& input,
                                                          const core::Tensor& residual,
                                                          core::Tensor* sum) {
  COLOSSAL_RETURN_IF_ERROR(require_device(ctx, input, "input"));
  COLOSSAL_RETURN_IF_ERROR(require_dtype(input, options_.dtype, "input"));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor x, as_rows(input, channels_, "input"));
  const int64_t rows = x.dim(0);
  if (residual.defined()) {
    COLOSSAL_RETURN_IF_ERROR(
        require_like(ctx, residual, options_.dtype, "residual", input.shape(), "the input's shape"));
    COLOSSAL_ASSIGN_OR_RETURN(*sum, empty(ctx, input.shape(), options_.dtype));
  }
  COLOSSAL_ASSIGN_OR_RETURN(const core::Tensor weight, weight_.value());
  core::Tensor bias;
  if (!rms_) {
    COLOSSAL_ASSIGN_OR_RETURN(bias, bias_.value());
  }
  auto saved = std::make_unique<RowNormSaved>();
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor y, empty(ctx, input.shape(), options_.dtype));
  if (!rms_) {
    COLOSSAL_ASSIGN_OR_RETURN(saved->mean, empty(ctx, {rows}, core::DType::kF32));
  }
  COLOSSAL_ASSIGN_OR_RETURN(saved->rstd, empty(ctx, {rows}, core::DType::kF32));
  const ForwardArgs args{y.raw_data(),
                         rms_ ? nullptr : saved->mean.data<float>(),
                         saved->rstd.data<float>(),
                         residual.defined() ? sum->raw_data() : nullptr,
                         x.raw_data(),
                         residual.defined() ? residual.raw_data() : nullptr,
                         weight.raw_data(),
                         rms_ ? nullptr : bias.raw_data()};
  COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
      forward_kernel(ctx, rms_, args, rows, channels_, options_.dtype, {.eps = options_.eps}),
      rms_ ? "rmsnorm forward" : "layernorm forward"));
  // The backward normalises what the kernel did: the sum when there is one.
  saved->input = residual.defined() ? *sum : input;
  return ForwardResult{y, std::move(saved)};
}

absl::StatusOr<ForwardResult> RowNorm::forward_impl(core::Context& ctx, const core::Tensor& input) {
  return run_forward_kernel(ctx, input, core::Tensor(), nullptr);
}

absl::StatusOr<RowNorm::AddResult> RowNorm::forward_add(core::Context& ctx, const core::Tensor& x,
                                                        const core::Tensor& residual) {
  AddResult r;
  if (checkpoint()) {  // the context keeps the norm's input: it must exist before the forward
    COLOSSAL_ASSIGN_OR_RETURN(r.sum, core::ops::add(ctx, x, residual));
    COLOSSAL_ASSIGN_OR_RETURN(r.normed, forward(ctx, r.sum));
    return r;
  }
  COLOSSAL_ASSIGN_OR_RETURN(
      r.normed, forward_with(ctx, x, [&] { return run_forward_kernel(ctx, x, residual, &r.sum); }));
  return r;
}

absl::StatusOr<core::Tensor> RowNorm::run_backward_kernel(core::Context& ctx, Saved& saved,
                                                          const core::Tensor& grad_output,
                                                          const core::Tensor& residual_grad) {
  COLOSSAL_RETURN_IF_ERROR(require_device(ctx, grad_output, "grad_output"));
  COLOSSAL_ASSIGN_OR_RETURN(RowNormSaved * s, saved_as<RowNormSaved>(saved));
  COLOSSAL_RETURN_IF_ERROR(require_dtype(grad_output, options_.dtype, "grad_output"));
  if (grad_output.shape() != s->input.shape()) {
    return absl::InvalidArgumentError("grad_output does not match the forward's input shape");
  }
  if (residual_grad.defined()) {
    COLOSSAL_RETURN_IF_ERROR(require_like(ctx, residual_grad, options_.dtype, "residual_grad", s->input.shape(),
                                          "the forward's input shape"));
  }
  const int64_t rows = s->rstd.numel();
  COLOSSAL_ASSIGN_OR_RETURN(const core::Tensor weight, weight_.value());
  COLOSSAL_ASSIGN_OR_RETURN(const core::Tensor dweight, weight_.grad());
  core::Tensor dbias;
  if (!rms_) {
    COLOSSAL_ASSIGN_OR_RETURN(dbias, bias_.grad());
  }
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dx, empty(ctx, s->input.shape(), options_.dtype));
  size_t scratch_bytes = 0;
  if (!ctx.device().is_cpu()) {
    scratch_bytes = rms_ ? ln::rmsnorm_backward_scratch_bytes(rows, channels_)
                         : ln::layernorm_backward_scratch_bytes(rows, channels_);
  }
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor work, scratch(ctx, scratch_bytes));
  const ln::BackwardOptions o{
      .residual_grad = residual_grad.defined() ? residual_grad.raw_data() : nullptr};
  const float* mean = rms_ ? nullptr : s->mean.data<float>();
  const float* rstd = s->rstd.data<float>();
  void* db = rms_ ? nullptr : dbias.raw_data();
  const void* dy = grad_output.raw_data();
  const void* x = s->input.raw_data();
  const core::DType t = options_.dtype;
  const kernels::KernelStatus status =
      rms_ ? COLOSSAL_NN_ON_DEVICE(
                 ctx,
                 ln::rmsnorm_backward_cpu(dx.raw_data(), dweight.raw_data(), dy, x, rstd,
                                          weight.raw_data(), rows, channels_, t, o),
                 ln::rmsnorm_backward_cuda(dx.raw_data(), dweight.raw_data(), dy, x, rstd,
                                           weight.raw_data(), work.raw_data(), scratch_bytes, rows,
                                           channels_, t, o, cuda_stream(ctx)))
           : COLOSSAL_NN_ON_DEVICE(
                 ctx,
                 ln::layernorm_backward_cpu(dx.raw_data(), dweight.raw_data(), db, dy, x, mean,
                                            rstd, weight.raw_data(), rows, channels_, t, o),
                 ln::layernorm_backward_cuda(dx.raw_data(), dweight.raw_data(), db, dy, x, mean,
                                             rstd, weight.raw_data(), work.raw_data(),
                                             scratch_bytes, rows, channels_, t, o,
                                             cuda_stream(ctx)));
  COLOSSAL_RETURN_IF_ERROR(
      core::from_kernel_status(status, rms_ ? "rmsnorm backward" : "layernorm backward"));
  return dx;
}

absl::StatusOr<core::Tensor> RowNorm::backward_impl(core::Context& ctx, Saved& saved,
                                                    const core::Tensor& grad_output) {
  return run_backward_kernel(ctx, saved, grad_output, core::Tensor());
}

absl::StatusOr<core::Tensor> RowNorm::backward_add(core::Context& ctx, Saved& saved,
                                                   const core::Tensor& grad_output,
                                                   const core::Tensor& residual_grad) {
  if (!residual_grad.defined()) return absl::InvalidArgumentError("backward_add: no residual_grad");
  return backward_with(ctx, saved, grad_output, [&](Saved& use) {
    return run_backward_kernel(ctx, use, grad_output, residual_grad);
  });
}

}  // namespace colossal::nn
