#include "nn/layers/llama_mlp.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status/status.h"
#include "kernels/activation/activation.h"
#include "nn/layers/llama_projection.h"
#include "nn/layers/tensor_util.h"

namespace colossal::nn {
namespace {

struct LlamaMlpSaved : Saved {
  SavedStats stats() const override {
    return saved_stats({gate, up}, {gate_proj.get(), up_proj.get(), down_proj.get()});
  }
  std::unique_ptr<Saved> gate_proj, up_proj, down_proj;
  core::Tensor gate, up;  // the projections' outputs
};

using internal::llama_projection;

}  // namespace

LlamaMlp::LlamaMlp(std::string name, int64_t hidden, int64_t intermediate, bool bias,
                   core::DType dtype, const TensorParallel& tp, const LlamaMlpNames& names,
                   bool varying_rows)
    : Module(name),
      dtype_(dtype),
      tp_(tp),
      region_grad_(std::make_shared<RegionGrad>(tp, 2)),
      gate_proj_(absl::StrCat(name, ".", names.gate), hidden, intermediate,
                 llama_projection(bias, dtype, Parallel::kColumn, tp, region_grad_, varying_rows)),
      up_proj_(absl::StrCat(name, ".", names.up), hidden, intermediate,
               llama_projection(bias, dtype, Parallel::kColumn, tp, region_grad_, varying_rows)),
      down_proj_(absl::StrCat(name, ".", names.down), intermediate, hidden,
                 llama_projection(bias, dtype, Parallel::kRow, tp, nullptr, varying_rows)) {
  register_child(&gate_proj_);
  register_child(&up_proj_);
  register_child(&down_proj_);
}

absl::StatusOr<ForwardResult> LlamaMlp::forward_impl(core::Context& ctx, const core::Tensor& input) {
  return run_forward(ctx, input, core::Tensor());
}

absl::StatusOr<ForwardResult> LlamaMlp::forward_add(core::Context& ctx, const core::Tensor& x,
                                                    const core::Tensor& residual) {
  if (tp_.enabled() || checkpoint()) return forward_then_add(ctx, *this, x, residual);
  return forward_with(ctx, x, [&] { return run_forward(ctx, x, residual); });
}

absl::StatusOr<ForwardResult> LlamaMlp::run_forward(core::Context& ctx, const core::Tensor& input,
                                                    const core::Tensor& residual) {
  COLOSSAL_RETURN_IF_ERROR(require_device(ctx, input, "input"));
  auto saved = std::make_unique<LlamaMlpSaved>();
  region_grad_->reset();
  COLOSSAL_ASSIGN_OR_RETURN(const core::Tensor x, region_input(ctx, tp_, input));
  COLOSSAL_ASSIGN_OR_RETURN(ForwardResult g, gate_proj_.forward(ctx, x));
  COLOSSAL_ASSIGN_OR_RETURN(ForwardResult u, up_proj_.forward(ctx, x));
  saved->gate_proj = std::move(g.saved);
  saved->up_proj = std::move(u.saved);
  saved->gate = g.output;
  saved->up = u.output;
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor h, empty(ctx, g.output.shape(), dtype_));
  const int64_t n = h.numel();
  COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
      COLOSSAL_NN_ON_DEVICE(ctx,
                            kernels::activation::swiglu_forward_cpu(
                                h.raw_data(), g.output.raw_data(), u.output.raw_data(), n, dtype_),
                            kernels::activation::swiglu_forward_cuda(
                                h.raw_data(), g.output.raw_data(), u.output.raw_data(), n, dtype_,
                                cuda_stream(ctx))),
      "swiglu forward"));
  COLOSSAL_ASSIGN_OR_RETURN(ForwardResult out, residual.defined()
                                                   ? down_proj_.forward_add(ctx, h, residual)
                                                   : down_proj_.forward(ctx, h));
  saved->down_proj = std::move(out.saved);
  return ForwardResult{out.output, std::move(saved)};
}

absl::StatusOr<core::Tensor> LlamaMlp::backward_impl(core::Context& ctx, Saved& saved,
                                                     const core::Tensor& grad_output) {
  COLOSSAL_RETURN_IF_ERROR(require_device(ctx, grad_output, "grad_output"));
  COLOSSAL_ASSIGN_OR_RETURN(LlamaMlpSaved * s, saved_as<LlamaMlpSaved>(saved));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dh, down_proj_.backward(ctx, *s->down_proj, grad_output));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dup, empty(ctx, s->up.shape(), dtype_));
  const int64_t n = dh.numel();
  // dgate overwrites dh in place (the kernel allows dgate == dout).
  COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
      COLOSSAL_NN_ON_DEVICE(ctx,
                            kernels::activation::swiglu_backward_cpu(
                                dh.raw_data(), dup.raw_data(), dh.raw_data(), s->gate.raw_data(),
                                s->up.raw_data(), n, dtype_),
                            kernels::activation::swiglu_backward_cuda(
                                dh.raw_data(), dup.raw_data(), dh.raw_data(), s->gate.raw_data(),
                                s->up.raw_data(), n, dtype_, cuda_stream(ctx))),
      "swiglu backward"));
  // Both add their input gradient into one sum; gate_proj starts its
  // reduction before its weight GEMM.
  COLOSSAL_RETURN_IF_ERROR(up_proj_.backward(ctx, *s->up_proj, dup).status());
  COLOSSAL_RETURN_IF_ERROR(gate_proj_.backward(ctx, *s->gate_proj, dh).status());
  return region_grad_->finish(ctx);
}

}  // namespace colossal::nn
