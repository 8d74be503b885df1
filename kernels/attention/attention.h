// colossal::kernels::attention — fused scaled-dot-product attention with a
// causal or a full (non-causal) mask ("FlashAttention-2": tiled online
// softmax, the T x T matrix never exists), forward and backward, CPU reference
// + CUDA (tensor cores, bf16/fp16).
//
// Masks (AttentionMask): kCausal, query t sees keys j <= t (decoders: GPT-2,
// Llama); kFull, every query sees every key of the sequence (encoders, cross-
// position mixing; seq_q == seq_k == seq still). The attention_* functions take
// the mask; the causal_attention_* functions are the same calls with kCausal
// (what existing callers use).
//
// Grouped-query attention (GQA): `heads` query heads share `kv_heads` key/value
// heads (heads a multiple of kv_heads, else kInvalidArgument); query head h
// reads kv head h / (heads / kv_heads). kv_heads == heads is multi-head
// attention (GPT-2), kv_heads == 1 multi-query attention.
//
// Layout: strided rows, so Q, K, V can be read straight out of one fused
// projection output and O written in merged-head form. For batch b, position
// t, query head h, kv head g, element c (0 <= c < head_dim):
//   q[b, t, h, c] = q[(b * seq + t) * qkv_row_stride + h * head_dim + c]
//   k[b, t, g, c] = k[(b * seq + t) * qkv_row_stride + g * head_dim + c]
// and v like k; dq like q, dk and dv like k (all use qkv_row_stride); o and
// d_o have `heads` heads like q and use o_row_stride. With D = head_dim and a
// packed buffer qkv = [B, T, (heads + 2 * kv_heads) * D]:
//   q = qkv, k = qkv + heads * D, v = qkv + (heads + kv_heads) * D,
//   qkv_row_stride = (heads + 2 * kv_heads) * D
//   o = [B, T, heads * D],             o_row_stride = heads * D
// (GPT-2's c_attn output [B, T, 3C], C = heads * D, is the case kv_heads ==
// heads: k = qkv + C, v = qkv + 2C, qkv_row_stride = 3C.) dq, dk, dv go into a
// packed gradient buffer of the same layout.
// lse is float32 [batch, heads, seq]: the natural-log logsumexp of each row of
// scale * q k^T over its unmasked keys (what the backward uses to rebuild P).
//
// Forward:   o[t] = sum_{j in keys(t)} softmax_j(scale * q[t] . k[j]) v[j], the
//            softmax over keys(t): j <= t under kCausal (key j is excluded for
//            query t when j > t), every 0 <= j < seq under kFull;
//            seq_q == seq_k == seq; k, v of the query head's kv head
// Backward:  given d_o (gradient of o), writes dq, dk, dv. dk and dv of a kv
//            head are the sums over the heads / kv_heads query heads that share
//            it. They are input gradients: OVERWRITTEN, never accumulated
//            (llm.c convention; the family has no parameters). dq, dk, dv may
//            interleave with each other (one packed buffer) but must not
//            overlap any input.
//
// Kernels: on a compute capability 9.0 device (H100, H200) the CUDA forward and
// backward (either mask, every head_dim; 96 runs as 128 with zero columns) run
// Hopper kernels (warpgroup MMA from shared memory filled by the tensor memory
// accelerator, warp-specialized, the forward's softmax overlapped with the
// tensor cores; sm_90a machine code built whatever the build's architecture
// list); on any other device the portable FlashAttention-2 kernels (mma.sync,
// sm_80+). The device is asked once (per device) and remembered. Both
// forwards write o and lse to this contract, and both backwards take the o and
// lse of either forward with the same arguments and workspace. Every backward
// first writes rowsum(dO * O) into the workspace; then
//   deterministic (the portable kernels, and Hopper at head_dim 64 or when
//   asked): a dK/dV kernel per (batch, kv head, key tile) and a dQ kernel per
//   (batch, query head, query tile), which recomputes S and dP;
//   fused dQ (Hopper at head_dim 96 and 128 unless deterministic is asked):
//   the dK/dV kernel also forms each key tile's share of dQ = dS K and adds it
//   into float32 parts in the workspace (bulk asynchronous reductions), then a
//   small kernel rounds dq. Five matrix products per tile instead of seven:
//   1.1x faster at T >= 4096, but the adds' order varies, so dq's last bits
//   may differ from run to run. (At head_dim 64 the two-kernel split is the
//   faster one on an H100.)
//
// Numerics: the CUDA path reads bf16/fp16, multiplies on tensor cores with fp32
// accumulation, keeps softmax statistics in fp32 and rounds P (and dS) to the
// input type before the P.V (dS.K, dS^T.Q, P^T.dO) products, as FlashAttention
// does; dk and dv sum the group's query heads in the same fp32 accumulators;
// outputs are rounded once. The CPU path (float32, float64, float16, bfloat16)
// computes everything in double and rounds once; it is the reference.
// Determinism: the CPU backward and the CUDA backwards called with
// deterministic = true are deterministic (no atomics): the same inputs give the
// same bytes, run after run (the portable and the Hopper CUDA backwards differ
// from each other by rounding); with false, only the fused dQ's dq can vary
// (dk, dv and the forward never do). The deterministic CUDA dq is computed per query tile
// by one CTA looping over the key tiles (no atomic dQ accumulation), dk and dv
// per (batch, kv head, key tile) by one CTA looping over the group's query
// heads in order, summing in fp32 registers. With kv_heads == heads a group
// is one head and nothing is summed: plain multi-head attention, operation for
// operation.
//
//   using namespace colossal::kernels;
//   // Llama-3.2-1B: 32 query heads, 8 kv heads, D = 64 (R = 32 + 2 * 8 = 48);
//   // qkv [B, T, R * 64] bf16 on the device, y [B, T, 32 * 64], lse [B, 32, T]
//   const int64_t D = 64, H = 32, KV = 8, R = H + 2 * KV;
//   KernelStatus s = attention::causal_attention_forward_cuda(
//       y, lse, qkv, qkv + H * D, qkv + (H + KV) * D, B, H, KV, T, D, R * D, H * D,
//       DType::kBF16, 0.125f, stream);
//   // workspace: attention_backward_workspace_bytes(B, H, T, D) bytes
//   s = attention::causal_attention_backward_cuda(
//       dqkv, dqkv + H * D, dqkv + (H + KV) * D, dy, qkv, qkv + H * D, qkv + (H + KV) * D,
//       y, lse, workspace, B, H, KV, T, D, R * D, H * D, DType::kBF16, 0.125f,
//       /*deterministic=*/false, stream);
//   // The same without a mask (every position attends to every position):
//   s = attention::attention_forward_cuda(y, lse, qkv, qkv + H * D, qkv + (H + KV) * D, B, H,
//       KV, T, D, R * D, H * D, DType::kBF16, 0.125f, attention::AttentionMask::kFull, stream);
//   // ... and attention_backward_cuda(..., 0.125f, AttentionMask::kFull, false, stream).
// (pointer arithmetic above is in elements; the API takes void*.)
//
// Varlen layout (packed sequences, FlashAttention's flash_attn_varlen_func;
// the attention_varlen_* functions): num_seqs sequences of different lengths
// packed back to back in total_tokens rows, described by cu_seqlens (int32,
// num_seqs + 1 entries: cu_seqlens[0] = 0, non-decreasing,
// cu_seqlens[num_seqs] = total_tokens). Sequence i holds rows
// cu_seqlens[i] .. cu_seqlens[i + 1] - 1; empty sequences are allowed. Row r
// (0 <= r < total_tokens) of q, k, v, dq, dk, dv is at r * qkv_row_stride and
// of o, d_o at r * o_row_stride, heads within a row as above (the batch
// layout with its batch * seq rows flattened). Attention never crosses a
// sequence boundary: position t of sequence i (row cu_seqlens[i] + t) attends
// to positions j <= t of sequence i under kCausal, every position of sequence
// i under kFull. lse is float32 [heads, total_tokens] (FlashAttention's varlen
// lse): lse[h * total_tokens + r] for row r, query head h. The batch layout
// is the case of num_seqs = batch sequences of seq positions each (its lse
// alone is laid out differently, [batch, heads, seq]). The CUDA calls also take
// max_seqlen, the longest sequence's length (it sizes the grid: the device's
// cu_seqlens is not read on the host). max_seqlen >= every length is a
// precondition the call cannot check: the rows of a longer sequence past
// max_seqlen would be left unwritten (o, lse, dq, and dk, dv of their keys)
// and that sequence's other gradients wrong; the other sequences are not
// affected. A larger max_seqlen only costs CTAs that exit at once. The CUDA
// varlen calls pick their kernels as the batch calls do (Hopper on compute
// capability 9.0, where tiles that run past a sequence's end read the next
// sequence's rows and mask them); numerics and overwrite semantics are the
// batch calls', and the varlen backward is always deterministic (no fused dQ:
// its scratch is sized for the batch layout).
//
//   // Three sequences of 5, 70 and 33 tokens in qkv [108, R * 64] (R, H, KV, D as above):
//   const int32_t cu_host[] = {0, 5, 75, 108};  // and cu_dev, the same on the device
//   s = attention::attention_varlen_forward_cuda(y, lse, qkv, qkv + H * D, qkv + (H + KV) * D,
//       cu_dev, 3, 108, 70, H, KV, D, R * D, H * D, DType::kBF16, 0.125f,
//       attention::AttentionMask::kCausal, stream);  // lse [H, 108]
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

