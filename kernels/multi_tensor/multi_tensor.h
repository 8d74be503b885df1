// colossal::kernels::multi_tensor — L2 norms and scaling over many tensors at once,
// with non-finite detection: the gradient clipping and loss-scale unscaling steps.
//
// l2_norm: the global L2 norm of a list of tensors (sqrt of the sum of every
// element's square), optionally each tensor's own norm, and a found_inf flag set
// when any element is inf or NaN. The reduction is deterministic: fixed chunks
// (16384 elements on CUDA, 32768 on CPU) are each summed in a fixed order, and the
// chunk sums are combined in a fixed order in double, with no float atomics, so a
// call gives the same bits every time, whatever the thread or block scheduling.
// CUDA accumulates a chunk in float32; the CPU in double (the reference).
// Optionally it also writes the clipping coefficient Colossal-AI and torch's
// clip_grad_norm_ use, clip_coef = min(1, max_norm / (norm + 1e-6)), so clipping
// needs no host round trip: pass clip_coef as scale_factor to scale_*.
//
// scale: out[i] = in[i] * s for every tensor (s = scale, times *scale_factor when
// given), one float multiply (double when a CPU buffer is float64) rounded once to
// the output dtype, identical on CPU and CUDA. In place (out == in) is allowed when
// in and out have the same element size; otherwise buffers must not overlap. It
// sets found_inf when any input or output value is inf or NaN (e.g. a float32
// gradient that overflows a float16 output).
//
// accumulate: acc[i] += part[i] for every tensor, and the l2 norm of the
// results in the same pass (gradient accumulation, which then needs no second
// read of the sums for clipping). The CUDA version gives the CPU's bits, sums
// and norm alike, so gradients summed on either side clip the same.
//
// found_inf (nullable) is a float flag owned by the caller: these functions only
// ever set it to 1.0f and never clear it, so one flag can collect several calls
// (zero it at the start of a step). CPU functions take host pointers for every
// output and flag; CUDA functions take device pointers, and a HOST array of
// tensor descriptors that is read before the call returns.
//
// dtypes: CUDA float32 / float16 / bfloat16; CPU those plus float64. Norms are
// always float32 outputs.
//
//   using namespace colossal::kernels;
//   multi_tensor::TensorRef grads[2] = {{g0, n0}, {g1, n1}};
//   float norm = 0, found_inf = 0;
//   KernelStatus s = multi_tensor::l2_norm_cpu(&norm, nullptr, &found_inf, nullptr, grads, 2,
//                                              DType::kF32, /*max_norm=*/0);
//   multi_tensor::ScaleTensor unscale[1] = {{g0, g0, n0}};             // in place
//   s = multi_tensor::scale_cpu(&found_inf, unscale, nullptr, 1, DType::kF32, DType::kF32,
//                               1.0f / 1024);
//   #if COLOSSAL_WITH_CUDA
//   int64_t bytes = multi_tensor::l2_norm_cuda_scratch_bytes(d_grads, 2);  // scratch: device
//   s = multi_tensor::l2_norm_cuda(d_norm, nullptr, d_found_inf, d_clip_coef, d_grads, d_scratch,
//                                  bytes, 2, DType::kBF16, /*max_norm=*/1.0f, stream);
//   #endif
#ifndef COLOSSAL_KERNELS_MULTI_TENSOR_MULTI_TENSOR_H_
#define COLOSSAL_KERNELS_MULTI_TENSOR_MULTI_TENSOR_H_

#include <cstdint>

#include "kernels/common/cpu_isa.h"
#include "kernels/common/dtype.h"
#include "kernels/common/status.h"

#if COLOSSAL_WITH_CUDA
typedef struct CUstream_st* cudaStream_t;
#endif

