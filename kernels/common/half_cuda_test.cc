// Host conversions in half.h against CUDA's intrinsics, bit for bit.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "bazel/cuda_config.h"
#include "kernels/common/half.h"
#include "kernels/common/half_cuda_probe.h"
#include "tests/util/gpu_test.h"

namespace colossal::kernels {
namespace {

TEST(HalfCudaTest, HostMatchesDeviceIntrinsics) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  // Every half/bfloat16 value, every midpoint between neighbours (the ties),
  // and random float bit patterns (NaN, inf and subnormals included).
  std::vector<uint32_t> inputs;
  for (uint32_t b = 0; b < 65536; ++b) {
    float f = half_to_float(Half{uint16_t(b)});
    float g = half_to_float(Half{uint16_t(b + 1)});
    uint32_t u;
    std::memcpy(&u, &f, 4);
    inputs.push_back(u);
    float mid = static_cast<float>((double(f) + double(g)) / 2);
    std::memcpy(&u, &mid, 4);
    inputs.push_back(u);
    inputs.push_back((b << 16) | 0x8000u);  // bfloat16 tie
    inputs.push_back((b << 16) | 0x8001u);
    inputs.push_back((b << 16) | 0x7fffu);
  }
  std::mt19937 rng(7);
  for (int i = 0; i < (1 << 20); ++i) inputs.push_back(rng());

  testing::DeviceConversions device;
  ASSERT_TRUE(testing::run_device_conversions(inputs, &device));
  int mismatches = 0;
  for (uint32_t b = 0; b < 65536 && mismatches < 10; ++b) {
    float h = half_to_float(Half{uint16_t(b)});
    float bf = bfloat16_to_float(BFloat16{uint16_t(b)});
    uint32_t hu, bu;
    std::memcpy(&hu, &h, 4);
    std::memcpy(&bu, &bf, 4);
    if (hu != device.half_to_float[b]) ++mismatches;
    EXPECT_EQ(hu, device.half_to_float[b]) << "half bits " << std::hex << b;
    EXPECT_EQ(bu, device.bfloat16_to_float[b]) << "bfloat16 bits " << std::hex << b;
  }
  for (size_t i = 0; i < inputs.size() && mismatches < 10; ++i) {
    float f;
    std::memcpy(&f, &inputs[i], 4);
    const uint16_t h = float_to_half(f).bits;
    const uint16_t bf = float_to_bfloat16(f).bits;
    if (h != device.float_to_half[i] || bf != device.float_to_bfloat16[i]) ++mismatches;
    EXPECT_EQ(h, device.float_to_half[i]) << "float bits " << std::hex << inputs[i];
    EXPECT_EQ(bf, device.float_to_bfloat16[i]) << "float bits " << std::hex << inputs[i];
  }
#endif
}

}  // namespace
}  // namespace colossal::kernels
