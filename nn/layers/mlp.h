// colossal::nn — GPT-2's MLP: c_proj(gelu(c_fc(x))).
//
// Children: "<name>.c_fc" Linear [C, 4C] with Activation::kGelu, "<name>.c_proj"
// Linear [4C, C] (both kInOut, HF Conv1D layout), and with resid_pdrop > 0 a
// third, "<name>.dropout" Dropout(resid_pdrop) after c_proj (HF
// GPT2MLP.dropout; with resid_pdrop = 0 there is no such child, so the module
// is exactly the plain MLP); with name "transformer.h.<i>.mlp" the parameter
// names are Hugging Face GPT-2's. Input [..., C] -> [..., C].
//
// GELU has no pass of its own: c_fc's GEMM applies it as it writes (keeping
// the pre-activation), and c_proj's input-gradient GEMM applies its
// derivative (Linear::fuse_input_gelu), as llm.c does. The result is the same
// function as c_fc, GELU and c_proj run apart, up to rounding (the GELU is
// computed from the GEMM's float32 accumulator, not from the rounded
// pre-activation). Devices and dtypes: see nn/layers/BUILD.
//
//   Mlp mlp("transformer.h.0.mlp", 768, DType::kF32);
//   COLOSSAL_ASSIGN_OR_RETURN(ForwardResult out, mlp.forward(ctx, x));
#ifndef COLOSSAL_NN_LAYERS_MLP_H_
#define COLOSSAL_NN_LAYERS_MLP_H_

#include <cstdint>
#include <memory>
#include <string>

#include "nn/layers/dropout.h"
#include "nn/layers/linear.h"
#include "nn/layers/tensor_parallel.h"
#include "nn/module/module.h"

namespace colossal::nn {

class Mlp : public Module {
 public:
  // With tensor parallelism c_fc is column-parallel and c_proj row-parallel;
  // the input is the region's (all-gathered along the sequence with sequence
  // parallelism) and its gradient is reduced over the group, the reduction
  // running during c_fc's weight-gradient GEMM (RegionGrad).
  Mlp(std::string name, int64_t channels, core::DType dtype, double resid_pdrop = 0.0,
      const TensorParallel& tp = {});
  const char* type() const override { return "Mlp"; }

  // residual + forward(x), the add in c_proj's GEMM (Linear::forward_add);
  // after it with dropout or tensor parallelism, or when checkpointed.
  absl::StatusOr<ForwardResult> forward_add(core::Context& ctx, const core::Tensor& x,
                                            const core::Tensor& residual);

 protected:
  absl::StatusOr<ForwardResult> forward_impl(core::Context& ctx, const core::Tensor& input) override;
  absl::StatusOr<core::Tensor> backward_impl(core::Context& ctx, Saved& saved,
                                             const core::Tensor& grad_output) override;

 private:
  // forward_impl, with `residual` (when defined) added by c_proj.
  absl::StatusOr<ForwardResult> run_forward(core::Context& ctx, const core::Tensor& input,
                                            const core::Tensor& residual);

  TensorParallel tp_;
  std::shared_ptr<RegionGrad> region_grad_;  // with tensor parallelism only
  Linear c_fc_, c_proj_;
  std::unique_ptr<Dropout> dropout_;  // resid_pdrop > 0
};

}  // namespace colossal::nn

#endif  // COLOSSAL_NN_LAYERS_MLP_H_
