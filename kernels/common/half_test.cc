#include "kernels/common/half.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

namespace colossal::kernels {
namespace {

TEST(HalfTest, KnownValues) {
  EXPECT_EQ(float_to_half(1.0f).bits, 0x3c00);
  EXPECT_EQ(float_to_half(1.0f / 3.0f).bits, 0x3555);
  EXPECT_EQ(float_to_half(-2.0f).bits, 0xc000);
  EXPECT_EQ(float_to_half(65504.0f).bits, 0x7bff);          // largest finite
  EXPECT_EQ(float_to_half(65519.99f).bits, 0x7bff);         // just under the tie
  EXPECT_EQ(float_to_half(65520.0f).bits, 0x7c00);          // tie rounds to even: inf
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -24)).bits, 0x0001);  // smallest subnormal
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -25)).bits, 0x0000);  // tie to even: zero
  EXPECT_EQ(float_to_half(std::ldexp(1.0001f, -25)).bits, 0x0001);
  EXPECT_EQ(float_to_half(std::ldexp(3.0f, -25)).bits, 0x0002);  // 1.5 ulp ties to 2
  EXPECT_EQ(float_to_half(-0.0f).bits, 0x8000);
  EXPECT_EQ(float_to_half(std::numeric_limits<float>::infinity()).bits, 0x7c00);
  EXPECT_EQ(float_to_half(-std::numeric_limits<float>::infinity()).bits, 0xfc00);
  EXPECT_EQ(float_to_half(std::nanf("")).bits, 0x7fff);
  EXPECT_EQ(float_to_half(-std::nanf("")).bits, 0x7fff);
  EXPECT_EQ(half_to_float(Half{0x0001}), std::ldexp(1.0f, -24));
  EXPECT_EQ(internal::float_bits(half_to_float(Half{0xfc01})), 0x7fffffffu);  // canonical NaN
  EXPECT_EQ(half_to_float(Half{0xfc00}), -std::numeric_limits<float>::infinity());
  EXPECT_EQ(half_to_float(Half{0x3bff}), 1.0f - std::ldexp(1.0f, -11));
}

TEST(BFloat16Test, KnownValues) {
  EXPECT_EQ(float_to_bfloat16(1.0f).bits, 0x3f80);
  EXPECT_EQ(float_to_bfloat16(1.0f / 3.0f).bits, 0x3eab);
  EXPECT_EQ(float_to_bfloat16(std::numeric_limits<float>::max()).bits, 0x7f80);  // rounds to inf
  EXPECT_EQ(float_to_bfloat16(std::nanf("")).bits, 0x7fff);
  EXPECT_EQ(float_to_bfloat16(-0.0f).bits, 0x8000);
  // 1 + 2^-8 is exactly between 1 and 1 + 2^-7: ties to even (1.0).
  EXPECT_EQ(float_to_bfloat16(1.0f + std::ldexp(1.0f, -8)).bits, 0x3f80);
  EXPECT_EQ(float_to_bfloat16(1.0f + 3 * std::ldexp(1.0f, -8)).bits, 0x3f82);
}

TEST(HalfTest, AllPatternsRoundTrip) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const Half h{static_cast<uint16_t>(b)};
    const float f = half_to_float(h);
    const bool is_nan = (b & 0x7c00) == 0x7c00 && (b & 0x3ff) != 0;
    EXPECT_EQ(std::isnan(f), is_nan) << std::hex << b;
    EXPECT_EQ(float_to_half(f).bits, is_nan ? 0x7fff : b) << std::hex << b;
  }
}

TEST(BFloat16Test, AllPatternsRoundTrip) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const BFloat16 h{static_cast<uint16_t>(b)};
    const float f = bfloat16_to_float(h);
    const bool is_nan = (b & 0x7f80) == 0x7f80 && (b & 0x7f) != 0;
    EXPECT_EQ(float_to_bfloat16(f).bits, is_nan ? 0x7fff : b) << std::hex << b;
  }
}

// Round to nearest even, checked against the neighbours in float64 on random floats.
template <typename T, typename ToFloat, typename FromFloat>
void check_nearest_even(ToFloat to_float_fn, FromFloat from_float_fn, float max_abs) {
  std::mt19937 rng(1234);
  std::uniform_int_distribution<uint32_t> bits;
  int checked = 0;
  while (checked < 200000) {
    const uint32_t u = bits(rng);
    float f;
    std::memcpy(&f, &u, 4);
    if (!std::isfinite(f) || std::fabs(f) >= max_abs) continue;
    ++checked;
    const T r = from_float_fn(f);
    const double v = to_float_fn(r);
    const T up{static_cast<uint16_t>(r.bits + 1)};
    const T down{static_cast<uint16_t>(r.bits - 1)};
    for (T n : {up, down}) {
      const double w = to_float_fn(n);
      if (std::isnan(w) || (n.bits & 0x7fff) == 0x7fff) continue;
      const double dv = std::fabs(double(f) - v), dw = std::fabs(double(f) - w);
      ASSERT_TRUE(dv < dw || (dv == dw && (r.bits & 1) == 0))
          << "f=" << f << " got=" << std::hex << r.bits << " neighbour=" << n.bits;
    }
  }
}

TEST(HalfTest, RoundsToNearestEven) {
  check_nearest_even<Half>(half_to_float, float_to_half, 65504.0f);
}

TEST(BFloat16Test, RoundsToNearestEven) {
  check_nearest_even<BFloat16>(bfloat16_to_float, float_to_bfloat16, 3.3e38f);
}

}  // namespace
}  // namespace colossal::kernels
