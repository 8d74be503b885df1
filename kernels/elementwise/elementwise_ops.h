// The element functions of kernels/elementwise, compiled for the host (CPU
// path) and the device (CUDA path) from this one source, so both compute the
// same function bit for bit. Internal to kernels/elementwise.
//
// Values here are "math values": float for float32/float16/bfloat16, double
// for float64, the integer type itself for integers. Loading an element into
// its math value and storing it back (to_math/from_math) is done by each side
// with its own half types: float16/bfloat16 -> float is exact, float ->
// float16/bfloat16 rounds to nearest even and maps NaN to 0x7fff on both.
//
// Floating-point arithmetic goes through fmul/fadd/fsub from
// kernels/common/exact_math.h, which are never fused into an FMA on either
// side: every result is one IEEE rounding per operation on host and device.
#ifndef COLOSSAL_KERNELS_ELEMENTWISE_ELEMENTWISE_OPS_H_
#define COLOSSAL_KERNELS_ELEMENTWISE_ELEMENTWISE_OPS_H_

#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "kernels/common/exact_math.h"
#include "kernels/common/host_device.h"

namespace colossal::kernels::elementwise::internal {

using exact::bits_double;
using exact::bits_float;
using exact::fadd;
using exact::float_bits;
using exact::fmul;
using exact::fsub;

// Every NaN a kernel produces is the canonical quiet NaN (the one the GPU's
// float arithmetic produces), so NaN results are bit-identical too: x86 would
// otherwise keep an input's payload or produce the negative "default NaN".
COLOSSAL_HOST_DEVICE float canonical_nan(float v) { return v != v ? bits_float(0x7fffffffu) : v; }
COLOSSAL_HOST_DEVICE double canonical_nan(double v) {
  return v != v ? bits_double(0x7fffffffffffffffull) : v;
}

// Integer arithmetic wraps modulo 2^bits (two's complement): computed in an
// unsigned type of at least 32 bits, so uint8/uint16 never promote to a signed
// int that could overflow (undefined behaviour in C++), then converted back
// (modular since C++20).
template <typename M>
using WrapType = std::conditional_t<(sizeof(M) < 4), uint32_t, std::make_unsigned_t<M>>;

struct AddOp {
  template <typename M>
  COLOSSAL_HOST_DEVICE M operator()(M a, M b) const {
    if constexpr (std::is_floating_point_v<M>) {
      return canonical_nan(fadd(a, b));
    } else {
      return static_cast<M>(static_cast<WrapType<M>>(a) + static_cast<WrapType<M>>(b));
    }
  }
};
struct SubOp {
  template <typename M>
  COLOSSAL_HOST_DEVICE M operator()(M a, M b) const {
    if constexpr (std::is_floating_point_v<M>) {
      return canonical_nan(fsub(a, b));
    } else {
      return static_cast<M>(static_cast<WrapType<M>>(a) - static_cast<WrapType<M>>(b));
    }
  }
};
struct MulOp {
  template <typename M>
  COLOSSAL_HOST_DEVICE M operator()(M a, M b) const {
    if constexpr (std::is_floating_point_v<M>) {
      return canonical_nan(fmul(a, b));
    } else {
      return static_cast<M>(static_cast<WrapType<M>>(a) * static_cast<WrapType<M>>(b));
    }
  }
};

// out = alpha * a (floating math types only; alpha already in the math type).
template <typename M>
struct ScaleOp {
  M alpha;
  COLOSSAL_HOST_DEVICE M operator()(M a) const { return canonical_nan(fmul(alpha, a)); }
};

// out = alpha * a + beta * b, two products then one sum, each rounded.
template <typename M>
struct AxpbyOp {
  M alpha;
  M beta;
  COLOSSAL_HOST_DEVICE M operator()(M a, M b) const {
    return canonical_nan(fadd(fmul(alpha, a), fmul(beta, b)));
  }
};

// ---- Conversions ---------------------------------------------------------

// double -> float rounded to odd: the nearest float toward zero, with its last
// bit set when the conversion was inexact. Rounding that float to nearest even
// at 16-bit precision (11 or 8 significant bits, at least 2 fewer than float's
// 24) gives the correctly rounded result of the original double; a plain
// double -> float -> half conversion would round twice and could break a tie
// the wrong way.
COLOSSAL_HOST_DEVICE float double_to_float_odd(double d) {
  const float f = static_cast<float>(d);  // round to nearest even
  const double back = static_cast<double>(f);
  if (back == d || d != d) return f;
  uint32_t bits = float_bits(f);
  const double abs_back = back < 0 ? -back : back;
  const double abs_d = d < 0 ? -d : d;
  if (abs_back > abs_d) bits -= 1;  // rounded away from zero: step back (sign-magnitude)
  return bits_float(bits | 1u);
}

// Integer -> float rounded to odd, for the same reason (int32/int64 values
// above 2^24 are not exact in float).
template <typename I>
COLOSSAL_HOST_DEVICE float int_to_float_odd(I v) {
  if constexpr (sizeof(I) <= 2) {
    return static_cast<float>(v);  // exact
  } else if constexpr (sizeof(I) == 4) {
    return double_to_float_odd(static_cast<double>(v));  // int32 is exact in double
  } else {
    const bool negative = v < 0;
    const uint64_t mag = negative ? uint64_t{0} - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
    // Keep 53 bits, jamming the dropped ones into the last kept bit (round to
    // odd at 53 bits, exact in double); rounding that to odd at 24 bits equals
    // rounding the integer to odd at 24 bits directly.
    const uint64_t kept = (mag >> 11) | ((mag & 0x7ffu) != 0 ? 1u : 0u);
    const double d = mag < (uint64_t{1} << 53) ? static_cast<double>(mag)
                                               : static_cast<double>(kept) * 2048.0;
    const float f = double_to_float_odd(d);
    return negative ? -f : f;
  }
}

// float/double -> integer: truncation toward zero, saturating at the type's
// limits; NaN -> 0. (The same as CUDA's cvt.rzi.sat; C++'s static_cast is
// undefined out of range.)
template <typename I, typename F>
COLOSSAL_HOST_DEVICE I float_to_int(F x) {
  if (x != x) return I{0};
  constexpr int kBits = static_cast<int>(sizeof(I) * 8) - (std::is_signed_v<I> ? 1 : 0);
  constexpr F kUpper = static_cast<F>(static_cast<uint64_t>(1) << kBits);  // exclusive, exact
  constexpr F kLower = std::is_signed_v<I> ? -kUpper : F(0);
  if (x >= kUpper) return std::numeric_limits<I>::max();
  if (x <= kLower) return std::numeric_limits<I>::min();
  return static_cast<I>(x);
}

// Converts math value `v` to the math value of the destination type:
//   DstM = float, kDstHalf = true : a float whose round-to-nearest-even to
//       float16/bfloat16 (from_math) is the correctly rounded result;
//   DstM = float (float32), double : nearest (ints, double->float) or exact;
//       NaN becomes the canonical NaN;
//   DstM = integer : float sources truncate and saturate (NaN -> 0); integer
//       sources wrap modulo 2^bits, like static_cast.
template <typename DstM, bool kDstHalf, typename SrcM>
COLOSSAL_HOST_DEVICE DstM convert(SrcM v) {
  if constexpr (kDstHalf) {
    static_assert(std::is_same_v<DstM, float>);
    if constexpr (std::is_same_v<SrcM, float>) {
      return v;
    } else if constexpr (std::is_same_v<SrcM, double>) {
      return double_to_float_odd(v);
    } else {
      return int_to_float_odd(v);
    }
  } else if constexpr (std::is_floating_point_v<DstM>) {
    if constexpr (std::is_floating_point_v<SrcM>) {
      return canonical_nan(static_cast<DstM>(v));
    } else {
      return static_cast<DstM>(v);  // int -> float/double: round to nearest even
    }
  } else if constexpr (std::is_floating_point_v<SrcM>) {
    return float_to_int<DstM>(v);
  } else {
    return static_cast<DstM>(v);  // modular since C++20
  }
}

}  // namespace colossal::kernels::elementwise::internal

#endif  // COLOSSAL_KERNELS_ELEMENTWISE_ELEMENTWISE_OPS_H_
