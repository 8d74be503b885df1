// colossal::nn — GPT-2's transformer block (pre-LayerNorm, residual).
//
//   r = x + dropout(attn(ln_1(x)))
//   y = r + mlp(ln_2(r))             (the MLP ends with its own dropout)
//
// Children: "<name>.ln_1", "<name>.attn", "<name>.ln_2", "<name>.mlp"; with
// name "transformer.h.<i>" every parameter has its Hugging Face GPT-2 name.
// resid_pdrop > 0 (Hugging Face's resid_pdrop) adds Dropout children after
// attn.c_proj ("<name>.attn.resid_dropout", a child of the block, placed after
// "<name>.attn": the fused attention layer has no dropout of its own) and after
// mlp.c_proj ("<name>.mlp.dropout", see mlp.h). resid_pdrop = 0 (the default)
// adds none: the block is exactly the plain one.
// Input [B, T, C] -> [B, T, C]. Devices and dtypes: see nn/layers/BUILD.
//
//   TransformerBlock block("transformer.h.0", 768, 12, DType::kF32);
//   COLOSSAL_ASSIGN_OR_RETURN(ForwardResult out, block.forward(ctx, x));
#ifndef COLOSSAL_NN_LAYERS_BLOCK_H_
#define COLOSSAL_NN_LAYERS_BLOCK_H_

#include <cstdint>
#include <memory>
#include <string>

#include "nn/layers/attention.h"
#include "nn/layers/dropout.h"
#include "nn/layers/layernorm.h"
#include "nn/layers/mlp.h"
#include "nn/module/module.h"

namespace colossal::nn {

class TransformerBlock : public Module {
 public:
  // tp: the attention and the MLP split over it (see their headers).
  TransformerBlock(std::string name, int64_t channels, int64_t heads, core::DType dtype,
                   double resid_pdrop = 0.0, const TensorParallel& tp = {});
  const char* type() const override { return "TransformerBlock"; }

 protected:
  absl::StatusOr<ForwardResult> forward_impl(core::Context& ctx, const core::Tensor& input) override;
  absl::StatusOr<core::Tensor> backward_impl(core::Context& ctx, Saved& saved,
                                             const core::Tensor& grad_output) override;

 private:
  LayerNorm ln_1_;
  CausalSelfAttention attn_;
  std::unique_ptr<Dropout> attn_dropout_;  // null when resid_pdrop == 0
  LayerNorm ln_2_;
  Mlp mlp_;
};

}  // namespace colossal::nn

#endif  // COLOSSAL_NN_LAYERS_BLOCK_H_
