// colossal::kernels — dtype dispatch for CPU implementations.
//
//   return dispatch_all_types(dtype, [&](auto tag) {
//     using T = decltype(tag);   // float, Half, BFloat16, double, int32_t, ...
//     ...
//     return KernelStatus();
//   });
#ifndef COLOSSAL_KERNELS_COMMON_DISPATCH_H_
#define COLOSSAL_KERNELS_COMMON_DISPATCH_H_

#include <cstdint>
#include <type_traits>

#include "kernels/common/dtype.h"
#include "kernels/common/half.h"
#include "kernels/common/status.h"

namespace colossal::kernels {

// Arithmetic type for an element type: half types compute in float.
template <typename T>
struct CpuMathType {
  using type = T;
};
template <>
struct CpuMathType<Half> {
  using type = float;
};
template <>
struct CpuMathType<BFloat16> {
  using type = float;
};

template <typename T>
typename CpuMathType<T>::type to_math(T v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    return to_float(v);
  } else {
    return v;
  }
}

template <typename T>
T from_math(typename CpuMathType<T>::type v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    return from_float<T>(v);
  } else {
    return v;
  }
}

template <typename F>
KernelStatus dispatch_all_types(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kF32: return f(float{});
    case DType::kF16: return f(Half{});
    case DType::kBF16: return f(BFloat16{});
    case DType::kF64: return f(double{});
    case DType::kI32: return f(int32_t{});
    case DType::kI64: return f(int64_t{});
    case DType::kU8: return f(uint8_t{});
    case DType::kU16: return f(uint16_t{});
  }
  return KernelStatus::unsupported("unknown dtype");
}

template <typename F>
KernelStatus dispatch_float_types(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kF32: return f(float{});
    case DType::kF16: return f(Half{});
    case DType::kBF16: return f(BFloat16{});
    default: return KernelStatus::unsupported("dtype must be float32, float16 or bfloat16");
  }
}

}  // namespace colossal::kernels

#endif  // COLOSSAL_KERNELS_COMMON_DISPATCH_H_
