// colossal::nn — LayerNorm over the last dimension (kernels/layernorm), and
// RowNorm, the body it shares with RMSNorm (rmsnorm.h).
//
//   y = (x - mean) / sqrt(var + eps) * weight + bias,   var biased, eps 1e-5 (GPT-2's)
//
// Parameters "<name>.weight" [C] and "<name>.bias" [C] (Hugging Face names;
// the model's initialiser sets weight to ones). Input [..., C] -> [..., C].
// Saves the input and the float32 mean/rstd per row. Backward accumulates
// dweight/dbias and returns dx. Devices and dtypes: see nn/layers/BUILD.
//
// A pre-norm block adds each branch into the residual stream and normalises
// the sum; its backward adds the norm's input gradient to the stream's.
// forward_add and backward_add take those adds into the norm's own kernels
// (one pass over the rows fewer each way, as llm.c's fused kernels do):
//
//   LayerNorm ln("transformer.h.0.ln_1", 768, {.dtype = DType::kF32});
//   COLOSSAL_ASSIGN_OR_RETURN(ForwardResult out, ln.forward(ctx, x));
//   COLOSSAL_ASSIGN_OR_RETURN(RowNorm::AddResult r, ln.forward_add(ctx, x, branch));
//   // r.sum = x + branch, r.normed.output = ln(r.sum)
//   COLOSSAL_ASSIGN_OR_RETURN(Tensor dsum, ln.backward_add(ctx, *r.normed.saved, dy, dstream));
//   // dsum = dstream + ln'(dy)
#ifndef COLOSSAL_NN_LAYERS_LAYERNORM_H_
#define COLOSSAL_NN_LAYERS_LAYERNORM_H_

#include <cstdint>
#include <string>
#include <utility>

#include "nn/module/module.h"

namespace colossal::nn {

struct LayerNormOptions {
  float eps = 1e-5f;
  core::DType dtype = core::DType::kF32;
};

// LayerNorm or RMSNorm (kRms: no mean, no bias). The shared forward,
// backward and their residual-fused forms; the derived classes name it.
class RowNorm : public Module {
 public:
  struct AddResult {
    core::Tensor sum;      // x + residual, rounded to the dtype
    ForwardResult normed;  // the norm of sum (its context is a plain forward's)
  };
  // sum = x + residual, and the norm of sum, in one kernel. The forward
  // pre-hooks see x (sum does not exist before the kernel). A checkpointed
  // norm adds first and runs its plain forward (same results).
  absl::StatusOr<AddResult> forward_add(core::Context& ctx, const core::Tensor& x,
                                        const core::Tensor& residual);
  // residual_grad + the input gradient backward() would return, summed in
  // float32 and rounded once (backward() then add() round twice), into a new
  // tensor; residual_grad is only read. Same hooks and parameter gradients
  // as backward().
  absl::StatusOr<core::Tensor> backward_add(core::Context& ctx, Saved& saved,
                                            const core::Tensor& grad_output,
                                            const core::Tensor& residual_grad);

 protected:
  RowNorm(std::string name, int64_t channels, LayerNormOptions options, bool rms);
  absl::Status declare_own(ParameterTable& table) override;
  absl::Status bind_own(const ParameterStore& store) override;
  absl::StatusOr<ForwardResult> forward_impl(core::Context& ctx, const core::Tensor& input) override;
  absl::StatusOr<core::Tensor> backward_impl(core::Context& ctx, Saved& saved,
                                             const core::Tensor& grad_output) override;

 private:
  // The norm of input (+ residual, written to *sum, when residual is defined).
  absl::StatusOr<ForwardResult> run_forward_kernel(core::Context& ctx, const core::Tensor& input,
                                                   const core::Tensor& residual, core::Tensor* sum);
  // The input gradient (+ residual_grad when defined).
  absl::StatusOr<core::Tensor> run_backward_kernel(core::Context& ctx, Saved& saved,
                                                   const core::Tensor& grad_output,
                                                   const core::Tensor& residual_grad);

  int64_t channels_;
  LayerNormOptions options_;
  bool rms_;
  ParameterHandle weight_, bias_;  // bias_: LayerNorm only
};

class LayerNorm : public RowNorm {
 public:
  LayerNorm(std::string name, int64_t channels, LayerNormOptions options)
      : RowNorm(std::move(name), channels, options, /*rms=*/false) {}
  const char* type() const override { return "LayerNorm"; }
};

}  // namespace colossal::nn

#endif  // COLOSSAL_NN_LAYERS_LAYERNORM_H_
