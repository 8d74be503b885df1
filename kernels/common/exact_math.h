// colossal::kernels::exact — floating-point steps that give the same bits on
// the host and the device, for kernels whose CPU and CUDA paths must agree bit
// for bit (elementwise, random).
//
// Each arithmetic function is one IEEE operation rounded to nearest. On the
// device they are the __f*_rn / __d*_rn intrinsics, which nvcc never fuses into
// an FMA (its default --fmad=true would otherwise contract a*b + c); on the
// host GCC in ISO C++ mode does not contract (-ffp-contract=off) and the
// x86-64 baseline has no FMA instruction. The bit casts reinterpret without
// conversion.
//
//   using namespace colossal::kernels::exact;
//   float y = fadd(fmul(a, x), b);           // two roundings, never one FMA
//   uint32_t bits = float_bits(y);
#ifndef COLOSSAL_KERNELS_COMMON_EXACT_MATH_H_
#define COLOSSAL_KERNELS_COMMON_EXACT_MATH_H_

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/common/host_device.h"

namespace colossal::kernels::exact {

COLOSSAL_HOST_DEVICE uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
#endif
}

COLOSSAL_HOST_DEVICE float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
#endif
}

COLOSSAL_HOST_DEVICE double bits_double(uint64_t u) {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(static_cast<long long>(u));
#else
  double d;
  std::memcpy(&d, &u, sizeof(d));
  return d;
#endif
}

COLOSSAL_HOST_DEVICE float fmul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
COLOSSAL_HOST_DEVICE float fadd(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
COLOSSAL_HOST_DEVICE float fsub(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
COLOSSAL_HOST_DEVICE float fdiv(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
COLOSSAL_HOST_DEVICE float fsqrt(float a) {
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}

COLOSSAL_HOST_DEVICE double fmul(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
COLOSSAL_HOST_DEVICE double fadd(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
COLOSSAL_HOST_DEVICE double fsub(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dsub_rn(a, b);
#else
  return a - b;
#endif
}

}  // namespace colossal::kernels::exact

#endif  // COLOSSAL_KERNELS_COMMON_EXACT_MATH_H_
