#include "nn/layers/mlp.h"

#include <memory>
#include <utility>

#include "core/status/status.h"
#include "nn/layers/tensor_util.h"

namespace colossal::nn {
namespace {

struct MlpSaved : Saved {
  SavedStats stats() const override {
    return saved_stats({}, {c_fc.get(), c_proj.get(), dropout.get()});
  }
  std::unique_ptr<Saved> c_fc, c_proj, dropout;
};

std::shared_ptr<RegionGrad> region_grad_for(const TensorParallel& tp) {
  return tp.enabled() ? std::make_shared<RegionGrad>(tp, 1) : nullptr;
}

}  // namespace

Mlp::Mlp(std::string name, int64_t channels, core::DType dtype, double resid_pdrop,
         const TensorParallel& tp)
    : Module(name),
      tp_(tp),
      region_grad_(region_grad_for(tp)),
      c_fc_(name + ".c_fc", channels, 4 * channels,
            LinearOptions{.dtype = dtype,
                          .parallel = Parallel::kColumn,
                          .tp = tp,
                          .region_grad = region_grad_,
                          .activation = Activation::kGelu}),
      c_proj_(name + ".c_proj", 4 * channels, channels,
              LinearOptions{.dtype = dtype, .parallel = Parallel::kRow, .tp = tp}) {
  register_child(&c_fc_);
  register_child(&c_proj_);
  if (resid_pdrop != 0.0) {
    dropout_ = std::make_unique<Dropout>(name + ".dropout", resid_pdrop);
    register_child(dropout_.get());
  }
}

absl::StatusOr<ForwardResult> Mlp::forward_impl(core::Context& ctx, const core::Tensor& input) {
  return run_forward(ctx, input, core::Tensor());
}

absl::StatusOr<ForwardResult> Mlp::forward_add(core::Context& ctx, const core::Tensor& x,
                                               const core::Tensor& residual) {
  if (dropout_ != nullptr || region_grad_ != nullptr || checkpoint()) {
    return forward_then_add(ctx, *this, x, residual);
  }
  return forward_with(ctx, x, [&] { return run_forward(ctx, x, residual); });
}

absl::StatusOr<ForwardResult> Mlp::run_forward(core::Context& ctx, const core::Tensor& input,
                                               const core::Tensor& residual) {
  auto saved = std::make_unique<MlpSaved>();
  core::Tensor x = input;
  if (region_grad_ != nullptr) {
    region_grad_->reset();
    COLOSSAL_ASSIGN_OR_RETURN(x, region_input(ctx, tp_, input));
  }
  COLOSSAL_ASSIGN_OR_RETURN(ForwardResult h, c_fc_.forward(ctx, x));
  saved->c_fc = std::move(h.saved);
  COLOSSAL_ASSIGN_OR_RETURN(ForwardResult y, residual.defined()
                                                 ? c_proj_.forward_add(ctx, h.output, residual)
                                                 : c_proj_.forward(ctx, h.output));
  saved->c_proj = std::move(y.saved);
  // Not fused (checkpointed children, odd widths): each backward does its part.
  c_proj_.fuse_input_gelu(*saved->c_proj, *saved->c_fc);
  if (dropout_ != nullptr) {
    COLOSSAL_ASSIGN_OR_RETURN(ForwardResult d, dropout_->forward(ctx, y.output));
    saved->dropout = std::move(d.saved);
    y.output = d.output;
  }
  return ForwardResult{y.output, std::move(saved)};
}

absl::StatusOr<core::Tensor> Mlp::backward_impl(core::Context& ctx, Saved& saved,
                                                const core::Tensor& grad_output) {
  COLOSSAL_ASSIGN_OR_RETURN(MlpSaved * s, saved_as<MlpSaved>(saved));
  if ((dropout_ != nullptr) != (s->dropout != nullptr)) {
    return absl::InvalidArgumentError("saved activations are from an MLP with other dropout");
  }
  core::Tensor dy = grad_output;
  if (dropout_ != nullptr) {
    COLOSSAL_ASSIGN_OR_RETURN(dy, dropout_->backward(ctx, *s->dropout, grad_output));
  }
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dh, c_proj_.backward(ctx, *s->c_proj, dy));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dx, c_fc_.backward(ctx, *s->c_fc, dh));
  // With tensor parallelism dx is c_fc's unreduced sum; the reduction it
  // started finishes here.
  if (region_grad_ != nullptr) return region_grad_->finish(ctx);
  return dx;
}

}  // namespace colossal::nn
