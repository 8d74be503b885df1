// colossal::kernels::adam — one fused AdamW / Adam step over fp32 master weights.
//
// For every element (math in float32, t = options.step, 1-based):
//
//   g  = grad / grad_scale                      (unscale; grad_scale = 1 means none)
//   g += weight_decay * p                       (only in L2 mode: adamw_mode = false)
//   m  = beta1 * m + (1 - beta1) * g
//   v  = beta2 * v + (1 - beta2) * g * g
//   p *= 1 - lr * weight_decay                  (only in decoupled mode: adamw_mode = true)
//   p -= lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps)
//   model_copy = round_to_nearest_even(p)       (when a copy is given: fp32, fp16 or bf16)
//
// with bc1 = 1 - beta1^t and bc2 = 1 - beta2^t when bias_correction is on, else 1.
// This is torch.optim.AdamW (adamw_mode = true) / torch.optim.Adam with weight_decay
// (adamw_mode = false), and Colossal-AI's FusedAdam / CPUAdam with `div_scale`.
//
// Numerics, identical on every path: the step's constants are computed once on the
// host in double and rounded to float; each element then uses exactly one rounding
// per operation (fma for every multiply-add, correctly rounded division and sqrt).
// So the CPU scalar, AVX2 and AVX-512 paths and the CUDA kernels give bit-identical
// results (NaN payloads aside).
//
// Skipping a step: `found_inf` (nullable; host memory for CPU, device memory for
// CUDA) is a float flag; when it is non-zero the call changes nothing at all (the
// dynamic loss scaler's overflow skip). Gradients are inputs and never modified.
//
// Layout: param, exp_avg (m), exp_avg_sq (v) are float32 arrays of n elements;
// grad is float32/float16/bfloat16; model_copy is float32/float16/bfloat16 or null.
// Buffers of one tensor must not overlap (model_copy may not alias param). Every
// pointer must be aligned to its element size; any further misalignment is allowed
// (only slower on CUDA when the buffers' offsets modulo 4 elements differ).
//
//   using namespace colossal::kernels;
//   adam::AdamOptions opt;
//   opt.step = 1; opt.lr = 1e-3f; opt.weight_decay = 0.1f;  // AdamW
//   KernelStatus s = adam::adam_step_cpu(p, m, v, /*model_copy=*/nullptr, g, /*found_inf=*/nullptr,
//                                        n, DType::kF32, DType::kF32, opt);
//   #if COLOSSAL_WITH_CUDA
//   s = adam::adam_step_cuda(d_p, d_m, d_v, d_copy_bf16, d_g_bf16, d_found_inf, n,
//                            DType::kBF16, DType::kBF16, opt, stream);
//   #endif
#ifndef COLOSSAL_KERNELS_ADAM_ADAM_H_
#define COLOSSAL_KERNELS_ADAM_ADAM_H_

#include <cstdint>

#include "kernels/adam/split_master.h"
#include "kernels/common/cpu_isa.h"
#include "kernels/common/dtype.h"
#include "kernels/common/status.h"

#if COLOSSAL_WITH_CUDA
typedef struct CUstream_st* cudaStream_t;
#endif

