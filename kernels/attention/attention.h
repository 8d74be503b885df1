// colossal::kernels::attention — fused causal scaled-dot-product attention
// ("FlashAttention-2": tiled online softmax, the T x T matrix never exists),
// forward and backward, CPU reference + CUDA (tensor cores, bf16/fp16).
//
// Layout: strided rows, so Q, K, V can be read straight out of GPT-2's fused
// c_attn output and O written in merged-head form. For batch b, position t,
// head h, element c (0 <= c < head_dim):
//   q[b, t, h, c] = q[(b * seq + t) * qkv_row_stride + h * head_dim + c]
// and the same for k, v, dq, dk, dv (all use qkv_row_stride); o and d_o use
// o_row_stride. With qkv = c_attn(x) as [B, T, 3C] (C = heads * head_dim):
//   q = qkv, k = qkv + C, v = qkv + 2C, qkv_row_stride = 3C
//   o = [B, T, C],                    o_row_stride = C
// lse is float32 [batch, heads, seq]: the natural-log logsumexp of each row of
// scale * q k^T over its unmasked keys (what the backward uses to rebuild P).
//
// Forward:   o[t] = sum_{j <= t} softmax_j(scale * q[t] . k[j]) v[j]   (causal: key
//            j is excluded for query t when j > t; seq_q == seq_k == seq)
// Backward:  given d_o (gradient of o), writes dq, dk, dv. They are input
//            gradients: OVERWRITTEN, never accumulated (llm.c convention; the
//            family has no parameters). dq, dk, dv may interleave with each other
//            (one packed [B, T, 3C] buffer) but must not overlap any input.
//
// Numerics: the CUDA path reads bf16/fp16, multiplies on tensor cores with fp32
// accumulation, keeps softmax statistics in fp32 and rounds P (and dS) to the
// input type before the P.V (dS.K, dS^T.Q, P^T.dO) products, as FlashAttention
// does; outputs are rounded once. The CPU path (float32, float64, float16,
// bfloat16) computes everything in double and rounds once; it is the reference.
//
//   using namespace colossal::kernels;
//   // qkv [B, T, 3C] bf16 on the device, C = 12 * 64; y [B, T, C]; lse [B, 12, T]
//   KernelStatus s = attention::causal_attention_forward_cuda(
//       y, lse, qkv, qkv + C, qkv + 2 * C, B, 12, T, 64, 3 * C, C, DType::kBF16,
//       0.125f, stream);
//   s = attention::causal_attention_backward_cuda(
//       dqkv, dqkv + C, dqkv + 2 * C, dy, qkv, qkv + C, qkv + 2 * C, y, lse,
//       workspace, B, 12, T, 64, 3 * C, C, DType::kBF16, 0.125f, stream);
// (pointer arithmetic above is in elements; the API takes void*.)
#ifndef COLOSSAL_KERNELS_ATTENTION_ATTENTION_H_
#define COLOSSAL_KERNELS_ATTENTION_ATTENTION_H_

#include <cstddef>
#include <cstdint>

#include "kernels/common/dtype.h"
#include "kernels/common/status.h"

#if COLOSSAL_WITH_CUDA
typedef struct CUstream_st* cudaStream_t;
#endif

namespace colossal::kernels::attention {

// ---- CPU reference and CPU backend: float32, float64, float16, bfloat16. ----
// Any head_dim >= 1, any strides with row_stride >= heads * head_dim.

// Writes o (and lse, unless lse is null).
KernelStatus causal_attention_forward_cpu(void* o, float* lse, const void* q, const void* k,
                                          const void* v, int64_t batch, int64_t heads, int64_t seq,
                                          int64_t head_dim, int64_t qkv_row_stride,
                                          int64_t o_row_stride, DType dtype, float scale);

// Overwrites dq, dk, dv. The CPU path recomputes the softmax from q, k, v in
// double: it reads neither o nor lse (they may be null).
KernelStatus causal_attention_backward_cpu(void* dq, void* dk, void* dv, const void* d_o,
                                           const void* q, const void* k, const void* v,
                                           const void* o, const float* lse, int64_t batch,
                                           int64_t heads, int64_t seq, int64_t head_dim,
                                           int64_t qkv_row_stride, int64_t o_row_stride,
                                           DType dtype, float scale);

#if COLOSSAL_WITH_CUDA
// ---- CUDA: bfloat16 and float16 (others kUnsupported), head_dim 64 or 128
// (others kUnsupported); sm_80 or newer. Every pointer 16-byte aligned and both
// row strides multiples of 8 elements (else kInvalidArgument). seq up to 2^30.
// Enqueued on `stream`, not synchronised; returns the launch status.

// Writes o and lse (lse is required: the backward needs it).
KernelStatus causal_attention_forward_cuda(void* o, float* lse, const void* q, const void* k,
                                           const void* v, int64_t batch, int64_t heads,
                                           int64_t seq, int64_t head_dim, int64_t qkv_row_stride,
                                           int64_t o_row_stride, DType dtype, float scale,
                                           cudaStream_t stream);

// Bytes of device scratch causal_attention_backward_cuda needs (float32
// rowsum(dO * O), one per row: batch * heads * seq * 4).
size_t causal_attention_backward_workspace_bytes(int64_t batch, int64_t heads, int64_t seq);

// Overwrites dq, dk, dv from d_o and the forward's q, k, v, o and lse.
// `workspace`: causal_attention_backward_workspace_bytes() of device memory,
// 16-byte aligned, not overlapping anything else.
KernelStatus causal_attention_backward_cuda(void* dq, void* dk, void* dv, const void* d_o,
                                            const void* q, const void* k, const void* v,
                                            const void* o, const float* lse, void* workspace,
                                            int64_t batch, int64_t heads, int64_t seq,
                                            int64_t head_dim, int64_t qkv_row_stride,
                                            int64_t o_row_stride, DType dtype, float scale,
                                            cudaStream_t stream);
#endif

}  // namespace colossal::kernels::attention

#endif  // COLOSSAL_KERNELS_ATTENTION_ATTENTION_H_
