// Private to llama_layers: the options of Llama's projections (torch.nn.Linear
// layout, [out, in], as Hugging Face stores q/k/v/o_proj and gate/up/down_proj).
#ifndef COLOSSAL_NN_LAYERS_LLAMA_PROJECTION_H_
#define COLOSSAL_NN_LAYERS_LLAMA_PROJECTION_H_

#include <memory>
#include <utility>

#include "nn/layers/linear.h"

namespace colossal::nn::internal {

// `region_grad`: the column projections that start a parallel region share it;
// `varying_rows`: a mixture of experts' expert (LinearOptions::varying_rows).
inline LinearOptions llama_projection(bool bias, core::DType dtype, Parallel parallel,
                                      const TensorParallel& tp,
                                      std::shared_ptr<RegionGrad> region_grad = nullptr,
                                      bool varying_rows = false) {
  return {.bias = bias,
          .layout = WeightLayout::kOutIn,
          .dtype = dtype,
          .parallel = parallel,
          .tp = tp,
          .region_grad = std::move(region_grad),
          .varying_rows = varying_rows};
}

}  // namespace colossal::nn::internal

#endif  // COLOSSAL_NN_LAYERS_LLAMA_PROJECTION_H_
