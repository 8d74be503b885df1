// colossal::kernels::layernorm — LayerNorm and RMSNorm over the last dimension,
// forward and backward, with the residual stream's add fused in both ways: a
// residual-add + norm forward, and a backward that adds the residual stream's
// gradient into dx (a pre-norm transformer block's two residual adds).
//
// Layout and dtypes, the same for every function here:
//   * x, out, dout, dx, residual, residual_out: [rows, C] row-major, element
//     type `dtype`; gamma, beta, dgamma, dbeta: [C], also of type `dtype` (the
//     model's weights and their gradients share the activations' dtype, as in
//     llm.c; fp32 master weights live in the optimizer).
//   * mean and rstd: [rows] float32 for every dtype. They are the statistics
//     the forward saves for the backward: mean = sum(x) / C and
//     rstd = 1 / sqrt(var + eps) with the biased variance sum((x - mean)^2) / C
//     (RMSNorm: rstd = 1 / sqrt(sum(x^2) / C + eps) and no mean).
//   * Math is float32 (CUDA) or float64 (CPU) whatever the dtype; results are
//     rounded to `dtype` once. float64 stats are rounded to float32 when saved.
//   * Output buffers may not overlap any input buffer.
//
// Gradient contract (llm.c's, the same for CPU and CUDA):
//   * dgamma and dbeta ACCUMULATE: dgamma += sum over rows (parameter gradients,
//     so micro-batches add up; zeroing them is the caller's job).
//   * dx is OVERWRITTEN by default. With BackwardOptions::accumulate_dx it is
//     added into instead (dx += ...), for a dx that is the residual stream's
//     gradient, as llm.c's layernorm_backward does. With
//     BackwardOptions::residual_grad, dx = residual_grad + gradient: the same
//     sum read from a buffer the caller keeps (a block's incoming gradient).
//     Either sum is taken in float32 (float64 on the CPU) and rounded once.
//   * CUDA: the dgamma/dbeta reduction over rows is deterministic (no float
//     atomics): each block writes float32 partial sums to `scratch`, a second
//     kernel adds them up in a fixed order. Size it with *_backward_scratch_bytes;
//     it needs no initialisation and holds nothing between calls.
//
// Dtypes: CUDA takes float32, float16 and bfloat16; CPU those and float64 (for
// finite-difference tests). Others return KernelStatus::Code::kUnsupported.
//
//   using namespace colossal::kernels;
//   float mean[4], rstd[4];
//   KernelStatus s = layernorm::layernorm_forward_cpu(out, mean, rstd, x, gamma, beta,
//                                                    /*rows=*/4, /*C=*/768, DType::kF32, {});
//   s = layernorm::layernorm_backward_cpu(dx, dgamma, dbeta, dout, x, mean, rstd, gamma, 4, 768,
//                                         DType::kF32, {.accumulate_dx = false});
//   #if COLOSSAL_WITH_CUDA
//   size_t bytes = layernorm::layernorm_backward_scratch_bytes(rows, C);
//   void* scratch = nullptr;
//   cudaMallocAsync(&scratch, bytes, stream);
//   s = layernorm::layernorm_backward_cuda(d_dx, d_dgamma, d_dbeta, d_dout, d_x, d_mean, d_rstd,
//                                          d_gamma, scratch, bytes, rows, C, DType::kBF16, {},
//                                          stream);
//   #endif
#ifndef COLOSSAL_KERNELS_LAYERNORM_LAYERNORM_H_
#define COLOSSAL_KERNELS_LAYERNORM_LAYERNORM_H_

#include <cstddef>
#include <cstdint>

#include "kernels/common/dtype.h"
#include "kernels/common/status.h"

#if COLOSSAL_WITH_CUDA
typedef struct CUstream_st* cudaStream_t;
#endif