namespace colossal::kernels::multi_tensor {

// One input tensor of l2_norm: n elements of the call's dtype at `data`.
struct TensorRef {
  const void* data;
  int64_t n;
};

// One tensor of scale: n elements read from `in` and written to `out`.
struct ScaleTensor {
  const void* in;
  void* out;
  int64_t n;
};

// CPU l2_norm. Outputs: global_norm (required), per_tensor_norms (nullable, an array
// of num_tensors; empty tensors get 0), found_inf (nullable), clip_coef (nullable;
// needs max_norm > 0). Inputs: tensors[0..num_tensors) of `dtype`. num_threads:
// OpenMP threads, 0 = OpenMP's default; isa: the SIMD loop (kAuto: the widest
// this CPU runs; one it lacks is kUnsupported). The result depends on neither.
KernelStatus l2_norm_cpu(float* global_norm, float* per_tensor_norms, float* found_inf,
                         float* clip_coef, const TensorRef* tensors, int64_t num_tensors,
                         DType dtype, float max_norm, int num_threads = 0,
                         CpuIsa isa = CpuIsa::kAuto);

// CPU scale: writes every tensor's out; sets *found_inf (nullable) on any non-finite
// input or output. scale_factor: nullable host pointer multiplied into `scale`.
KernelStatus scale_cpu(float* found_inf, const ScaleTensor* tensors, const float* scale_factor,
                       int64_t num_tensors, DType in_dtype, DType out_dtype, float scale,
                       int num_threads = 0);

// One tensor of accumulate: acc[0..n) += part[0..n).
struct AccumulateTensor {
  void* acc;
  const void* part;
  int64_t n;
};

// CPU accumulate: acc[i] = acc[i] + part[i] for every tensor (math in float,
// double for float64; one rounding to `dtype`, as elementwise's binary add),
// and, in the same pass, global_norm (nullable): the l2 norm of every result,
// summed as l2_norm_cpu sums (its bits for the results, for any num_threads
// and isa); found_inf (nullable) set to 1 when a result is inf or NaN. acc and
// part must not overlap. A gradient-accumulation step that also yields the
// sum's norm without reading the sum again.
KernelStatus accumulate_cpu(float* global_norm, float* found_inf, const AccumulateTensor* tensors,
                            int64_t num_tensors, DType dtype, int num_threads = 0,
                            CpuIsa isa = CpuIsa::kAuto);

// Device scratch accumulate_cuda needs for this tensor list (piece sums).
int64_t accumulate_cuda_scratch_bytes(const AccumulateTensor* tensors, int64_t num_tensors);
// Device scratch l2_norm_cuda needs for this tensor list (chunk sums and a table).
int64_t l2_norm_cuda_scratch_bytes(const TensorRef* tensors, int64_t num_tensors);
// Device scratch scale_cuda can use for num_tensors tensors (a table of descriptors).
int64_t scale_cuda_scratch_bytes(int64_t num_tensors);

#if COLOSSAL_WITH_CUDA
// CUDA l2_norm, same outputs as l2_norm_cpu (device pointers). `scratch` is
// required: device memory of at least l2_norm_cuda_scratch_bytes(tensors,
// num_tensors) bytes, 16-byte aligned, not used by another call in flight. Two
// kernels (plus one small table upload per 96 tensors beyond the first 96).
KernelStatus l2_norm_cuda(float* global_norm, float* per_tensor_norms, float* found_inf,
                          float* clip_coef, const TensorRef* tensors, void* scratch,
                          int64_t scratch_bytes, int64_t num_tensors, DType dtype, float max_norm,
                          cudaStream_t stream);

// CUDA accumulate (device buffers; global_norm and found_inf nullable device
// pointers): the bits of accumulate_cpu for finite values — the sums (one
// float add, one rounding) and the norm, which keeps the CPU's order (pieces
// of 32768 elements, 16 double lanes each, pieces and tensors summed in
// order); found_inf is set when a result is inf or NaN. `scratch`: device
// memory of at least accumulate_cuda_scratch_bytes(tensors, num_tensors)
// bytes, 16-byte aligned, not used by another call in flight. Two kernels per
// tensor (one block per 32768 elements, then one thread adding the pieces).
KernelStatus accumulate_cuda(float* global_norm, float* found_inf, const AccumulateTensor* tensors,
                             void* scratch, int64_t scratch_bytes, int64_t num_tensors, DType dtype,
                             cudaStream_t stream);

// CUDA scale (device buffers, device found_inf and scale_factor). Up to 96 tensors
// in one launch with the table in kernel parameters; more: with scratch (at least
// scale_cuda_scratch_bytes(num_tensors), 16-byte aligned) one launch after small
// table uploads, without scratch one launch per 96 tensors.
KernelStatus scale_cuda(float* found_inf, const ScaleTensor* tensors, const float* scale_factor,
                        void* scratch, int64_t scratch_bytes, int64_t num_tensors,
                        DType in_dtype, DType out_dtype, float scale, cudaStream_t stream);
#endif

}  // namespace colossal::kernels::multi_tensor

#endif  // COLOSSAL_KERNELS_MULTI_TENSOR_MULTI_TENSOR_H_
