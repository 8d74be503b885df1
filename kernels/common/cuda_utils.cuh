// colossal::kernels — device-side helpers shared by the CUDA kernel families.
// Include only from .cu files.
#ifndef COLOSSAL_KERNELS_COMMON_CUDA_UTILS_CUH_
#define COLOSSAL_KERNELS_COMMON_CUDA_UTILS_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/dtype.h"
#include "kernels/common/status.h"

namespace colossal::kernels::cuda {

// The status of the last kernel launch (or any earlier asynchronous error).
inline KernelStatus last_launch_status() {
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return KernelStatus();
  return KernelStatus::cuda_error(static_cast<int>(err), cudaGetErrorString(err));
}

inline KernelStatus to_status(cudaError_t err) {
  if (err == cudaSuccess) return KernelStatus();
  return KernelStatus::cuda_error(static_cast<int>(err), cudaGetErrorString(err));
}

// Number of multiprocessors of the current device (0 if it cannot be read).
inline int multiprocessor_count() {
  int device = 0;
  int count = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return 0;
  if (cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) return 0;
  return count;
}

// Arithmetic type for an element type: half types compute in float.
template <typename T>
struct MathType {
  using type = T;
};
template <>
struct MathType<__half> {
  using type = float;
};
template <>
struct MathType<__nv_bfloat16> {
  using type = float;
};

template <typename T>
__device__ __forceinline__ typename MathType<T>::type to_math(T v) {
  return v;
}
template <>
__device__ __forceinline__ float to_math<__half>(__half v) {
  return __half2float(v);
}
template <>
__device__ __forceinline__ float to_math<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

template <typename T>
__device__ __forceinline__ T from_math(typename MathType<T>::type v) {
  return v;
}
template <>
__device__ __forceinline__ __half from_math<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_math<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// Calls f(T{}) with the CUDA element type for `dtype`; unsupported for others.
template <typename F>
KernelStatus dispatch_all_types(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kF32: return f(float{});
    case DType::kF16: return f(__half{});
    case DType::kBF16: return f(__nv_bfloat16{});
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
    case DType::kF16: return f(__half{});
    case DType::kBF16: return f(__nv_bfloat16{});
    default: return KernelStatus::unsupported("dtype must be float32, float16 or bfloat16");
  }
}

}  // namespace colossal::kernels::cuda

#endif  // COLOSSAL_KERNELS_COMMON_CUDA_UTILS_CUH_
