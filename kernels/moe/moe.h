// colossal::kernels::moe — the token routing of a sparse mixture-of-experts
// layer (Mixtral's block_sparse_moe): the router's top-k, sending each token's
// row to its experts, and the weighted sum of the experts' outputs.
//
// Shapes (element counts, row-major; N tokens, E experts, k experts per token,
// C columns):
//   logits, dlogits [N, E]     dtype
//   weights, dweights [N, k]   float32, or float64 when dtype is float64
//   experts, slots [N, k]      int32
//   x, out, residual, dout [N, C]         rows, drows [N * k, C]   dtype
//
// Routing (Hugging Face's MixtralSparseMoeBlock), per token t:
//   p = softmax(logits[t])                              (in the math precision)
//   experts[t] = the k largest logits, largest first (ties: lower index first)
//   weights[t, i] = p[experts[t, i]]    / sum_j p[experts[t, j]] when normalize
// The choice compares the logits themselves, so the CPU and the CUDA backend
// pick the same experts from the same logits. route_backward is its exact
// gradient with the choice held fixed (dlogits OVERWRITTEN; zero dweights give
// zero dlogits).
//
// Slots: expert_slots sorts the N * k (token, i) pairs by expert, stably (by
// token, then i, within an expert): slots[t, i] is the pair's row in the
// expert-sorted buffer and expert e owns rows [offsets[e], offsets[e + 1]).
// Host code: the expert GEMMs need the row counts on the host anyway.
//   dispatch:         rows[slots[t, i]] = x[t]
//   combine:          out[t] = residual[t] + sum_i weights[t, i] * rows[slots[t, i]]
//                     (weights null: each weight 1 — the backward of dispatch;
//                      residual null: 0)
//   combine_backward: drows[slots[t, i]] = weights[t, i] * dout[t]
//                     dweights[t, i]     = dot(dout[t], rows[slots[t, i]])
// All outputs are OVERWRITTEN. slots must hold each of 0 .. N*k - 1 once
// (what expert_slots writes); no output may overlap an input.
//
// Precision:
//   * CPU (reference and CPU backend): float32, float16, bfloat16, float64;
//     math in double, each output rounded once; sums in ascending i (and c).
//   * CUDA: float32, float16, bfloat16; math in float32 (expf), each output
//     rounded once; combine sums i in ascending order, the dweights dot
//     product is a fixed-order block reduction: bit-identical run to run.
//
// Errors: negative sizes, k outside [1, min(E, 8)], E > 1024, a null buffer
// with work to do -> kInvalidArgument; an expert outside [0, E) given to
// expert_slots (the router saw NaN logits) -> kInvalidArgument; another
// dtype -> kUnsupported. Every function accepts N == 0.
//
//   using namespace colossal::kernels;
//   moe::route_forward_cpu(w, ex, logits, N, 8, 2, /*normalize=*/true, DType::kF32);
//   std::vector<int32_t> slots(N * 2);  std::vector<int64_t> offsets(8 + 1);
//   moe::expert_slots(slots.data(), offsets.data(), ex, N, 8, 2);
//   moe::dispatch_cpu(rows, x, slots.data(), N, 2, C, DType::kF32);
//   // ... expert e maps rows [offsets[e], offsets[e + 1]) to ys ...
//   moe::combine_cpu(out, ys, slots.data(), w, residual, N, 2, C, DType::kF32);
#ifndef COLOSSAL_KERNELS_MOE_MOE_H_
#define COLOSSAL_KERNELS_MOE_MOE_H_

#include <cstdint>

#include "kernels/common/dtype.h"
#include "kernels/common/status.h"

#if COLOSSAL_WITH_CUDA
typedef struct CUstream_st* cudaStream_t;
#endif

namespace colossal::kernels::moe {

// The largest k and E the kernels take (Mixtral: 2 of 8; DeepSeek-V3: 8 of 256).
constexpr int64_t kMaxTopK = 8;
constexpr int64_t kMaxExperts = 1024;

// Host code (both builds): the stable sort of the (token, i) pairs by expert.
// slots [N, k] int32, offsets [E + 1] int64 (offsets[0] = 0, offsets[E] = N * k).
KernelStatus expert_slots(int32_t* slots, int64_t* offsets, const int32_t* experts, int64_t tokens,
                          int64_t num_experts, int64_t top_k);

// ---- CPU: reference and CPU backend. dtype: float32, float16, bfloat16, float64. ----

KernelStatus route_forward_cpu(void* weights, int32_t* experts, const void* logits, int64_t tokens,
                               int64_t num_experts, int64_t top_k, bool normalize, DType dtype);

KernelStatus route_backward_cpu(void* dlogits, const void* dweights, const void* logits,
                                const int32_t* experts, int64_t tokens, int64_t num_experts,
                                int64_t top_k, bool normalize, DType dtype);

KernelStatus dispatch_cpu(void* rows, const void* x, const int32_t* slots, int64_t tokens, int64_t top_k,
                          int64_t cols, DType dtype);

KernelStatus combine_cpu(void* out, const void* rows, const int32_t* slots, const void* weights,
                         const void* residual, int64_t tokens, int64_t top_k, int64_t cols, DType dtype);

KernelStatus combine_backward_cpu(void* drows, void* dweights, const void* dout, const void* rows,
                                  const int32_t* slots, const void* weights, int64_t tokens,
                                  int64_t top_k, int64_t cols, DType dtype);

#if COLOSSAL_WITH_CUDA
// ---- CUDA: device pointers, dtype float32/float16/bfloat16 (weights float32);
// enqueued on `stream`, not synchronised. Contracts as the CPU functions. ----

KernelStatus route_forward_cuda(void* weights, int32_t* experts, const void* logits, int64_t tokens,
                                int64_t num_experts, int64_t top_k, bool normalize, DType dtype,
                                cudaStream_t stream);

KernelStatus route_backward_cuda(void* dlogits, const void* dweights, const void* logits,
                                 const int32_t* experts, int64_t tokens, int64_t num_experts,
                                 int64_t top_k, bool normalize, DType dtype, cudaStream_t stream);

KernelStatus dispatch_cuda(void* rows, const void* x, const int32_t* slots, int64_t tokens,
                           int64_t top_k, int64_t cols, DType dtype, cudaStream_t stream);

KernelStatus combine_cuda(void* out, const void* rows, const int32_t* slots, const void* weights,
                          const void* residual, int64_t tokens, int64_t top_k, int64_t cols,
                          DType dtype, cudaStream_t stream);

KernelStatus combine_backward_cuda(void* drows, void* dweights, const void* dout, const void* rows,
                                   const int32_t* slots, const void* weights, int64_t tokens,
                                   int64_t top_k, int64_t cols, DType dtype, cudaStream_t stream);
#endif

}  // namespace colossal::kernels::moe

#endif  // COLOSSAL_KERNELS_MOE_MOE_H_
