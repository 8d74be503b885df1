// colossal::nn::optim_kernels — the SGD step and an elementwise clamp, CPU and CUDA.
//
// Two small kernels nn/optim needs that kernels/ does not have yet (they belong
// in kernels/sgd and kernels/elementwise and can move there unchanged): raw
// pointers, sizes, dtypes and an explicit stream, no framework types.
//
// sgd_step: torch.optim.SGD's update for one tensor, per element in float32
// (t counts this buffer's steps; `first_step` says the momentum buffer is new):
//
//   g  = grad / grad_scale                         (unscale; 1 means none)
//   g  = weight_decay * p + g                      (when weight_decay != 0)
//   buf = first_step ? g : momentum * buf + (1 - dampening) * g   (momentum != 0)
//   g  = nesterov ? momentum * buf + g : buf       (momentum != 0)
//   p  = -lr * g + p
//   model_copy = round_to_nearest_even(p)          (when a copy is given)
//
// Every multiply-add is one fused multiply-add (std::fma on the CPU, __fmaf_rn
// on CUDA) and the division is correctly rounded on both, so the CPU and CUDA
// paths give the same bits. The constants (1 - dampening, -lr) are rounded to
// float once on the host.
//
// clamp: data[i] = min(max(data[i], lo), hi) in place, in float32 for 16-bit
// types (then rounded back, so in-range values are unchanged); NaN stays NaN
// (the canonical NaN of the dtype), as torch.clamp_ keeps it.
//
// dtypes: param and momentum buffer float32; grad and model copy float32,
// float16 or bfloat16; clamp data float32, float16 or bfloat16. found_inf is
// not taken: the caller (nn/optim) decides on the host whether to step.
//
//   using namespace colossal::nn::optim_kernels;
//   SgdKernelOptions o;
//   o.lr = 0.1f; o.momentum = 0.9f; o.first_step = true;
//   KernelStatus s = sgd_step_cpu(p, buf, /*model_copy=*/nullptr, g, n, DType::kF32,
//                                 DType::kF32, o);
//   s = clamp_cpu(g, n, DType::kBF16, -1.0f, 1.0f);
#ifndef COLOSSAL_NN_OPTIM_KERNELS_OPTIM_KERNELS_H_
#define COLOSSAL_NN_OPTIM_KERNELS_OPTIM_KERNELS_H_

#include <cstdint>

#include "kernels/common/dtype.h"
#include "kernels/common/status.h"

#if COLOSSAL_WITH_CUDA
typedef struct CUstream_st* cudaStream_t;
#endif

namespace colossal::nn::optim_kernels {

using ::colossal::kernels::DType;
using ::colossal::kernels::KernelStatus;

// Hyper-parameters of one SGD step. Invalid values (lr, momentum, dampening or
// weight_decay negative or non-finite, dampening > 1, grad_scale not positive
// and finite) make the functions return kInvalidArgument.
struct SgdKernelOptions {
  float lr = 1e-2f;
  float momentum = 0.0f;
  float dampening = 0.0f;
  float weight_decay = 0.0f;
  bool nesterov = false;
  bool first_step = false;  // the momentum buffer holds nothing yet: buf = g
  float grad_scale = 1.0f;  // gradients are divided by it
};

// CPU: n elements of param (updated in place), momentum_buffer (updated; may be
// null only when momentum == 0), grad (read, `grad_dtype`) and model_copy
// (written when non-null, `copy_dtype`). Single-threaded.
KernelStatus sgd_step_cpu(float* param, float* momentum_buffer, void* model_copy, const void* grad,
                          int64_t n, DType grad_dtype, DType copy_dtype,
                          const SgdKernelOptions& options);

// CPU clamp of n elements of `dtype` at data, in place. lo <= hi (else kInvalidArgument).
KernelStatus clamp_cpu(void* data, int64_t n, DType dtype, float lo, float hi);

#if COLOSSAL_WITH_CUDA
// CUDA: the same on device pointers; one launch on `stream`, not synchronised.
KernelStatus sgd_step_cuda(float* param, float* momentum_buffer, void* model_copy,
                           const void* grad, int64_t n, DType grad_dtype, DType copy_dtype,
                           const SgdKernelOptions& options, cudaStream_t stream);

KernelStatus clamp_cuda(void* data, int64_t n, DType dtype, float lo, float hi,
                        cudaStream_t stream);
#endif

}  // namespace colossal::nn::optim_kernels

#endif  // COLOSSAL_NN_OPTIM_KERNELS_OPTIM_KERNELS_H_
