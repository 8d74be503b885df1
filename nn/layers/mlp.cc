#include "nn/layers/mlp.h"

#include <memory>

namespace colossal::nn {

Mlp::Mlp(std::string name, int64_t channels, core::DType dtype, double resid_pdrop,
         const TensorParallel& tp)
    : Sequential(name) {
  // The region (first) finishes the input-gradient reduction c_fc starts
  // before its weight GEMM.
  std::shared_ptr<RegionGrad> region_grad;
  if (tp.enabled()) {
    region_grad = std::make_shared<RegionGrad>(tp, 1);
    append(std::make_unique<TensorParallelRegion>(name + ".tp_region", tp, region_grad));
  }
  append(std::make_unique<Linear>(name + ".c_fc", channels, 4 * channels,
                                  LinearOptions{.dtype = dtype,
                                                .parallel = Parallel::kColumn,
                                                .tp = tp,
                                                .region_grad = region_grad}));
  append(std::make_unique<Gelu>(name + ".act"));
  append(std::make_unique<Linear>(
      name + ".c_proj", 4 * channels, channels,
      LinearOptions{.dtype = dtype, .parallel = Parallel::kRow, .tp = tp}));
  if (resid_pdrop != 0.0) append(std::make_unique<Dropout>(name + ".dropout", resid_pdrop));
}

}  // namespace colossal::nn
