// colossal::kernels::embedding — GPT-2's token + position embedding.
//
// Forward, for b < batch, t < seq_len, c < channels:
//   out[b, t, c] = wte[tokens[b, t], c] + wpe[t, c]
// tokens int32 [batch, seq_len]; wte [vocab_size, channels]; wpe [max_seq_len,
// channels] (rows t < seq_len <= max_seq_len are used); out [batch, seq_len,
// channels]; all row-major. wpe may be null: a token-only embedding (Llama's
// embed_tokens), out = wte[tokens] copied exactly; dwpe must then be null too
// in the backward (only dwte is accumulated). The add is done in float32 (float64 for float64
// data) and rounded once, identically on CPU and CUDA: the forward results are
// bit-for-bit equal across the two backends.
//
// Backward: both are PARAMETER gradients, so both ACCUMULATE (llm.c's
// convention; zero them once per step):
//   dwte[v, c] += sum over (b, t) with tokens[b, t] == v of dout[b, t, c]
//   dwpe[t, c] += sum over b of dout[b, t, c]        (rows t >= seq_len untouched)
// dout has `dtype`; dwte and dwpe have `grad_dtype`, which is `dtype` or float32
// (float32 gradient buffers for float16/bfloat16 activations). Sums are formed
// in float32 on CUDA (double on CPU) and added to the gradient with one rounding.
//
// Token ids outside [0, vocab_size):
//   * CPU: every call checks all ids first and returns invalid_argument, writing
//     nothing.
//   * CUDA: no memory outside the buffers is ever read or written. The forward
//     writes NaN into out[b, t, :] for such a position; the backward skips the
//     position (it adds to neither dwte nor dwpe). If `invalid_token_flag` (a
//     device int32, may be null) is given, the kernels store 1 into it when they
//     meet such an id: zero it before the call and read it when convenient.
//
// CUDA backward modes (GradMode):
//   * kDeterministic: bit-identical results run to run, independent
//     of thread scheduling, no floating-point atomics. dwpe: each (t, c) is a
//     fixed-order float32 sum over b. dwte: every position becomes the 64-bit
//     key (token << 32 | position); the keys are sorted on the device (bitonic
//     network: shared-memory tiles of 4096 plus global merge steps); a sorted
//     key sequence is unique, so the order is fixed. The sorted rows are cut
//     into tiles of 32; a token whose rows lie in one tile is summed there in
//     position order and added to dwte directly, a token spanning tiles leaves
//     one float32 partial per tile in the scratch, and a fix-up pass adds those
//     partials in tile order. Needs embedding_backward_scratch_bytes() of
//     scratch (8 bytes per position rounded up to a power of two, plus two
//     float32 rows per 32 positions: ~1.6 MiB at 8 x 1024 x 768).
//   * kAtomic: one pass, dwte updated with float32 atomic adds (vector atomics
//     on sm_90). Faster; the summation order of repeated tokens varies, so dwte
//     differs run to run by float32 rounding. Requires grad_dtype float32 and
//     no scratch. dwpe is still the deterministic sum.
//
//   using namespace colossal::kernels;
//   KernelStatus s = embedding::embedding_forward_cpu(out, tokens, wte, wpe, B, T, C, V, maxT,
//                                                     DType::kF32);
//   s = embedding::embedding_backward_cpu(dwte, dwpe, dout, tokens, B, T, C, V, maxT,
//                                         DType::kF32, DType::kF32);
//   #if COLOSSAL_WITH_CUDA
//   size_t bytes = embedding::embedding_backward_scratch_bytes(B, T, C,
//                                                              embedding::GradMode::kDeterministic);
//   s = embedding::embedding_backward_cuda(d_dwte, d_dwpe, d_flag, d_dout, d_tokens, d_scratch,
//                                          bytes, B, T, C, V, maxT, DType::kBF16, DType::kF32,
//                                          embedding::GradMode::kDeterministic, stream);
//   #endif
#ifndef COLOSSAL_KERNELS_EMBEDDING_EMBEDDING_H_
#define COLOSSAL_KERNELS_EMBEDDING_EMBEDDING_H_

#include <cstddef>
#include <cstdint>

#include "kernels/common/dtype.h"
#include "kernels/common/status.h"

#if COLOSSAL_WITH_CUDA
typedef struct CUstream_st* cudaStream_t;
#endif

