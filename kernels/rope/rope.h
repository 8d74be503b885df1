// colossal::kernels::rope — Llama's rotary position embedding (Hugging Face's
// rotate_half convention), fused with packing q, k and v into the one buffer
// kernels/attention reads.
//
// For head dimension D (even) and pair i in [0, D/2), a row at position t of
// its sequence (row r = b * seq + t; or t = positions[r] when the call is given
// positions, int32 [batch * seq]: packed documents whose positions restart at
// each document's first row) is rotated by the angle
//
//   a = float(t) * inv_freq[i]     (one float32 product, as Hugging Face's float32 matmul)
//   out[i]       = x[i] * cos(a) - x[i + D/2] * sin(a)
//   out[i + D/2] = x[i + D/2] * cos(a) + x[i] * sin(a)
//
// Layout (element counts; all row-major, rows = batch * seq):
//   q    [rows, q_heads * D]       k, v  [rows, kv_heads * D]
//   qkv  [rows, (q_heads + 2 * kv_heads) * D]: per row the q heads rotated,
//        then the k heads rotated, then the v heads copied; so the attention
//        kernel takes q = qkv, k = qkv + q_heads * D, v = qkv + (q_heads + kv_heads) * D
//        with qkv_row_stride = (q_heads + 2 * kv_heads) * D.
// The backward is the transpose: from dqkv (the packed layout) it writes dq and
// dk rotated back (angle -a) and dv copied. All outputs are OVERWRITTEN (input
// gradients; the family has no parameters). No output may overlap an input.
//
// inv_freq is float32 [D/2]: host memory for the CPU functions, device memory
// for the CUDA ones. rope_inv_freq fills it the way transformers does.
// positions may be null (row r's position is r % seq); else int32 [batch *
// seq] in the same memory as inv_freq, any values (the angle is float(t) times
// inv_freq[i] whatever t is).
//
// Precision:
//   * CPU (reference and CPU backend): float32, float64, float16, bfloat16. The
//     angle is the float32 product above; cos, sin and the products are double;
//     each output is rounded once.
//   * CUDA: float32, float16, bfloat16. The same float32 angle, sincosf (the
//     accurate one, <= 2 ulp over the whole range, not __sincosf), products in
//     float32 (FMA), rounded once. 16-byte vector loads and stores when every
//     pointer is 16-byte aligned and D/2 is a multiple of 16 / element size.
//
// Errors: odd head_dim, a non-positive size, a null pointer -> kInvalidArgument;
// another dtype -> kUnsupported.
//
//   using namespace colossal::kernels;
//   // Llama-3.2-1B: D = 64, theta 500000, llama3 scaling (32, 1, 4, 8192).
//   float inv_freq[32];
//   const rope::Llama3RopeScaling s{32.0, 1.0, 4.0, 8192};
//   KernelStatus st = rope::rope_inv_freq(inv_freq, 64, 500000.0, &s);
//   st = rope::rope_pack_forward_cpu(qkv, q, k, v, inv_freq, nullptr, B, T, 32, 8, 64, DType::kF32);
//   st = rope::rope_pack_backward_cpu(dq, dk, dv, dqkv, inv_freq, nullptr, B, T, 32, 8, 64, DType::kF32);
//   #if COLOSSAL_WITH_CUDA
//   st = rope::rope_pack_forward_cuda(d_qkv, d_q, d_k, d_v, d_inv_freq, nullptr, B, T, 32, 8, 64,
//                                     DType::kBF16, stream);
//   #endif
#ifndef COLOSSAL_KERNELS_ROPE_ROPE_H_
#define COLOSSAL_KERNELS_ROPE_ROPE_H_

#include <cstdint>

#include "kernels/common/dtype.h"
#include "kernels/common/status.h"

#if COLOSSAL_WITH_CUDA
typedef struct CUstream_st* cudaStream_t;
#endif