// Which keys each query attends to (see "Forward" above).
enum class AttentionMask {
  kCausal,  // key j for query t when j <= t
  kFull,    // every key of the sequence (no mask but the sequence's end)
};

// ---- CPU reference and CPU backend: float32, float64, float16, bfloat16. ----
// Any head_dim >= 1, any strides with row_stride >= heads * head_dim.
// heads a multiple of kv_heads (kv_heads >= 1 unless heads == 0).

// Writes o (and lse, unless lse is null).
KernelStatus attention_forward_cpu(void* o, float* lse, const void* q, const void* k,
                                   const void* v, int64_t batch, int64_t heads, int64_t kv_heads,
                                   int64_t seq, int64_t head_dim, int64_t qkv_row_stride,
                                   int64_t o_row_stride, DType dtype, float scale,
                                   AttentionMask mask);

// Overwrites dq, dk, dv. The CPU path recomputes the softmax from q, k, v in
// double: it reads neither o nor lse (they may be null).
KernelStatus attention_backward_cpu(void* dq, void* dk, void* dv, const void* d_o, const void* q,
                                    const void* k, const void* v, const void* o, const float* lse,
                                    int64_t batch, int64_t heads, int64_t kv_heads, int64_t seq,
                                    int64_t head_dim, int64_t qkv_row_stride,
                                    int64_t o_row_stride, DType dtype, float scale,
                                    AttentionMask mask);