namespace colossal::kernels::embedding {

enum class GradMode : int { kDeterministic, kAtomic };

const char* grad_mode_name(GradMode mode);

// ---- CPU: reference and CPU backend. dtype: float32, float16, bfloat16, float64. ----

// As the forward above. Returns invalid_argument (and writes nothing) for a
// token id outside [0, vocab_size), seq_len > max_seq_len or a negative size.
KernelStatus embedding_forward_cpu(void* out, const int32_t* tokens, const void* wte, const void* wpe,
                                   int64_t batch, int64_t seq_len, int64_t channels,
                                   int64_t vocab_size, int64_t max_seq_len, DType dtype);

// dwte += ..., dwpe += ... as above (accumulated). grad_dtype is dtype or
// float32. Sums in double, rows in ascending position order, one rounding per
// gradient element; deterministic. Same argument checks as the forward.
KernelStatus embedding_backward_cpu(void* dwte, void* dwpe, const void* dout, const int32_t* tokens,
                                    int64_t batch, int64_t seq_len, int64_t channels,
                                    int64_t vocab_size, int64_t max_seq_len, DType dtype,
                                    DType grad_dtype);

// Bytes of scratch embedding_backward_cuda needs (0 for kAtomic, or when there
// is nothing to do). A function of the shape only; host code, available in
// CPU-only builds too.
size_t embedding_backward_scratch_bytes(int64_t batch, int64_t seq_len, int64_t channels,
                                        GradMode mode);

// ---- Vocabulary-parallel token embedding (Megatron's VocabParallelEmbedding) ----
//
// This process holds rows [vocab_start, vocab_start + vocab_size) of the token
// table: wte [vocab_size, channels]. No position table. For n positions:
//   forward:  out[p, :] = wte[tokens[p] - vocab_start, :] when the id is one of
//             this table's rows (an exact copy), else zeros, so the sum of
//             every shard's output (the caller's all-reduce) is the whole
//             table's embedding_forward with wpe null;
//   backward: dwte[tokens[p] - vocab_start, :] += dout[p, :] for this table's
//             ids only (ACCUMULATED, like embedding_backward); the other
//             positions are skipped.
// The same code as the whole-table functions with the rows offset, so the same
// rounding, determinism and GradModes. Ids are otherwise not checked against
// any vocabulary (another shard's rows): the CPU functions return
// invalid_argument for a negative id (writing nothing); the CUDA functions
// treat it as another shard's (zeros, skipped): the caller validates ids.
// vocab_start >= 0; other arguments as embedding_forward/backward_cpu with
// batch 1, seq_len n.
KernelStatus embedding_shard_forward_cpu(void* out, const int32_t* tokens, const void* wte,
                                         int64_t n, int64_t channels, int64_t vocab_size,
                                         int64_t vocab_start, DType dtype);

KernelStatus embedding_shard_backward_cpu(void* dwte, const void* dout, const int32_t* tokens,
                                          int64_t n, int64_t channels, int64_t vocab_size,
                                          int64_t vocab_start, DType dtype, DType grad_dtype);

// Scratch of embedding_shard_backward_cuda: embedding_backward_scratch_bytes(1, n, channels, mode).
size_t embedding_shard_backward_scratch_bytes(int64_t n, int64_t channels, GradMode mode);

#if COLOSSAL_WITH_CUDA
// ---- CUDA: device pointers; dtype float32/float16/bfloat16; enqueued on
// `stream`, not synchronised; returns the launch status. batch * seq_len must
// be below 2^31. 16-byte vector accesses are used when channels is a multiple
// of 16 / element size and the row buffers are 16-byte aligned, else a scalar path.

KernelStatus embedding_forward_cuda(void* out, int32_t* invalid_token_flag, const int32_t* tokens,
                                    const void* wte, const void* wpe, int64_t batch, int64_t seq_len,
                                    int64_t channels, int64_t vocab_size, int64_t max_seq_len,
                                    DType dtype, cudaStream_t stream);

// `scratch`: device memory of at least embedding_backward_scratch_bytes(batch,
// seq_len, channels, mode) bytes, 16-byte aligned, free for the duration of the
// call (no need to zero it); may be null when that size is 0.
KernelStatus embedding_backward_cuda(void* dwte, void* dwpe, int32_t* invalid_token_flag,
                                     const void* dout, const int32_t* tokens, void* scratch,
                                     size_t scratch_bytes, int64_t batch, int64_t seq_len,
                                     int64_t channels, int64_t vocab_size, int64_t max_seq_len,
                                     DType dtype, DType grad_dtype, GradMode mode,
                                     cudaStream_t stream);

// Vocabulary shards (see above) on CUDA; n below 2^31. `scratch`: at least
// embedding_shard_backward_scratch_bytes(n, channels, mode) bytes, as above.
KernelStatus embedding_shard_forward_cuda(void* out, const int32_t* tokens, const void* wte,
                                          int64_t n, int64_t channels, int64_t vocab_size,
                                          int64_t vocab_start, DType dtype, cudaStream_t stream);

KernelStatus embedding_shard_backward_cuda(void* dwte, const void* dout, const int32_t* tokens,
                                           void* scratch, size_t scratch_bytes, int64_t n,
                                           int64_t channels, int64_t vocab_size,
                                           int64_t vocab_start, DType dtype, DType grad_dtype,
                                           GradMode mode, cudaStream_t stream);
#endif

}  // namespace colossal::kernels::embedding

#endif  // COLOSSAL_KERNELS_EMBEDDING_EMBEDDING_H_