namespace colossal::kernels::rope {

// Llama 3's "llama3" rope_scaling (config.json's rope_scaling fields).
struct Llama3RopeScaling {
  double factor;            // e.g. 32 (Llama 3.2), 8 (Llama 3.1)
  double low_freq_factor;   // e.g. 1
  double high_freq_factor;  // e.g. 4; must exceed low_freq_factor
  int64_t original_max_position_embeddings;  // e.g. 8192
};

// Host code (no CUDA), also in CPU-only builds. Fills inv_freq[0, head_dim/2):
//   inv_freq[i] = 1 / theta^(2i / head_dim), computed in double, rounded to float32
// (transformers' _compute_default_rope_parameters), then, when llama3 is not
// null, transformers' _compute_llama3_parameters: with
//   low_freq_wavelen = original_max_position_embeddings / low_freq_factor,
//   high_freq_wavelen = original_max_position_embeddings / high_freq_factor,
//   wavelen = 2 pi / inv_freq[i]:
//   wavelen > low_freq_wavelen   -> inv_freq[i] / factor
//   wavelen < high_freq_wavelen  -> inv_freq[i]
//   otherwise, with smooth = (original_max_position_embeddings / wavelen - low_freq_factor)
//                            / (high_freq_factor - low_freq_factor):
//                                -> (1 - smooth) * inv_freq[i] / factor + smooth * inv_freq[i]
// The scaling is evaluated in double from the float32 inv_freq and rounded once
// (transformers evaluates it in float32: results agree to about one float32 ulp).
// Errors (kInvalidArgument): null inv_freq, head_dim odd or < 2, theta not finite
// and > 0; llama3 with factor, low_freq_factor or original_max_position_embeddings
// not > 0, or high_freq_factor <= low_freq_factor.
KernelStatus rope_inv_freq(float* inv_freq, int64_t head_dim, double theta,
                           const Llama3RopeScaling* llama3);

// ---- CPU: reference and CPU backend. dtype: float32, float64, float16, bfloat16. ----

// Packs q [batch*seq, q_heads*head_dim], k [batch*seq, kv_heads*head_dim], v (same as k) into
// qkv [batch*seq, (q_heads + 2*kv_heads)*head_dim]: per row, the q heads rotated, then the k
// heads rotated, then v copied.
KernelStatus rope_pack_forward_cpu(void* qkv, const void* q, const void* k, const void* v,
                                   const float* inv_freq, const int32_t* positions, int64_t batch, int64_t seq,
                                   int64_t q_heads, int64_t kv_heads, int64_t head_dim,
                                   DType dtype);

// The transpose: from dqkv (same packed layout) writes dq, dk (rotated back: angle -a) and dv
// (copied). Overwritten.
KernelStatus rope_pack_backward_cpu(void* dq, void* dk, void* dv, const void* dqkv,
                                    const float* inv_freq, const int32_t* positions, int64_t batch, int64_t seq,
                                    int64_t q_heads, int64_t kv_heads, int64_t head_dim,
                                    DType dtype);

#if COLOSSAL_WITH_CUDA
// ---- CUDA: device pointers (inv_freq too), dtype float32/float16/bfloat16; enqueued on
// `stream`, not synchronised. Returns the launch status (faults surface at the next sync).
// Contracts as the CPU functions above.

KernelStatus rope_pack_forward_cuda(void* qkv, const void* q, const void* k, const void* v,
                                    const float* inv_freq, const int32_t* positions, int64_t batch, int64_t seq,
                                    int64_t q_heads, int64_t kv_heads, int64_t head_dim,
                                    DType dtype, cudaStream_t stream);

KernelStatus rope_pack_backward_cuda(void* dq, void* dk, void* dv, const void* dqkv,
                                     const float* inv_freq, const int32_t* positions, int64_t batch, int64_t seq,
                                     int64_t q_heads, int64_t kv_heads, int64_t head_dim,
                                     DType dtype, cudaStream_t stream);
#endif

}  // namespace colossal::kernels::rope

#endif  // COLOSSAL_KERNELS_ROPE_ROPE_H_
