// CUDA SGD step and clamp: grid-stride loops, one launch per call. The math is
// the CPU path's sequence with __fmaf_rn / __fdiv_rn, so nvcc can neither contract
// nor approximate it: results equal optim_kernels_cpu.cc bit for bit.
#include <algorithm>
#include <cstdint>

#include "kernels/common/cuda_utils.cuh"
#include "nn/optim/kernels/optim_kernels.h"
#include "nn/optim/kernels/optim_kernels_internal.h"

namespace colossal::nn::optim_kernels {
namespace {

namespace kcuda = ::colossal::kernels::cuda;
using internal::SgdConsts;

constexpr int kThreads = 256;

int grid_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  int sms = kcuda::multiprocessor_count();
  if (sms <= 0) sms = 132;
  return static_cast<int>(std::min<int64_t>(blocks, int64_t{sms} * 8));
}

template <typename G, typename C>
__global__ void sgd_kernel(float* __restrict__ p, float* __restrict__ buf, C* __restrict__ copy,
                           const G* __restrict__ g, int64_t n, SgdConsts k) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    float gi = kcuda::to_math(g[i]);
    float pi = p[i];
    if (k.unscale) gi = __fdiv_rn(gi, k.grad_scale);
    if (k.decay) gi = __fmaf_rn(k.weight_decay, pi, gi);
    if (k.use_momentum) {
      const float b =
          k.first ? gi : __fmaf_rn(k.momentum, buf[i], __fmul_rn(k.one_minus_dampening, gi));
      buf[i] = b;
      gi = k.nesterov ? __fmaf_rn(k.momentum, b, gi) : b;
    }
    pi = __fmaf_rn(k.neg_lr, gi, pi);
    p[i] = pi;
    if (copy != nullptr) copy[i] = kcuda::from_math<C>(pi);
  }
}

template <typename T>
__global__ void clamp_kernel(T* __restrict__ x, int64_t n, float lo, float hi) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    float v = kcuda::to_math(x[i]);
    v = v < lo ? lo : (v > hi ? hi : v);
    x[i] = kcuda::from_math<T>(v);
  }
}

}  // namespace

KernelStatus sgd_step_cuda(float* param, float* momentum_buffer, void* model_copy,
                           const void* grad, int64_t n, DType grad_dtype, DType copy_dtype,
                           const SgdKernelOptions& options, cudaStream_t stream) {
  SgdConsts k;
  KernelStatus s = internal::make_sgd_consts(options, &k);
  if (!s.ok()) return s;
  s = internal::check_sgd_args(param, momentum_buffer, grad, n, grad_dtype, copy_dtype, k);
  if (!s.ok() || n == 0) return s;
  float* buf = k.use_momentum ? momentum_buffer : nullptr;
  return kcuda::dispatch_float_types(grad_dtype, [&](auto gtag) {
    using G = decltype(gtag);
    return kcuda::dispatch_float_types(copy_dtype, [&](auto ctag) {
      using C = decltype(ctag);
      sgd_kernel<G, C><<<grid_for(n), kThreads, 0, stream>>>(
          param, buf, static_cast<C*>(model_copy), static_cast<const G*>(grad), n, k);
      return kcuda::last_launch_status();
    });
  });
}

KernelStatus clamp_cuda(void* data, int64_t n, DType dtype, float lo, float hi,
                        cudaStream_t stream) {
  KernelStatus s = internal::check_clamp_args(data, n, dtype, lo, hi);
  if (!s.ok() || n == 0) return s;
  return kcuda::dispatch_float_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    clamp_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(static_cast<T*>(data), n, lo, hi);
    return kcuda::last_launch_status();
  });
}

}  // namespace colossal::nn::optim_kernels
