// colossal::kernels — a double result stored in T with exactly one rounding,
// for the CPU reference paths (host code only; not for .cu files).
//
// float16/bfloat16: the double is first narrowed to float "round to odd"
// (toward zero, last bit set when inexact). Float keeps at least 13 more bits
// than either 16-bit type, so the following float -> 16-bit rounding equals
// the one correct double -> 16-bit rounding (no double rounding).
//
//   p[i] = round_once<BFloat16>(acc);   // acc: double
#ifndef COLOSSAL_KERNELS_COMMON_ROUND_ONCE_H_
#define COLOSSAL_KERNELS_COMMON_ROUND_ONCE_H_

#include <cmath>
#include <type_traits>

#include "kernels/common/dispatch.h"
#include "kernels/common/exact_math.h"

namespace colossal::kernels {

// v narrowed to float toward zero with the last bit set when inexact.
inline float round_to_odd(double v) {
  float f = static_cast<float>(v);
  if (!std::isfinite(f) || static_cast<double>(f) == v) return f;
  if (std::fabs(static_cast<double>(f)) > std::fabs(v)) f = std::nextafter(f, 0.0f);
  return exact::bits_float(exact::float_bits(f) | 1u);
}

// v rounded once to T (double, float, Half, BFloat16).
template <typename T>
T round_once(double v) {
  if constexpr (std::is_same_v<T, double>) {
    return v;
  } else if constexpr (std::is_same_v<T, float>) {
    return static_cast<float>(v);
  } else {
    return from_math<T>(round_to_odd(v));
  }
}

}  // namespace colossal::kernels

#endif  // COLOSSAL_KERNELS_COMMON_ROUND_ONCE_H_
