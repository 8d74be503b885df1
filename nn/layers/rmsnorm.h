// colossal::nn — RMSNorm over the last dimension (kernels/layernorm's RMSNorm).
//
//   y = x / sqrt(mean(x^2) + eps) * weight        (Llama's LlamaRMSNorm; no mean, no bias)
//
// Parameter "<name>.weight" [C] (Hugging Face's name; declared ones). The
// statistics are float32 whatever the dtype; the output is rounded once
// (Hugging Face rounds x * rstd to the dtype before multiplying by the weight:
// the two differ by one rounding in 16-bit types). Input [..., C] -> [..., C].
// Saves the input and the float32 rstd per row. Backward accumulates dweight
// and returns dx; forward_add / backward_add fuse a residual add (RowNorm,
// layernorm.h). Devices and dtypes: see nn/layers/BUILD.
//
//   RMSNorm norm("model.layers.0.input_layernorm", 2048, {.eps = 1e-5f, .dtype = DType::kF32});
//   COLOSSAL_ASSIGN_OR_RETURN(ForwardResult out, norm.forward(ctx, x));
#ifndef COLOSSAL_NN_LAYERS_RMSNORM_H_
#define COLOSSAL_NN_LAYERS_RMSNORM_H_

#include <cstdint>
#include <string>
#include <utility>

#include "nn/layers/layernorm.h"

namespace colossal::nn {

class RMSNorm : public RowNorm {
 public:
  // options.eps is Hugging Face's rms_norm_eps.
  RMSNorm(std::string name, int64_t channels, LayerNormOptions options)
      : RowNorm(std::move(name), channels, options, /*rms=*/true) {}
  const char* type() const override { return "RMSNorm"; }
};

}  // namespace colossal::nn

#endif  // COLOSSAL_NN_LAYERS_RMSNORM_H_
