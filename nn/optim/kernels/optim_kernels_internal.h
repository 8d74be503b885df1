// Private to nn/optim/kernels: the SGD step's constants and the argument checks
// shared by the CPU and CUDA paths (host-includable: no CUDA headers).
#ifndef COLOSSAL_NN_OPTIM_KERNELS_OPTIM_KERNELS_INTERNAL_H_
#define COLOSSAL_NN_OPTIM_KERNELS_OPTIM_KERNELS_INTERNAL_H_

#include <cmath>
#include <cstdint>

#include "kernels/common/dtype.h"
#include "kernels/common/status.h"
#include "nn/optim/kernels/optim_kernels.h"

namespace colossal::nn::optim_kernels::internal {

// The step's constants, rounded to float once on the host.
struct SgdConsts {
  float neg_lr;
  float momentum;
  float one_minus_dampening;
  float weight_decay;
  float grad_scale;
  int32_t unscale;       // grad_scale != 1
  int32_t decay;         // weight_decay != 0
  int32_t use_momentum;  // momentum != 0
  int32_t nesterov;
  int32_t first;         // the momentum buffer is new
};

inline bool finite_nonneg(float x) { return std::isfinite(x) && x >= 0.0f; }

inline KernelStatus make_sgd_consts(const SgdKernelOptions& o, SgdConsts* k) {
  if (!finite_nonneg(o.lr)) return KernelStatus::invalid_argument("sgd: lr must be >= 0");
  if (!finite_nonneg(o.momentum)) {
    return KernelStatus::invalid_argument("sgd: momentum must be >= 0");
  }
  if (!finite_nonneg(o.dampening) || o.dampening > 1.0f) {
    return KernelStatus::invalid_argument("sgd: dampening must be in [0, 1]");
  }
  if (!finite_nonneg(o.weight_decay)) {
    return KernelStatus::invalid_argument("sgd: weight_decay must be >= 0");
  }
  if (!std::isfinite(o.grad_scale) || !(o.grad_scale > 0.0f)) {
    return KernelStatus::invalid_argument("sgd: grad_scale must be positive and finite");
  }
  k->neg_lr = -o.lr;
  k->momentum = o.momentum;
  k->one_minus_dampening = static_cast<float>(1.0 - static_cast<double>(o.dampening));
  k->weight_decay = o.weight_decay;
  k->grad_scale = o.grad_scale;
  k->unscale = o.grad_scale != 1.0f;
  k->decay = o.weight_decay != 0.0f;
  k->use_momentum = o.momentum != 0.0f;
  k->nesterov = o.nesterov;
  k->first = o.first_step;
  return KernelStatus();
}

inline bool float_dtype(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16;
}

inline KernelStatus check_sgd_args(const float* param, const float* momentum_buffer,
                                   const void* grad, int64_t n, DType grad_dtype,
                                   DType copy_dtype, const SgdConsts& k) {
  if (n < 0) return KernelStatus::invalid_argument("sgd: n < 0");
  if (!float_dtype(grad_dtype)) {
    return KernelStatus::unsupported("sgd: grad dtype must be float32, float16 or bfloat16");
  }
  if (!float_dtype(copy_dtype)) {
    return KernelStatus::unsupported("sgd: model copy dtype must be float32, float16 or bfloat16");
  }
  if (n == 0) return KernelStatus();
  if (param == nullptr || grad == nullptr) {
    return KernelStatus::invalid_argument("sgd: null param or grad with n > 0");
  }
  if (k.use_momentum && momentum_buffer == nullptr) {
    return KernelStatus::invalid_argument("sgd: momentum != 0 needs a momentum buffer");
  }
  if (k.nesterov && !k.use_momentum) {
    return KernelStatus::invalid_argument("sgd: nesterov needs momentum > 0");
  }
  return KernelStatus();
}

inline KernelStatus check_clamp_args(const void* data, int64_t n, DType dtype, float lo,
                                     float hi) {
  if (n < 0) return KernelStatus::invalid_argument("clamp: n < 0");
  if (!float_dtype(dtype)) {
    return KernelStatus::unsupported("clamp: dtype must be float32, float16 or bfloat16");
  }
  if (std::isnan(lo) || std::isnan(hi) || lo > hi) {
    return KernelStatus::invalid_argument("clamp: needs lo <= hi");
  }
  if (n > 0 && data == nullptr) return KernelStatus::invalid_argument("clamp: null data with n > 0");
  return KernelStatus();
}

}  // namespace colossal::nn::optim_kernels::internal

#endif  // COLOSSAL_NN_OPTIM_KERNELS_OPTIM_KERNELS_INTERNAL_H_