namespace colossal::kernels::layernorm {

struct ForwardOptions {
  // Added to the variance (LayerNorm) or the mean square (RMSNorm). Must be
  // finite and >= 0.
  float eps = 1e-5f;
};

struct BackwardOptions {
  // false: dx = gradient (overwritten). true: dx += gradient.
  bool accumulate_dx = false;
  // Not null: dx = residual_grad + gradient, residual_grad [rows, C] of the
  // dtype. It may be dx itself (the same as accumulate_dx) and must not
  // otherwise overlap dx. With accumulate_dx it must be dx.
  const void* residual_grad = nullptr;
};

// Bytes of CUDA scratch layernorm_backward_cuda / rmsnorm_backward_cuda need
// for these sizes (0 when there is nothing to do or a size is negative). It
// depends on rows and C only, not on the dtype or the device.
size_t layernorm_backward_scratch_bytes(int64_t rows, int64_t C);
size_t rmsnorm_backward_scratch_bytes(int64_t rows, int64_t C);

// LayerNorm forward: out = (x - mean) * rstd * gamma + beta, per row.
// Writes out [rows, C] and, when not null, mean and rstd [rows] (float32, what
// the backward needs; pass null for inference). rows >= 0; C >= 1 when rows > 0.
KernelStatus layernorm_forward_cpu(void* out, float* mean, float* rstd, const void* x,
                                   const void* gamma, const void* beta, int64_t rows, int64_t C,
                                   DType dtype, ForwardOptions options);

// LayerNorm backward from the forward's saved mean and rstd:
//   xhat = (x - mean) * rstd, g = dout * gamma,
//   dx = rstd * (g - mean_C(g) - xhat * mean_C(g * xhat))  (overwritten, or added to:
//        accumulate_dx / residual_grad)
//   dgamma += sum_rows(dout * xhat), dbeta += sum_rows(dout)   (always accumulated)
KernelStatus layernorm_backward_cpu(void* dx, void* dgamma, void* dbeta, const void* dout,
                                    const void* x, const float* mean, const float* rstd,
                                    const void* gamma, int64_t rows, int64_t C, DType dtype,
                                    BackwardOptions options);

// RMSNorm forward: out = x * rstd * gamma; writes rstd [rows] when not null.
KernelStatus rmsnorm_forward_cpu(void* out, float* rstd, const void* x, const void* gamma,
                                 int64_t rows, int64_t C, DType dtype, ForwardOptions options);

// RMSNorm backward: xhat = x * rstd, g = dout * gamma,
//   dx = rstd * (g - xhat * mean_C(g * xhat))  (overwritten, or added to, as LayerNorm's)
//   dgamma += sum_rows(dout * xhat)            (always accumulated)
KernelStatus rmsnorm_backward_cpu(void* dx, void* dgamma, const void* dout, const void* x,
                                  const float* rstd, const void* gamma, int64_t rows, int64_t C,
                                  DType dtype, BackwardOptions options);

// Fused residual add + LayerNorm forward:
//   residual_out = x + residual (rounded to dtype, written),
//   out = layernorm(residual_out) with mean/rstd as layernorm_forward.
// The statistics are those of the rounded residual_out, so out equals
// layernorm_forward(residual_out) and layernorm_backward applies unchanged.
KernelStatus fused_residual_layernorm_forward_cpu(void* residual_out, void* out, float* mean,
                                                  float* rstd, const void* x, const void* residual,
                                                  const void* gamma, const void* beta, int64_t rows,
                                                  int64_t C, DType dtype, ForwardOptions options);

// Fused residual add + RMSNorm forward: residual_out = x + residual (rounded
// to dtype), out = rmsnorm(residual_out), rstd as rmsnorm_forward.
KernelStatus fused_residual_rmsnorm_forward_cpu(void* residual_out, void* out, float* rstd,
                                                const void* x, const void* residual,
                                                const void* gamma, int64_t rows, int64_t C,
                                                DType dtype, ForwardOptions options);

#if COLOSSAL_WITH_CUDA
// The CUDA versions take device pointers, are enqueued on `stream` and not
// synchronised; they return the launch status (asynchronous faults surface at
// the next synchronisation). Contracts as the CPU functions above.

KernelStatus layernorm_forward_cuda(void* out, float* mean, float* rstd, const void* x,
                                    const void* gamma, const void* beta, int64_t rows, int64_t C,
                                    DType dtype, ForwardOptions options, cudaStream_t stream);

// scratch: device memory of at least layernorm_backward_scratch_bytes(rows, C)
// bytes (scratch_bytes says how many were given), float-aligned; contents on
// entry are ignored (no memset needed) and are garbage afterwards.
KernelStatus layernorm_backward_cuda(void* dx, void* dgamma, void* dbeta, const void* dout,
                                     const void* x, const float* mean, const float* rstd,
                                     const void* gamma, void* scratch, size_t scratch_bytes,
                                     int64_t rows, int64_t C, DType dtype, BackwardOptions options,
                                     cudaStream_t stream);

KernelStatus rmsnorm_forward_cuda(void* out, float* rstd, const void* x, const void* gamma,
                                  int64_t rows, int64_t C, DType dtype, ForwardOptions options,
                                  cudaStream_t stream);

// scratch: at least rmsnorm_backward_scratch_bytes(rows, C) bytes, as above.
KernelStatus rmsnorm_backward_cuda(void* dx, void* dgamma, const void* dout, const void* x,
                                   const float* rstd, const void* gamma, void* scratch,
                                   size_t scratch_bytes, int64_t rows, int64_t C, DType dtype,
                                   BackwardOptions options, cudaStream_t stream);

KernelStatus fused_residual_layernorm_forward_cuda(void* residual_out, void* out, float* mean,
                                                   float* rstd, const void* x, const void* residual,
                                                   const void* gamma, const void* beta,
                                                   int64_t rows, int64_t C, DType dtype,
                                                   ForwardOptions options, cudaStream_t stream);

KernelStatus fused_residual_rmsnorm_forward_cuda(void* residual_out, void* out, float* rstd,
                                                 const void* x, const void* residual,
                                                 const void* gamma, int64_t rows, int64_t C,
                                                 DType dtype, ForwardOptions options,
                                                 cudaStream_t stream);
#endif

}  // namespace colossal::kernels::layernorm

#endif  // COLOSSAL_KERNELS_LAYERNORM_LAYERNORM_H_