// attention_forward_cpu with AttentionMask::kCausal.
KernelStatus causal_attention_forward_cpu(void* o, float* lse, const void* q, const void* k,
                                          const void* v, int64_t batch, int64_t heads,
                                          int64_t kv_heads, int64_t seq, int64_t head_dim,
                                          int64_t qkv_row_stride, int64_t o_row_stride, DType dtype,
                                          float scale);

// attention_backward_cpu with AttentionMask::kCausal.
KernelStatus causal_attention_backward_cpu(void* dq, void* dk, void* dv, const void* d_o,
                                           const void* q, const void* k, const void* v,
                                           const void* o, const float* lse, int64_t batch,
                                           int64_t heads, int64_t kv_heads, int64_t seq,
                                           int64_t head_dim, int64_t qkv_row_stride,
                                           int64_t o_row_stride, DType dtype, float scale);

// ---- CPU, varlen layout (see "Varlen layout" above): the batch CPU calls
// run on each sequence in turn. cu_seqlens is host memory, num_seqs + 1
// entries, checked in full: kInvalidArgument when null, when cu_seqlens[0] is
// not 0, when it decreases, or when cu_seqlens[num_seqs] is not total_tokens
// (also when total_tokens > 0 with num_seqs == 0, or total_tokens >= 2^31).
// lse (may be null) is [heads, total_tokens].
KernelStatus attention_varlen_forward_cpu(void* o, float* lse, const void* q, const void* k,
                                          const void* v, const int32_t* cu_seqlens,
                                          int64_t num_seqs, int64_t total_tokens, int64_t heads,
                                          int64_t kv_heads, int64_t head_dim,
                                          int64_t qkv_row_stride, int64_t o_row_stride,
                                          DType dtype, float scale, AttentionMask mask);

// Overwrites dq, dk, dv (every row of every sequence). Reads neither o nor lse.
KernelStatus attention_varlen_backward_cpu(void* dq, void* dk, void* dv, const void* d_o,
                                           const void* q, const void* k, const void* v,
                                           const void* o, const float* lse,
                                           const int32_t* cu_seqlens, int64_t num_seqs,
                                           int64_t total_tokens, int64_t heads, int64_t kv_heads,
                                           int64_t head_dim, int64_t qkv_row_stride,
                                           int64_t o_row_stride, DType dtype, float scale,
                                           AttentionMask mask);

#if COLOSSAL_WITH_CUDA
// ---- CUDA: bfloat16 and float16 (others kUnsupported), head_dim 64, 96 or
// 128 (others kUnsupported); sm_80 or
// newer. Every pointer 16-byte aligned and both row strides multiples of 8
// elements (else kInvalidArgument). seq up to 2^30. Enqueued on `stream`, not
// synchronised; returns the launch status.

// Writes o and lse (lse is required: the backward needs it).
KernelStatus attention_forward_cuda(void* o, float* lse, const void* q, const void* k,
                                    const void* v, int64_t batch, int64_t heads, int64_t kv_heads,
                                    int64_t seq, int64_t head_dim, int64_t qkv_row_stride,
                                    int64_t o_row_stride, DType dtype, float scale,
                                    AttentionMask mask, cudaStream_t stream);

