// Private to kernels/attention: the Hopper (sm_90a) forward and backward of the
// fused attention (causal or full mask; head_dim 64, 96 (run as 128) or 128), which
// attention.cu's dispatch launches on compute capability 9.0 devices. The
// designs are in attention_hopper.cu and attention_hopper_backward.cu.
#ifndef COLOSSAL_KERNELS_ATTENTION_ATTENTION_HOPPER_H_
#define COLOSSAL_KERNELS_ATTENTION_ATTENTION_HOPPER_H_

#include <cstddef>
#include <cstdint>

#include "kernels/attention/attention_internal.h"
#include "kernels/common/dtype.h"
#include "kernels/common/status.h"

#if COLOSSAL_WITH_CUDA
namespace colossal::kernels::attention::internal {

// The sequences a Hopper call covers: the batch layout (cu_seqlens null:
// g.batch sequences of g.seq positions) or the varlen one (g is the flat
// geometry, batch 1 and seq = total_tokens; num_seqs sequences of at most
// max_seqlen positions, bounded by the device array cu_seqlens as attention.h
// documents).
struct Sequences {
  const int32_t* cu_seqlens = nullptr;
  int64_t num_seqs = 0, max_seqlen = 0;
  int64_t count(const Geometry& g) const { return cu_seqlens != nullptr ? num_seqs : g.batch; }
  int64_t longest(const Geometry& g) const {
    return cu_seqlens != nullptr ? max_seqlen : g.seq;
  }
};

// Whether hopper_forward takes this (already checked, non-empty) problem:
// bfloat16 or float16, head_dim 64, 96 or 128, extents the tensor-memory-access
// descriptors can express (byte strides below 2^40) and a grid of at most
// 2^31 - 1 CTAs; and whether the driver hands out cuTensorMapEncodeTiled.
// It does not look at the device: the caller checks hopper_device().
bool hopper_forward_supports(const Geometry& g, DType dtype, const Sequences& seqs = {});

// The forward on the Hopper kernel: writes o and lse exactly as
// attention_forward_cuda (or, with seqs.cu_seqlens, attention_varlen_forward_cuda:
// lse [heads, total_tokens]) documents, under the causal mask or (full) none. The
// caller has run the public entry point's argument checks (alignment, strides,
// overlap) and hopper_forward_supports(); the current device must have compute
// capability 9.0. Enqueued on `stream`; returns the launch status.
KernelStatus hopper_forward(void* o, float* lse, const void* q, const void* k, const void* v,
                            const Geometry& g, DType dtype, float scale, bool full,
                            const Sequences& seqs, cudaStream_t stream);

// Whether hopper_backward takes this (already checked, non-empty) problem:
// hopper_forward_supports(), this backward's grids (dK/dV, dQ and the fused
// dQ's conversion) of at most 2^31 - 1 CTAs, and d_o's row stride within
// the tensor maps' range.
bool hopper_backward_supports(const Geometry& g, DType dtype, const Sequences& seqs = {});

// Bytes of the fp32 scratch the fused-dQ backward adds dQ into: per
// (sequence, query head, 64-query step of the longest sequence) two 64 x 64
// parts (dQ-sized at head_dim 128 in the batch layout), 16-byte aligned.
size_t hopper_dq_accum_bytes(const Geometry& g, const Sequences& seqs = {});

// The backward on Hopper: overwrites dq, dk, dv as attention_backward_cuda
// documents (causal mask, or none when `full`), from d_o, q, k, v, the
// forward's lse and `delta` = rowsum(dO * O) per query row (fp32, laid out
// like lse: [batch, heads, seq], or [heads, total_tokens] with
// seqs.cu_seqlens), which the caller computed earlier on `stream`.
//   dq_accum null: deterministic, two kernels (dK/dV per key tile, dQ per
//     query tile; no atomics; S and dP are computed twice).
//   dq_accum = hopper_dq_accum_bytes(g, seqs) of device scratch: fused, one dK/dV
//     kernel that also adds each key tile's dS K into dq_accum with bulk fp32
//     reductions (atomic: the order of the adds, so dq's last bits, can differ
//     run to run), then a kernel rounds scale * dq_accum into dq. Five
//     products a tile instead of seven.
// The caller has run the public entry point's checks and
// hopper_backward_supports(); the device must have compute capability 9.0.
KernelStatus hopper_backward(void* dq, void* dk, void* dv, const void* d_o, const void* q,
                             const void* k, const void* v, const float* lse, const float* delta,
                             float* dq_accum, const Geometry& g, DType dtype, float scale,
                             bool full, const Sequences& seqs, cudaStream_t stream);

}  // namespace colossal::kernels::attention::internal
#endif

#endif  // COLOSSAL_KERNELS_ATTENTION_ATTENTION_HOPPER_H_
