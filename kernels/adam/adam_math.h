// Private to kernels/adam: the per-step constants every path shares, argument
// checks, and the CUDA launch table's layout (host-includable: no CUDA headers).
#ifndef COLOSSAL_KERNELS_ADAM_ADAM_MATH_H_
#define COLOSSAL_KERNELS_ADAM_ADAM_MATH_H_

#include <cmath>
#include <cstdint>

#include "kernels/adam/adam.h"
#include "kernels/common/dtype.h"
#include "kernels/common/status.h"

namespace colossal::kernels::adam::internal {

// The step's constants, computed once in double and rounded to float, so the CPU
// and CUDA paths multiply by the very same numbers.
struct AdamConsts {
  float beta1;
  float beta2;
  float one_minus_beta1;
  float one_minus_beta2;
  float eps;
  float weight_decay;   // used in L2 mode
  float decay;          // 1 - lr * weight_decay, used in decoupled mode
  float neg_step_size;  // -lr / bc1
  float inv_sqrt_bc2;   // 1 / sqrt(bc2)
  float grad_scale;
  int32_t unscale;      // grad_scale != 1
  int32_t l2;           // L2 mode with weight_decay != 0
  int32_t decoupled;    // AdamW mode with weight_decay != 0
};

inline bool finite(double x) { return std::isfinite(x); }

inline KernelStatus make_consts(const AdamOptions& o, AdamConsts* k) {
  if (o.step < 1) return KernelStatus::invalid_argument("adam: step must be >= 1");
  if (!finite(o.lr) || o.lr < 0) return KernelStatus::invalid_argument("adam: lr must be >= 0");
  if (!finite(o.beta1) || o.beta1 < 0 || o.beta1 >= 1 || !finite(o.beta2) || o.beta2 < 0 ||
      o.beta2 >= 1) {
    return KernelStatus::invalid_argument("adam: betas must be in [0, 1)");
  }
  if (!finite(o.eps) || o.eps < 0) return KernelStatus::invalid_argument("adam: eps must be >= 0");
  if (!finite(o.weight_decay) || o.weight_decay < 0) {
    return KernelStatus::invalid_argument("adam: weight_decay must be >= 0");
  }
  if (!finite(o.grad_scale) || !(o.grad_scale > 0)) {
    return KernelStatus::invalid_argument("adam: grad_scale must be positive and finite");
  }
  const double t = static_cast<double>(o.step);
  const double bc1 = o.bias_correction ? 1.0 - std::pow(static_cast<double>(o.beta1), t) : 1.0;
  const double bc2 = o.bias_correction ? 1.0 - std::pow(static_cast<double>(o.beta2), t) : 1.0;
  k->beta1 = o.beta1;
  k->beta2 = o.beta2;
  k->one_minus_beta1 = static_cast<float>(1.0 - static_cast<double>(o.beta1));
  k->one_minus_beta2 = static_cast<float>(1.0 - static_cast<double>(o.beta2));
  k->eps = o.eps;
  k->weight_decay = o.weight_decay;
  k->decay = static_cast<float>(1.0 - static_cast<double>(o.lr) * o.weight_decay);
  k->neg_step_size = static_cast<float>(-static_cast<double>(o.lr) / bc1);
  k->inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  k->grad_scale = o.grad_scale;
  k->unscale = o.grad_scale != 1.0f;
  k->l2 = !o.adamw_mode && o.weight_decay != 0.0f;
  k->decoupled = o.adamw_mode && o.weight_decay != 0.0f;
  return KernelStatus();
}

inline bool grad_dtype_ok(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16;
}

inline KernelStatus check_dtypes(DType grad_dtype, DType copy_dtype) {
  if (!grad_dtype_ok(grad_dtype)) {
    return KernelStatus::unsupported("adam: grad dtype must be float32, float16 or bfloat16");
  }
  if (!grad_dtype_ok(copy_dtype)) {
    return KernelStatus::unsupported("adam: model copy dtype must be float32, float16 or bfloat16");
  }
  return KernelStatus();
}

inline bool aligned_to(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// Checks one tensor's buffers: non-null when n > 0 and aligned to element size.
inline KernelStatus check_tensor(const float* param, const float* m, const float* v,
                                 const void* grad, const void* copy, int64_t n, DType grad_dtype,
                                 DType copy_dtype) {
  if (n < 0) return KernelStatus::invalid_argument("adam: n < 0");
  if (n == 0) return KernelStatus();
  if (param == nullptr || m == nullptr || v == nullptr || grad == nullptr) {
    return KernelStatus::invalid_argument("adam: null param, m, v or grad with n > 0");
  }
  if (!aligned_to(param, 4) || !aligned_to(m, 4) || !aligned_to(v, 4) ||
      !aligned_to(grad, dtype_size(grad_dtype)) ||
      (copy != nullptr && !aligned_to(copy, dtype_size(copy_dtype)))) {
    return KernelStatus::invalid_argument("adam: a buffer is not aligned to its element size");
  }
  return KernelStatus();
}

// Checks a split-master call's buffers (adam_step_split_*).
inline KernelStatus check_split(const uint16_t* hi, const int16_t* lo, const float* m,
                                const float* v, const void* grad, int64_t n, DType grad_dtype) {
  if (n < 0) return KernelStatus::invalid_argument("adam: n < 0");
  if (n == 0) return KernelStatus();
  if (hi == nullptr || lo == nullptr || m == nullptr || v == nullptr || grad == nullptr) {
    return KernelStatus::invalid_argument("adam: null hi, lo, m, v or grad with n > 0");
  }
  if (!aligned_to(hi, 2) || !aligned_to(lo, 2) || !aligned_to(m, 4) || !aligned_to(v, 4) ||
      !aligned_to(grad, dtype_size(grad_dtype))) {
    return KernelStatus::invalid_argument("adam: a buffer is not aligned to its element size");
  }
  return KernelStatus();
}

// ---- CUDA launch table (built on the host, read by the kernels) ----

// Elements per vector in the CUDA kernels (16 bytes of float32 state).
constexpr int kCudaVec = 4;
// Elements per CUDA block: a chunk never spans two tensors.
constexpr int64_t kCudaChunk = 16384;
// Descriptors carried in kernel parameters by one launch (56 bytes each, < 4 KiB).
constexpr int kParamDescs = 64;

struct AdamDesc {
  float* param;
  float* m;
  float* v;
  const void* grad;
  void* copy;
  int64_t n;
  int32_t chunk_begin;  // index of this tensor's first chunk within its launch
  int32_t head;         // elements done one by one before all buffers reach
                        // vector alignment; -1: buffers never align together
};

// Number of leading elements after which `p` (element size `es`) is aligned to
// kCudaVec elements, or -1 when it never is.
inline int32_t vector_head(const void* p, size_t es) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const uintptr_t align = kCudaVec * es;
  if (a % es != 0) return -1;
  return static_cast<int32_t>(((align - a % align) % align) / es);
}

// The common head of all of one tensor's buffers, or -1 if they disagree.
inline int32_t common_head(const float* param, const float* m, const float* v, const void* grad,
                           const void* copy, size_t grad_es, size_t copy_es) {
  const int32_t h = vector_head(param, 4);
  if (vector_head(m, 4) != h || vector_head(v, 4) != h || vector_head(grad, grad_es) != h) return -1;
  if (copy != nullptr && vector_head(copy, copy_es) != h) return -1;
  return h;
}

}  // namespace colossal::kernels::adam::internal

#endif  // COLOSSAL_KERNELS_ADAM_ADAM_MATH_H_
