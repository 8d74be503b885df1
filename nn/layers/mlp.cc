#include "nn/layers/mlp.h"

#include <memory>

namespace colossal::nn {

Mlp::Mlp(std::string name, int64_t channels, core::DType dtype) : Sequential(name) {
  append(std::make_unique<Linear>(name + ".c_fc", channels, 4 * channels,
                                  LinearOptions{.dtype = dtype}));
  append(std::make_unique<Gelu>(name + ".act"));
  append(std::make_unique<Linear>(name + ".c_proj", 4 * channels, channels,
                                  LinearOptions{.dtype = dtype}));
}

}  // namespace colossal::nn
