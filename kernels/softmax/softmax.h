// colossal::kernels::softmax — scaled masked and scaled causal softmax over the
// last axis of attention scores, forward and backward (Colossal-AI's / Megatron's
// fused softmax kernels).
//
// Forward:   y[r, :] = softmax(scale * x[r, :]) over the columns that are not
//            excluded. Excluded columns are left out of the sum entirely and get
//            probability exactly 0 (true exclusion, not Megatron's -10000 fill).
//            A row whose columns are all excluded is all zeros (never NaN).
//   masked:  x, y are [batch, heads, sq, sk]; mask is uint8 [batch, 1, sq, sk],
//            broadcast over heads; a nonzero byte excludes that column (Megatron's
//            convention: 1 = masked). mask may be null: plain scaled softmax.
//   causal:  x, y are [batches, sq, sk] (batches = batch * heads). Row i excludes
//            column j when j > i + (sk - sq): the query block sits at the end of
//            the key sequence, so sq == sk gives the usual j > i, sq < sk lets
//            every query see the sk - sq earlier keys, and for sq > sk the first
//            sq - sk rows see nothing and are all zeros.
// Backward:  dx = scale * y * (dy - sum_j(dy * y)) along each row, given the forward
//            output y. dx is an input gradient: it is OVERWRITTEN, never
//            accumulated (llm.c convention; this family has no parameters).
//            Excluded columns get dx exactly 0: where the mask excluded a column
//            y is 0 there; the causal backward writes 0 past the diagonal without
//            reading dy or y there.
//
// Numerics: float32/float16/bfloat16 in and out (the same dtype for every tensor
// of a call), float32 math and statistics on CUDA; the CPU path also takes
// float64 and computes elementwise in float (double for float64) with row sums
// accumulated in double. Results are not bit-identical between CPU and CUDA.
// Each row is computed as exp(|scale| * (s*x - max(s*x))), s = sign(scale), so
// large logits neither overflow nor lose precision to scale * x rounding. NaN in a
// row's included columns makes that row NaN, as in torch.softmax.
//
// Aliasing: in place is allowed — the forward may have y == x and the backward
// dx == dy or dx == y (each element is read before it is written). Any other
// overlap between an output and an input is rejected with kInvalidArgument.
//
//   using namespace colossal::kernels;
//   // scores x [2, 12, 128, 128] bf16, padding mask [2, 1, 128, 128] uint8:
//   KernelStatus s = softmax::scaled_masked_softmax_forward_cpu(
//       y, x, mask, 2, 12, 128, 128, DType::kBF16, 0.125f);
//   s = softmax::scaled_masked_softmax_backward_cpu(dx, dy, y, 2, 12, 128, 128,
//                                                   DType::kBF16, 0.125f);
//   #if COLOSSAL_WITH_CUDA
//   s = softmax::scaled_causal_softmax_forward_cuda(d_y, d_x, 24, 1024, 1024,
//                                                   DType::kBF16, 0.125f, stream);
//   #endif
#ifndef COLOSSAL_KERNELS_SOFTMAX_SOFTMAX_H_
#define COLOSSAL_KERNELS_SOFTMAX_SOFTMAX_H_

#include <cstdint>

#include "kernels/common/dtype.h"
#include "kernels/common/status.h"

#if COLOSSAL_WITH_CUDA
typedef struct CUstream_st* cudaStream_t;
#endif

namespace colossal::kernels::softmax {

// ---- CPU reference and CPU backend: float32, float16, bfloat16, float64. ----

// y = softmax(scale * x) with mask[b, 0, i, j] != 0 excluded. x, y: [batch, heads,
// sq, sk] contiguous; mask: [batch, 1, sq, sk] contiguous uint8, or null for no
// mask. y may equal x.
KernelStatus scaled_masked_softmax_forward_cpu(void* y, const void* x, const uint8_t* mask,
                                               int64_t batch, int64_t heads, int64_t sq, int64_t sk,
                                               DType dtype, float scale);

// Backward of scaled_masked_softmax_forward: dx = scale * y * (dy - rowsum(dy * y)),
// overwriting dx. dx, dy, y: [batch, heads, sq, sk]; y is the forward output (it
// is 0 wherever the mask excluded a column, so dx is 0 there). dx may equal dy or y.
KernelStatus scaled_masked_softmax_backward_cpu(void* dx, const void* dy, const void* y,
                                                int64_t batch, int64_t heads, int64_t sq,
                                                int64_t sk, DType dtype, float scale);

// y = softmax(scale * x) with column j of row i excluded when j > i + (sk - sq).
// x, y: [batches, sq, sk] contiguous. y may equal x.
KernelStatus scaled_causal_softmax_forward_cpu(void* y, const void* x, int64_t batches, int64_t sq,
                                               int64_t sk, DType dtype, float scale);

// Backward of scaled_causal_softmax_forward, overwriting dx: the row sum runs over
// the included columns only and excluded columns get dx = 0 without reading dy or
// y. dx, dy, y: [batches, sq, sk]. dx may equal dy or y.
KernelStatus scaled_causal_softmax_backward_cpu(void* dx, const void* dy, const void* y,
                                                int64_t batches, int64_t sq, int64_t sk,
                                                DType dtype, float scale);

#if COLOSSAL_WITH_CUDA
// ---- CUDA: float32, float16, bfloat16 (float64 is kUnsupported). ----
// Same contracts as the CPU functions above, on device pointers; enqueued on
// `stream`, not synchronised. Returns the launch status (asynchronous faults
// surface at the next sync). Any sk up to 2^30 works (larger is kInvalidArgument):
// rows of up to 16384 columns live in registers, longer rows are staged once in
// shared memory (or, past what the device has, streamed from global memory twice).

KernelStatus scaled_masked_softmax_forward_cuda(void* y, const void* x, const uint8_t* mask,
                                                int64_t batch, int64_t heads, int64_t sq,
                                                int64_t sk, DType dtype, float scale,
                                                cudaStream_t stream);

KernelStatus scaled_masked_softmax_backward_cuda(void* dx, const void* dy, const void* y,
                                                 int64_t batch, int64_t heads, int64_t sq,
                                                 int64_t sk, DType dtype, float scale,
                                                 cudaStream_t stream);

KernelStatus scaled_causal_softmax_forward_cuda(void* y, const void* x, int64_t batches, int64_t sq,
                                                int64_t sk, DType dtype, float scale,
                                                cudaStream_t stream);

KernelStatus scaled_causal_softmax_backward_cuda(void* dx, const void* dy, const void* y,
                                                 int64_t batches, int64_t sq, int64_t sk,
                                                 DType dtype, float scale, cudaStream_t stream);
#endif

}  // namespace colossal::kernels::softmax

#endif  // COLOSSAL_KERNELS_SOFTMAX_SOFTMAX_H_
