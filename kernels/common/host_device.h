// colossal::kernels — COLOSSAL_HOST_DEVICE marks a function that one source
// compiles for both the host (the CPU path) and the device (the CUDA path), so
// the two compute the same function. Under nvcc it is
// `__host__ __device__ __forceinline__`; under a host compiler, `inline`.
#ifndef COLOSSAL_KERNELS_COMMON_HOST_DEVICE_H_
#define COLOSSAL_KERNELS_COMMON_HOST_DEVICE_H_

#if defined(__CUDACC__)
#define COLOSSAL_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define COLOSSAL_HOST_DEVICE inline
#endif

#endif  // COLOSSAL_KERNELS_COMMON_HOST_DEVICE_H_
