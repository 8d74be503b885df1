// Test-only: run CUDA's own conversion intrinsics on the device, so host
// conversions in half.h can be checked bit for bit against them.
#ifndef COLOSSAL_KERNELS_COMMON_HALF_CUDA_PROBE_H_
#define COLOSSAL_KERNELS_COMMON_HALF_CUDA_PROBE_H_

#include <cstdint>
#include <vector>

namespace colossal::kernels::testing {

struct DeviceConversions {
  std::vector<uint32_t> half_to_float;      // __half2float of all 65536 patterns (float bits)
  std::vector<uint32_t> bfloat16_to_float;  // __bfloat162float of all 65536 patterns
  std::vector<uint16_t> float_to_half;      // __float2half_rn of `inputs`
  std::vector<uint16_t> float_to_bfloat16;  // __float2bfloat16_rn of `inputs`
};

// Returns false (and leaves `out` untouched) if any CUDA call fails.
bool run_device_conversions(const std::vector<uint32_t>& inputs, DeviceConversions* out);

}  // namespace colossal::kernels::testing

#endif  // COLOSSAL_KERNELS_COMMON_HALF_CUDA_PROBE_H_