namespace colossal::kernels::adam {

// Hyperparameters of one step. Invalid values (step < 1, lr < 0, betas outside
// [0, 1), eps < 0, weight_decay < 0, grad_scale not positive, anything non-finite)
// make every function return kInvalidArgument.
struct AdamOptions {
  int64_t step = 1;  // t, 1-based, counted by the caller
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  bool adamw_mode = true;        // true: decoupled decay (AdamW); false: L2 added to g
  bool bias_correction = true;
  float grad_scale = 1.0f;       // gradients are divided by it (loss-scale unscale)
};

// One tensor of a multi-tensor step: its own param / m / v / grad / copy buffers.
struct AdamTensor {
  float* param;
  float* m;
  float* v;
  const void* grad;
  void* model_copy;  // nullable; ignored when the call's copy dtype is not given
  int64_t n;
};

// The SIMD flavour of the CPU path (kernels/common/cpu_isa.h): kAuto picks
// the widest this CPU supports; naming one the CPU lacks returns kUnsupported.
// All give bit-identical results.
using kernels::CpuIsa;
using kernels::cpu_isa_available;
using kernels::cpu_isa_name;

struct AdamCpuOptions {
  CpuIsa isa = CpuIsa::kAuto;
  int num_threads = 0;  // OpenMP threads; 0 = OpenMP's default (OMP_NUM_THREADS / all cores)
};

// CPU, one contiguous range (the flat-buffer fast path): n elements of
// param/m/v (updated in place), grad (read only, `grad_dtype`), model_copy
// (written when non-null, `copy_dtype`). found_inf is a host pointer or null.
KernelStatus adam_step_cpu(float* param, float* exp_avg, float* exp_avg_sq, void* model_copy,
                           const void* grad, const float* found_inf, int64_t n, DType grad_dtype,
                           DType copy_dtype, const AdamOptions& options,
                           const AdamCpuOptions& cpu = {});

// CPU, many tensors in one call: the same update on each of `tensors[0..num_tensors)`
// (a host array). Every tensor's grad has `grad_dtype`; every non-null model_copy
// has `copy_dtype`. Empty tensors are skipped.
KernelStatus adam_step_tensors_cpu(const AdamTensor* tensors, const float* found_inf,
                                   int64_t num_tensors, DType grad_dtype, DType copy_dtype,
                                   const AdamOptions& options, const AdamCpuOptions& cpu = {});

// ---- Split masters (bfloat16 models; split_master.h) ----
//
// The same step on a master kept as `hi` (the bfloat16 model value, updated in
// place: it is the copy) and `lo` (int16): n elements of each, m, v and grad
// as in adam_step_cpu. The updated master is bit for bit what adam_step_cpu
// computes from the joined master; hi is its split_master_bits rounding, which
// equals adam_step_cpu's bfloat16 copy except at exact ties. Buffers aligned to
// their element size; hi and lo must not overlap the others.
KernelStatus adam_step_split_cpu(uint16_t* hi, int16_t* lo, float* exp_avg, float* exp_avg_sq,
                                 const void* grad, const float* found_inf, int64_t n,
                                 DType grad_dtype, const AdamOptions& options,
                                 const AdamCpuOptions& cpu = {});

// n masters into halves / halves into masters (split_master_bits and
// join_master_bits over arrays; OpenMP on the CPU). Buffers must not overlap.
KernelStatus split_master_cpu(const float* master, uint16_t* hi, int16_t* lo, int64_t n);
KernelStatus join_master_cpu(const uint16_t* hi, const int16_t* lo, float* master, int64_t n);

// Bytes of device scratch adam_step_tensors_cuda can use for `num_tensors`
// tensors (a table of per-tensor descriptors). Host-only arithmetic.
int64_t adam_cuda_scratch_bytes(int64_t num_tensors);

#if COLOSSAL_WITH_CUDA
// CUDA, one contiguous range: device pointers as in adam_step_cpu; found_inf is a
// device pointer or null. One kernel launch; enqueued on `stream`, not synchronised.
KernelStatus adam_step_cuda(float* param, float* exp_avg, float* exp_avg_sq, void* model_copy,
                            const void* grad, const float* found_inf, int64_t n, DType grad_dtype,
                            DType copy_dtype, const AdamOptions& options, cudaStream_t stream);

// CUDA, many tensors: `tensors` is a HOST array of device-pointer descriptors (read
// before return). Up to 64 non-empty tensors go in one launch with the table in
// kernel parameters. More: with `scratch` (device memory of at least
// adam_cuda_scratch_bytes(num_tensors) bytes, 16-byte aligned, not used by another
// call in flight) the table is copied there by small kernels and one launch does
// all tensors; with scratch = null they are done in launches of 64 tensors each.
KernelStatus adam_step_tensors_cuda(const AdamTensor* tensors, const float* found_inf,
                                    void* scratch, int64_t scratch_bytes, int64_t num_tensors,
                                    DType grad_dtype, DType copy_dtype,
                                    const AdamOptions& options, cudaStream_t stream);

// CUDA, split masters: device (or mapped host) pointers as in
// adam_step_split_cpu, bit for bit its results; one launch on `stream`.
KernelStatus adam_step_split_cuda(uint16_t* hi, int16_t* lo, float* exp_avg, float* exp_avg_sq,
                                  const void* grad, const float* found_inf, int64_t n,
                                  DType grad_dtype, const AdamOptions& options,
                                  cudaStream_t stream);
KernelStatus split_master_cuda(const float* master, uint16_t* hi, int16_t* lo, int64_t n,
                               cudaStream_t stream);
KernelStatus join_master_cuda(const uint16_t* hi, const int16_t* lo, float* master, int64_t n,
                              cudaStream_t stream);
#endif

}  // namespace colossal::kernels::adam

#endif  // COLOSSAL_KERNELS_ADAM_ADAM_H_
