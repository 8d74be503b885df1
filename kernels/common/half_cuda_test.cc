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
  // Count mismatches per conversion and show the first of each.
  int mismatches[4] = {0, 0, 0, 0};
  const char* names[4] = {"__half2float", "__bfloat162float", "__float2half_rn", "__float2bfloat16_rn"};
  auto check = [&](int which, uint32_t got, uint32_t want, uint32_t input) {
    if (got == want) return;
    if (mismatches[which]++ == 0) {
      ADD_FAILURE() << names[which] << "(0x" << std::hex << input << "): host 0x" << got
                    << ", device 0x" << want;
    }
  };
  for (uint32_t b = 0; b < 65536; ++b) {
    check(0, internal::float_bits(half_to_float(Half{uint16_t(b)})), device.half_to_float[b], b);
    check(1, internal::float_bits(bfloat16_to_float(BFloat16{uint16_t(b)})),
          device.bfloat16_to_float[b], b);
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    float f;
    std::memcpy(&f, &inputs[i], 4);
    check(2, float_to_half(f).bits, device.float_to_half[i], inputs[i]);
    check(3, float_to_bfloat16(f).bits, device.float_to_bfloat16[i], inputs[i]);
  }
  for (int k = 0; k < 4; ++k) EXPECT_EQ(mismatches[k], 0) << names[k];
#endif
}

}  // namespace
}  // namespace colossal::kernels
