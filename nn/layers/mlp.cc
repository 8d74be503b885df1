#include "nn/layers/mlp.h"

#include <memory>

namespace colossal::nn {

Mlp::Mlp(std::string name, int64_t channels, core::DType dtype, double resid_pdrop,
         const TensorParallel& tp)
    : Sequential(name) {
  if (tp.enabled()) append(std::make_unique<TensorParallelRegion>(name + ".tp_region", tp));
  append(std::make_unique<Linear>(
      name + ".c_fc", channels, 4 * channels,
      LinearOptions{.dtype = dtype, .parallel = Parallel::kColumn, .tp = tp}));
  append(std::make_unique<Gelu>(name + ".act"));
  append(std::make_unique<Linear>(
      name + ".c_proj", 4 * channels, channels,
      LinearOptions{.dtype = dtype, .parallel = Parallel::kRow, .tp = tp}));
  if (resid_pdrop != 0.0) append(std::make_unique<Dropout>(name + ".dropout", resid_pdrop));
}

}  // namespace colossal::nn
