// colossal::nn — GPT-2's MLP: c_proj(gelu(c_fc(x))).
//
// Children: "<name>.c_fc" Linear [C, 4C], "<name>.act" Gelu, "<name>.c_proj"
// Linear [4C, C] (kInOut, HF Conv1D layout), and with resid_pdrop > 0 a fourth,
// "<name>.dropout" Dropout(resid_pdrop) after c_proj (HF GPT2MLP.dropout; with
// resid_pdrop = 0 there is no such child, so the module is exactly the plain
// MLP); with name "transformer.h.<i>.mlp" the parameter names are Hugging Face
// GPT-2's. Input [..., C] -> [..., C].
// Devices and dtypes: see nn/layers/BUILD.
//
//   Mlp mlp("transformer.h.0.mlp", 768, DType::kF32);
//   COLOSSAL_ASSIGN_OR_RETURN(ForwardResult out, mlp.forward(ctx, x));
#ifndef COLOSSAL_NN_LAYERS_MLP_H_
#define COLOSSAL_NN_LAYERS_MLP_H_

#include <cstdint>
#include <string>

#include "nn/layers/dropout.h"
#include "nn/layers/gelu.h"
#include "nn/layers/linear.h"
#include "nn/layers/tensor_parallel.h"
#include "nn/module/module.h"

namespace colossal::nn {

class Mlp : public Sequential {
 public:
  // With tensor parallelism c_fc is column-parallel and c_proj row-parallel
  // after a TensorParallelRegion ("<name>.tp_region", no parameters).
  Mlp(std::string name, int64_t channels, core::DType dtype, double resid_pdrop = 0.0,
      const TensorParallel& tp = {});
  const char* type() const override { return "Mlp"; }
};

}  // namespace colossal::nn

#endif  // COLOSSAL_NN_LAYERS_MLP_H_
