// The distributions of kernels/random, compiled for host and device from this
// one source. Internal to kernels/random.
//
// Bit-identical on CPU and GPU: every floating-point step is one IEEE
// operation (+, -, *, /, sqrt) rounded to nearest, which both sides compute
// exactly alike. On the device the explicit __f*_rn intrinsics keep nvcc from
// fusing a*b + c into an FMA (its default); GCC in ISO C++ mode does not
// contract, and the x86-64 baseline has no FMA. log, sin and cos are not
// taken from libm / CUDA's math library (whose last bits differ): they are
// short polynomials below, accurate to a few float32 ulps, which is plenty
// for random normals.
#ifndef COLOSSAL_KERNELS_RANDOM_RANDOM_MATH_H_
#define COLOSSAL_KERNELS_RANDOM_RANDOM_MATH_H_

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/common/dtype.h"
#include "kernels/common/exact_math.h"
#include "kernels/common/host_device.h"
#include "kernels/common/status.h"
#include "kernels/random/philox.h"


namespace colossal::kernels::random::internal {

using exact::bits_float;
using exact::fadd;
using exact::fdiv;
using exact::float_bits;
using exact::fmul;
using exact::fsqrt;

// -2 ln(u) for u = k * 2^-24, 1 <= k <= 2^24 (so u in (0, 1], never 0).
// u = 2^e * m with m in [sqrt(1/2), sqrt(2)); ln m = 2 atanh(s) with
// s = (m - 1) / (m + 1), |s| <= 0.172, as an odd series to s^11 (truncation
// below 1e-10 relative); e ln 2 with ln 2 split in a 17-bit head (e * head
// exact) and a tail (fdlibm's constants).
COLOSSAL_HOST_DEVICE float minus_two_log(uint32_t k) {
  const float u = fmul(static_cast<float>(k), 1.0f / 16777216.0f);  // exact
  const uint32_t bits = float_bits(u);
  int e = static_cast<int>(bits >> 23) - 127;  // u >= 2^-24 is normal
  float m = bits_float((bits & 0x007fffffu) | 0x3f800000u);  // [1, 2)
  if (m > 1.41421356f) {
    m = fmul(m, 0.5f);  // exact
    e += 1;
  }
  const float s = fdiv(fadd(m, -1.0f), fadd(m, 1.0f));  // m - 1 is exact
  const float z = fmul(s, s);
  float p = 1.0f / 11.0f;
  p = fadd(fmul(p, z), 1.0f / 9.0f);
  p = fadd(fmul(p, z), 1.0f / 7.0f);
  p = fadd(fmul(p, z), 1.0f / 5.0f);
  p = fadd(fmul(p, z), 1.0f / 3.0f);
  const float t = fmul(s, 2.0f);                       // exact
  const float log_m = fadd(t, fmul(t, fmul(z, p)));    // 2s (1 + z/3 + z^2/5 + ...)
  const float fe = static_cast<float>(e);
  constexpr float kLn2Hi = 6.9313812256e-01f;  // 0x3f317180
  constexpr float kLn2Lo = 9.0580006145e-06f;  // 0x3717f7d1
  const float log_u = fadd(fmul(fe, kLn2Hi), fadd(fmul(fe, kLn2Lo), log_m));
  return fmul(log_u, -2.0f);
}

// sin and cos of 2 pi j / 2^24 for 0 <= j < 2^24. The quadrant and the
// reflection to [0, pi/4] are exact integer steps on j; Taylor polynomials on
// [0, pi/4] (truncation below 3e-9 relative).
COLOSSAL_HOST_DEVICE void sincos_turns(uint32_t j, float* sin_out, float* cos_out) {
  const uint32_t quadrant = j >> 22;
  uint32_t r = j & 0x3fffffu;               // angle in the quadrant: (pi / 2) r / 2^22
  const bool reflect = r > 0x200000u;       // past pi/4: use pi/2 - angle
  if (reflect) r = 0x400000u - r;
  const float x = fmul(static_cast<float>(r), 3.14159265358979f / 8388608.0f);  // r * pi / 2^23
  const float z = fmul(x, x);
  float ps = 1.0f / 362880.0f;
  ps = fadd(fmul(ps, z), -1.0f / 5040.0f);
  ps = fadd(fmul(ps, z), 1.0f / 120.0f);
  ps = fadd(fmul(ps, z), -1.0f / 6.0f);
  const float sin_x = fadd(x, fmul(fmul(x, z), ps));
  float pc = -1.0f / 3628800.0f;
  pc = fadd(fmul(pc, z), 1.0f / 40320.0f);
  pc = fadd(fmul(pc, z), -1.0f / 720.0f);
  pc = fadd(fmul(pc, z), 1.0f / 24.0f);
  pc = fadd(fmul(pc, z), -0.5f);
  const float cos_x = fadd(1.0f, fmul(z, pc));
  const float s = reflect ? cos_x : sin_x;  // sin and cos of the angle in the quadrant
  const float c = reflect ? sin_x : cos_x;
  switch (quadrant) {  // angle + quadrant * pi/2
    case 0: *sin_out = s; *cos_out = c; break;
    case 1: *sin_out = c; *cos_out = -s; break;
    case 2: *sin_out = -s; *cos_out = -c; break;
    default: *sin_out = -c; *cos_out = s; break;
  }
}

// Box-Muller: two standard normals from two random words,
// r = sqrt(-2 ln u1) with u1 = (a >> 8) + 1 in 2^-24 units (in (0, 1]), and
// angle 2 pi (b >> 8) / 2^24; z0 = r cos, z1 = r sin. |z| <= 5.77.
COLOSSAL_HOST_DEVICE void box_muller(uint32_t a, uint32_t b, float* z0, float* z1) {
  const float r = fsqrt(minus_two_log((a >> 8) + 1u));
  float s, c;
  sincos_turns(b >> 8, &s, &c);
  *z0 = fmul(r, c);
  *z1 = fmul(r, s);
}

// Distributions: values for the four stream elements of one Philox block, in
// the math type M (float for float32/float16/bfloat16, double for float64).
template <typename M>
struct Uniform {
  M lo;
  M range;  // hi - lo, rounded once to M
  COLOSSAL_HOST_DEVICE void operator()(const PhiloxBlock& bits, M* v) const {
    for (int t = 0; t < 4; ++t) {
      const float u = uniform_float(bits.w[t]);
      if constexpr (sizeof(M) == 8) {
        v[t] = fadd(lo, fmul(range, static_cast<double>(u)));
      } else {
        v[t] = fadd(lo, fmul(range, u));
      }
    }
  }
};

// Element t of a block uses the pair (w[t & 2], w[(t & 2) + 1]): even t takes
// r cos, odd t r sin; then mean + std * z in M.
template <typename M>
struct Normal {
  M mean;
  M std;
  COLOSSAL_HOST_DEVICE void operator()(const PhiloxBlock& bits, M* v) const {
    float z[4];
    box_muller(bits.w[0], bits.w[1], &z[0], &z[1]);
    box_muller(bits.w[2], bits.w[3], &z[2], &z[3]);
    for (int t = 0; t < 4; ++t) {
      if constexpr (sizeof(M) == 8) {
        v[t] = fadd(mean, fmul(std, static_cast<double>(z[t])));
      } else {
        v[t] = fadd(mean, fmul(std, z[t]));
      }
    }
  }
};

// ---- Host-side argument checks shared by the CPU and CUDA entry points.

inline bool is_random_dtype(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 || t == DType::kF64;
}

inline KernelStatus check_fill(const char* what, const void* out, int64_t n, DType dtype) {
  if (n < 0 || (n > 0 && out == nullptr)) return KernelStatus::invalid_argument(what);
  if (!is_random_dtype(dtype)) {
    return KernelStatus::unsupported("random fill: dtype must be float32, float16, bfloat16 or float64");
  }
  return KernelStatus();
}

inline KernelStatus check_uniform(double lo, double hi) {
  if (!std::isfinite(lo) || !std::isfinite(hi) || !(lo <= hi) || !std::isfinite(hi - lo)) {
    return KernelStatus::invalid_argument("fill_uniform: lo and hi must be finite, lo <= hi");
  }
  return KernelStatus();
}

inline KernelStatus check_normal(double mean, double std) {
  if (!std::isfinite(mean) || !std::isfinite(std) || !(std >= 0)) {
    return KernelStatus::invalid_argument("fill_normal: mean and std must be finite, std >= 0");
  }
  return KernelStatus();
}

}  // namespace colossal::kernels::random::internal

#endif  // COLOSSAL_KERNELS_RANDOM_RANDOM_MATH_H_
