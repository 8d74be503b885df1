// colossal::nn — LayerNorm over the last dimension (kernels/layernorm).
//
//   y = (x - mean) / sqrt(var + eps) * weight + bias,   var biased, eps 1e-5 (GPT-2's)
//
// Parameters "<name>.weight" [C] and "<name>.bias" [C] (Hugging Face names;
// the model's initialiser sets weight to ones). Input [..., C] -> [..., C].
// Saves the input and the float32 mean/rstd per row. Backward accumulates
// dweight/dbias and returns dx. Devices and dtypes: see nn/layers/BUILD.
//
//   LayerNorm ln("transformer.h.0.ln_1", 768, {.dtype = DType::kF32});
//   COLOSSAL_ASSIGN_OR_RETURN(ForwardResult out, ln.forward(ctx, x));
#ifndef COLOSSAL_NN_LAYERS_LAYERNORM_H_
#define COLOSSAL_NN_LAYERS_LAYERNORM_H_

#include <cstdint>
#include <string>

#include "nn/module/module.h"

namespace colossal::nn {

struct LayerNormOptions {
  float eps = 1e-5f;
  core::DType dtype = core::DType::kF32;
};

class LayerNorm : public Module {
 public:
  LayerNorm(std::string name, int64_t channels, LayerNormOptions options);
  const char* type() const override { return "LayerNorm"; }

 protected:
  absl::Status declare_own(ParameterTable& table) override;
  absl::Status bind_own(const ParameterStore& store) override;
  absl::StatusOr<ForwardResult> forward_impl(core::Context& ctx, const core::Tensor& input) override;
  absl::StatusOr<core::Tensor> backward_impl(core::Context& ctx, Saved& saved,
                                             const core::Tensor& grad_output) override;

 private:
  int64_t channels_;
  LayerNormOptions options_;
  ParameterHandle weight_, bias_;
};

}  // namespace colossal::nn

#endif  // COLOSSAL_NN_LAYERS_LAYERNORM_H_