// Bytes of device scratch the CUDA backward needs, on every device: float32
// rowsum(dO * O), one per query row (batch * heads * seq * 4; heads counts the
// query heads), then at head_dim 96 and 128 the float32 dQ parts of the fused
// Hopper backward (per query head and 64-query step two 64 x 64 parts: dq's
// size in float32 at head_dim 128; head_dim 64 never fuses, so needs none).
// Independent of kv_heads, the mask and `deterministic`.
size_t attention_backward_workspace_bytes(int64_t batch, int64_t heads, int64_t seq,
                                          int64_t head_dim);

// Overwrites dq, dk, dv from d_o and the forward's q, k, v, o and lse (the
// forward run with the same mask). `workspace`:
// attention_backward_workspace_bytes() of device memory, 16-byte aligned, not
// overlapping anything else. `deterministic`: see "Determinism" above (false:
// the fused dQ where the Hopper kernels run head_dim 96 or 128).
KernelStatus attention_backward_cuda(void* dq, void* dk, void* dv, const void* d_o, const void* q,
                                     const void* k, const void* v, const void* o, const float* lse,
                                     void* workspace, int64_t batch, int64_t heads,
                                     int64_t kv_heads, int64_t seq, int64_t head_dim,
                                     int64_t qkv_row_stride, int64_t o_row_stride, DType dtype,
                                     float scale, AttentionMask mask, bool deterministic,
                                     cudaStream_t stream);

// attention_forward_cuda with AttentionMask::kCausal.
KernelStatus causal_attention_forward_cuda(void* o, float* lse, const void* q, const void* k,
                                           const void* v, int64_t batch, int64_t heads,
                                           int64_t kv_heads, int64_t seq, int64_t head_dim,
                                           int64_t qkv_row_stride, int64_t o_row_stride,
                                           DType dtype, float scale, cudaStream_t stream);

// attention_backward_cuda with AttentionMask::kCausal.
KernelStatus causal_attention_backward_cuda(void* dq, void* dk, void* dv, const void* d_o,
                                            const void* q, const void* k, const void* v,
                                            const void* o, const float* lse, void* workspace,
                                            int64_t batch, int64_t heads, int64_t kv_heads,
                                            int64_t seq, int64_t head_dim, int64_t qkv_row_stride,
                                            int64_t o_row_stride, DType dtype, float scale,
                                            bool deterministic, cudaStream_t stream);

// ---- CUDA, varlen layout (see "Varlen layout" above): the batch CUDA calls'
// choice of kernels (the Hopper ones on compute capability 9.0), dtypes, head dims,
// alignment and stride rules. cu_seqlens is device memory (num_seqs + 1 int32,
// valid as documented: the call cannot read it to check); max_seqlen >= every
// sequence's length (precondition), at most 2^30, and num_seqs * heads at most
// 65535 (kInvalidArgument otherwise, as total_tokens > 0 with max_seqlen or
// num_seqs 0). Grid: (tiles of max_seqlen, num_seqs * heads); a CTA whose
// tile starts past its sequence's end exits at once.

// Writes o and lse ([heads, total_tokens], required).
KernelStatus attention_varlen_forward_cuda(void* o, float* lse, const void* q, const void* k,
                                           const void* v, const int32_t* cu_seqlens,
                                           int64_t num_seqs, int64_t total_tokens,
                                           int64_t max_seqlen, int64_t heads, int64_t kv_heads,
                                           int64_t head_dim, int64_t qkv_row_stride,
                                           int64_t o_row_stride, DType dtype, float scale,
                                           AttentionMask mask, cudaStream_t stream);

// Bytes of device scratch the CUDA varlen backward needs (float32 rowsum(dO * O)
// per query row and head: heads * total_tokens * 4).
size_t attention_varlen_backward_workspace_bytes(int64_t heads, int64_t total_tokens);

// Overwrites dq, dk, dv from d_o and the varlen forward's q, k, v, o and lse
// (same mask, cu_seqlens and max_seqlen). `workspace`:
// attention_varlen_backward_workspace_bytes() of device memory, 16-byte
// aligned, not overlapping anything else.
KernelStatus attention_varlen_backward_cuda(void* dq, void* dk, void* dv, const void* d_o,
                                            const void* q, const void* k, const void* v,
                                            const void* o, const float* lse, void* workspace,
                                            const int32_t* cu_seqlens, int64_t num_seqs,
                                            int64_t total_tokens, int64_t max_seqlen,
                                            int64_t heads, int64_t kv_heads, int64_t head_dim,
                                            int64_t qkv_row_stride, int64_t o_row_stride,
                                            DType dtype, float scale, AttentionMask mask,
                                            cudaStream_t stream);
#endif

}  // namespace colossal::kernels::attention

#endif  // COLOSSAL_KERNELS_ATTENTION_ATTENTION_H_
