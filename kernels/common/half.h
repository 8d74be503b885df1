// colossal::kernels — host-side float16 and bfloat16 with CUDA's bit layout.
//
// Half and BFloat16 hold the same 16 bits as CUDA's __half and __nv_bfloat16,
// so buffers move between host and device unchanged. Conversions from float
// round to nearest even and turn any NaN into the canonical 0x7fff, exactly as
// __float2half / __float2bfloat16 do; conversions to float are exact (a half
// NaN becomes float's canonical NaN 0x7fffffff, as __half2float gives on the GPU).
//
//   Half h = float_to_half(1.0f / 3.0f);   // h.bits == 0x3555
//   float back = half_to_float(h);         // 0.333251953125f
#ifndef COLOSSAL_KERNELS_COMMON_HALF_H_
#define COLOSSAL_KERNELS_COMMON_HALF_H_

#include <cstdint>
#include <cstring>

#include "kernels/common/exact_math.h"

namespace colossal::kernels {

struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

namespace internal {
using exact::bits_float;
using exact::float_bits;
}  // namespace internal

inline float half_to_float(Half h) {
  const uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  const uint32_t exponent = (h.bits >> 10) & 0x1fu;
  uint32_t mantissa = h.bits & 0x3ffu;
  if (exponent == 0x1f) {
    // inf keeps its sign; NaN becomes the canonical 0x7fffffff, as on the device.
    return internal::bits_float(mantissa ? 0x7fffffffu : (sign | 0x7f800000u));
  }
  if (exponent == 0) {
    if (mantissa == 0) return internal::bits_float(sign);
    // Subnormal half: normalise into a float exponent.
    uint32_t e = 113;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --e;
    }
    return internal::bits_float(sign | (e << 23) | ((mantissa & 0x3ffu) << 13));
  }
  return internal::bits_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

inline Half float_to_half(float f) {
  const uint32_t x = internal::float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return Half{0x7fff};                      // NaN
  if (abs >= 0x477ff000u) return Half{uint16_t(sign | 0x7c00u)};   // rounds to inf
  if (abs < 0x38800000u) {                                         // below 2^-14
    if (abs <= 0x33000000u) return Half{sign};                     // rounds to zero
    const uint32_t exponent = abs >> 23;
    const uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exponent;
    uint32_t result = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (result & 1u))) ++result;
    return Half{uint16_t(sign | result)};
  }
  uint32_t result = (abs >> 13) - (112u << 10);
  const uint32_t rest = abs & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (result & 1u))) ++result;
  return Half{uint16_t(sign | result)};
}

inline float bfloat16_to_float(BFloat16 b) {
  return internal::bits_float(static_cast<uint32_t>(b.bits) << 16);
}

inline BFloat16 float_to_bfloat16(float f) {
  const uint32_t x = internal::float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return BFloat16{0x7fff};  // NaN
  const uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return BFloat16{static_cast<uint16_t>((x + rounding) >> 16)};
}

// Overloads so templated CPU reference code can convert any float type.
inline float to_float(float v) { return v; }
inline double to_float(double v) { return v; }
inline float to_float(Half v) { return half_to_float(v); }
inline float to_float(BFloat16 v) { return bfloat16_to_float(v); }

template <typename T>
T from_float(float v);
template <>
inline float from_float<float>(float v) { return v; }
template <>
inline Half from_float<Half>(float v) { return float_to_half(v); }
template <>
inline BFloat16 from_float<BFloat16>(float v) { return float_to_bfloat16(v); }

}  // namespace colossal::kernels

#endif  // COLOSSAL_KERNELS_COMMON_HALF_H_
