// Private to kernels/attention: the Hopper (sm_90a) forward and backward of the
// fused attention (causal or full mask; head_dim 64 or 128), which
// attention.cu's dispatch launches on compute capability 9.0 devices. The
// designs are in attention_hopper.cu and attention_hopper_backward.cu.
#ifndef COLOSSAL_KERNELS_ATTENTION_ATTENTION_HOPPER_H_
#define COLOSSAL_KERNELS_ATTENTION_ATTENTION_HOPPER_H_

#include "kernels/attention/attention_internal.h"
#include "kernels/common/dtype.h"
#include "kernels/common/status.h"

#if COLOSSAL_WITH_CUDA
namespace colossal::kernels::attention::internal {

// Whether hopper_forward takes this (already checked, non-empty) problem:
// bfloat16 or float16, head_dim 64 or 128, extents the tensor-memory-access
// descriptors can express (byte strides below 2^40) and a grid of at most
// 2^31 - 1 CTAs; and whether the driver hands out cuTensorMapEncodeTiled.
// It does not look at the device: the caller checks hopper_device().
bool hopper_forward_supports(const Geometry& g, DType dtype);

// The forward on the Hopper kernel: writes o and lse exactly as
// attention_forward_cuda documents, under the causal mask or (full) none. The
// caller has run the public entry point's argument checks (alignment, strides,
// overlap) and hopper_forward_supports(); the current device must have compute
// capability 9.0. Enqueued on `stream`; returns the launch status.
KernelStatus hopper_forward(void* o, float* lse, const void* q, const void* k, const void* v,
                            const Geometry& g, DType dtype, float scale, bool full,
                            cudaStream_t stream);

// Whether hopper_backward takes this (already checked, non-empty) problem:
// the forward's conditions, for o / d_o's row stride too.
bool hopper_backward_supports(const Geometry& g, DType dtype);

// The backward's dK/dV and dQ kernels on Hopper: overwrites dq, dk, dv as
// attention_backward_cuda documents (causal mask, or none when `full`), from
// d_o, q, k, v, the forward's lse and `delta` = rowsum(dO * O) per query row
// ([batch, heads, seq] fp32, like lse), which the caller computed earlier on
// `stream`. Deterministic (no atomics). The caller has run the public entry
// point's checks and hopper_backward_supports(); the device must have compute
// capability 9.0.
KernelStatus hopper_backward(void* dq, void* dk, void* dv, const void* d_o, const void* q,
                             const void* k, const void* v, const float* lse, const float* delta,
                             const Geometry& g, DType dtype, float scale, bool full,
                             cudaStream_t stream);

}  // namespace colossal::kernels::attention::internal
#endif

#endif  // COLOSSAL_KERNELS_ATTENTION_ATTENTION_HOPPER_H_
