// colossal::nn — GPT-2's transformer block (pre-LayerNorm, residual).
//
//   r = x + attn(ln_1(x))
//   y = r + mlp(ln_2(r))
//
// Children: "<name>.ln_1", "<name>.attn", "<name>.ln_2", "<name>.mlp"; with
// name "transformer.h.<i>" every parameter has its Hugging Face GPT-2 name.
// Input [B, T, C] -> [B, T, C]. Devices and dtypes: see nn/layers/BUILD.
//
//   TransformerBlock block("transformer.h.0", 768, 12, DType::kF32);
//   COLOSSAL_ASSIGN_OR_RETURN(ForwardResult out, block.forward(ctx, x));
#ifndef COLOSSAL_NN_LAYERS_BLOCK_H_
#define COLOSSAL_NN_LAYERS_BLOCK_H_

#include <cstdint>
#include <string>

#include "nn/layers/attention.h"
#include "nn/layers/layernorm.h"
#include "nn/layers/mlp.h"
#include "nn/module/module.h"

namespace colossal::nn {

class TransformerBlock : public Module {
 public:
  TransformerBlock(std::string name, int64_t channels, int64_t heads, core::DType dtype);
  const char* type() const override { return "TransformerBlock"; }

 protected:
  absl::StatusOr<ForwardResult> forward_impl(core::Context& ctx, const core::Tensor& input) override;
  absl::StatusOr<core::Tensor> backward_impl(core::Context& ctx, Saved& saved,
                                             const core::Tensor& grad_output) override;

 private:
  LayerNorm ln_1_;
  CausalSelfAttention attn_;
  LayerNorm ln_2_;
  Mlp mlp_;
};

}  // namespace colossal::nn

#endif  // COLOSSAL_NN_LAYERS_BLOCK_H_
