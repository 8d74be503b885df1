#include "tests/util/gpu_test.h"

#include <string>

#include "bazel/cuda_config.h"

#if COLOSSAL_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace colossal::testing {

std::string cuda_devices_unavailable(int count) {
#if COLOSSAL_WITH_CUDA
  int devices = 0;
  const cudaError_t err = cudaGetDeviceCount(&devices);
  if (err != cudaSuccess) {
    return std::string("no usable CUDA device: ") + cudaGetErrorString(err);
  }
  if (devices < count) {
    return "needs " + std::to_string(count) + " CUDA device(s), found " + std::to_string(devices);
  }
  return "";
#else
  return "built without CUDA (--config=cpu or no toolkit found)";
#endif
}

}  // namespace colossal::testing
