// CPU SGD step and clamp: the reference the CUDA path must equal bit for bit.
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/common/dispatch.h"
#include "kernels/common/half.h"
#include "nn/optim/kernels/optim_kernels.h"
#include "nn/optim/kernels/optim_kernels_internal.h"

namespace colossal::nn::optim_kernels {
namespace {

using ::colossal::kernels::BFloat16;
using ::colossal::kernels::Half;
using internal::SgdConsts;

// One element; the CUDA kernel has the same sequence with __fmaf_rn / __fdiv_rn.
inline void sgd_element(float& p, float* buf, float g, const SgdConsts& k) {
  if (k.unscale) g = g / k.grad_scale;
  if (k.decay) g = std::fma(k.weight_decay, p, g);
  if (k.use_momentum) {
    const float b = k.first ? g : std::fma(k.momentum, *buf, k.one_minus_dampening * g);
    *buf = b;
    g = k.nesterov ? std::fma(k.momentum, b, g) : b;
  }
  p = std::fma(k.neg_lr, g, p);
}

template <typename G, typename C>
void sgd_range(float* p, float* buf, C* copy, const G* g, int64_t n, const SgdConsts& k) {
  for (int64_t i = 0; i < n; ++i) {
    float pi = p[i];
    sgd_element(pi, buf == nullptr ? nullptr : buf + i, ::colossal::kernels::to_float(g[i]), k);
    p[i] = pi;
    if (copy != nullptr) copy[i] = ::colossal::kernels::from_float<C>(pi);
  }
}

}  // namespace

KernelStatus sgd_step_cpu(float* param, float* momentum_buffer, void* model_copy, const void* grad,
                          int64_t n, DType grad_dtype, DType copy_dtype,
                          const SgdKernelOptions& options) {
  SgdConsts k;
  KernelStatus s = internal::make_sgd_consts(options, &k);
  if (!s.ok()) return s;
  s = internal::check_sgd_args(param, momentum_buffer, grad, n, grad_dtype, copy_dtype, k);
  if (!s.ok() || n == 0) return s;
  float* buf = k.use_momentum ? momentum_buffer : nullptr;
  return ::colossal::kernels::dispatch_float_types(grad_dtype, [&](auto gtag) {
    using G = decltype(gtag);
    return ::colossal::kernels::dispatch_float_types(copy_dtype, [&](auto ctag) {
      using C = decltype(ctag);
      sgd_range<G, C>(param, buf, static_cast<C*>(model_copy), static_cast<const G*>(grad), n, k);
      return KernelStatus();
    });
  });
}

KernelStatus clamp_cpu(void* data, int64_t n, DType dtype, float lo, float hi) {
  KernelStatus s = internal::check_clamp_args(data, n, dtype, lo, hi);
  if (!s.ok() || n == 0) return s;
  return ::colossal::kernels::dispatch_float_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* x = static_cast<T*>(data);
    for (int64_t i = 0; i < n; ++i) {
      float v = ::colossal::kernels::to_float(x[i]);
      v = v < lo ? lo : (v > hi ? hi : v);  // NaN compares false both ways: kept
      x[i] = ::colossal::kernels::from_float<T>(v);
    }
    return KernelStatus();
  });
}

}  // namespace colossal::nn::optim_kernels
