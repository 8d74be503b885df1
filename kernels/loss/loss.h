// colossal::kernels::loss — softmax cross-entropy over large vocabularies.
//
// For N rows of logits [N, V] (row-major, row stride V) and int32 targets [N]:
//
//   lse[i]        = log(sum_{j < v_real} exp(logits[i, j]))        (float32)
//   row_losses[i] = lse[i] - logits[i, targets[i]]                   (float32)
//   loss          = sum_i row_losses[i]  (kSum)
//                 = sum_i row_losses[i] / count  (kMean; count = rows not ignored)
//   dlogits[i, j] = dloss * w * (exp(logits[i, j] - lse[i]) - [j == targets[i]]),
//                   w = 1/count for kMean, 1 for kSum and kNone
//
// Semantics, identical on CPU and CUDA:
//   * Padded vocabulary (llm.c's padded_vocab_size): columns j >= v_real of each
//     row are padding. Their values are never used (they may hold anything,
//     NaN included), they take no part in the softmax, and they get
//     dlogits = 0. v_real == v means no padding.
//   * A row whose target equals options.ignore_index (default -100) has
//     row_losses[i] = 0, dlogits[i, :] = 0, and does not count in the mean. Its
//     lse is still written when asked for. ignore_index may be any int32, also
//     a valid class (that class's rows are then ignored).
//   * kMean with every row ignored (or n == 0): loss = 0 and all dlogits are
//     0 (as PyTorch would say 0/0, we say 0, so a padded micro-batch is safe).
//   * kNone: per-row losses only (row_losses); `loss` is not written and may be
//     null. In backward each row's loss receives the gradient `dloss`.
//   * dlogits is an input gradient: it is OVERWRITTEN, every element of every
//     row (padding and ignored rows get 0), never accumulated into.
//   * dlogits may alias logits exactly (in place: the gradient replaces the
//     logits) in backward and fused; partial overlap is invalid_argument.
//   * Math is float32 on CUDA (float64 accumulation only for the cross-row total
//     of kSum/kMean). On the CPU, float32 logits take exp in float32 (each
//     probability within (8 + max - x) * 2^-24 relative) with sums, log and
//     gradient in float64; other types compute every row in float64 and round
//     once to the output type. float16/bfloat16 logits give float16/bfloat16
//     dlogits; losses and lse are always float32.
//   * The kSum/kMean total is deterministic: per-row losses are reduced in a
//     fixed order (no float atomics), so the same inputs give the same bits.
//   * A target outside [0, v_real) that is not ignore_index: the CPU functions
//     return invalid_argument before writing anything. The CUDA functions
//     cannot report it without a synchronisation, so that row's loss is NaN
//     (hence a NaN kSum/kMean total), its dlogits row is all NaN (a grad scaler
//     sees a non-finite gradient), its lse is still written, and no memory
//     outside the row is touched. The row counts in the mean.
//
// Usage (one training step's loss, fused forward+backward, logits in bf16):
//
//   using namespace colossal::kernels;
//   loss::CrossEntropyOptions opts;                 // kMean, ignore_index -100
//   KernelStatus s = loss::cross_entropy_fused_cpu(
//       &mean_loss, row_losses, /*lse=*/nullptr, dlogits, logits, targets,
//       /*dloss=*/1.0f, n, /*v=*/50304, /*v_real=*/50257, DType::kBF16, opts);
//   #if COLOSSAL_WITH_CUDA
//   s = loss::cross_entropy_fused_cuda(d_loss, d_row_losses, nullptr, d_logits, d_logits,
//                                      d_targets, 1.0f, n, 50304, 50257, DType::kBF16, opts,
//                                      stream);   // in place: dlogits == logits
//   #endif
#ifndef COLOSSAL_KERNELS_LOSS_LOSS_H_
#define COLOSSAL_KERNELS_LOSS_LOSS_H_

#include <cstdint>

#include "kernels/common/dtype.h"
#include "kernels/common/status.h"

#if COLOSSAL_WITH_CUDA
typedef struct CUstream_st* cudaStream_t;
#endif

namespace colossal::kernels::loss {

enum class Reduction : int { kNone, kSum, kMean };

// "none", "sum", "mean".
const char* reduction_name(Reduction reduction);

inline constexpr int32_t kDefaultIgnoreIndex = -100;

struct CrossEntropyOptions {
  Reduction reduction = Reduction::kMean;
  int32_t ignore_index = kDefaultIgnoreIndex;
};

// Shapes and pointers shared by every function below:
//   logits      [n, v] of `dtype`, aligned to its element size; columns >= v_real unused.
//   targets     int32 [n].
//   row_losses  float32 [n], always written (0 for ignored rows).
//   lse         float32 [n]: written by forward/fused when non-null, read by backward.
//   loss        float32 [1]: written for kSum/kMean (required then), untouched for kNone.
//   dlogits     [n, v] of `dtype`, overwritten; == logits or disjoint from it.
// Sizes: n >= 0, 1 <= v_real <= v (when n > 0). n == 0 is valid (loss = 0).
// Errors: invalid_argument for null/misaligned pointers, bad sizes, unknown
// reduction, partial overlap; unsupported for other dtypes.

// Forward. CPU reference and CPU backend: float32/float16/bfloat16/float64.
KernelStatus cross_entropy_forward_cpu(float* loss, float* row_losses, float* lse,
                                       const void* logits, const int32_t* targets, int64_t n,
                                       int64_t v, int64_t v_real, DType dtype,
                                       const CrossEntropyOptions& options);

// Backward from the forward's lse (not recomputed): overwrites dlogits with
// dloss * d(loss)/d(logits) for options.reduction. lse is required.
KernelStatus cross_entropy_backward_cpu(void* dlogits, const void* logits, const float* lse,
                                        const int32_t* targets, float dloss, int64_t n, int64_t v,
                                        int64_t v_real, DType dtype,
                                        const CrossEntropyOptions& options);

// Forward and backward in one call (the training path): writes loss,
// row_losses, lse (if non-null) and overwrites dlogits, never storing the
// probabilities. dloss is the upstream gradient of `loss` (1, or the loss scale).
KernelStatus cross_entropy_fused_cpu(float* loss, float* row_losses, float* lse, void* dlogits,
                                     const void* logits, const int32_t* targets, float dloss,
                                     int64_t n, int64_t v, int64_t v_real, DType dtype,
                                     const CrossEntropyOptions& options);

// ---- Vocabulary-parallel cross-entropy (Megatron's VocabParallelLMHead + DistCrossEntropy) ----
//
// Each tensor-parallel rank holds a shard of the logits, [n, v] (row stride v),
// whose column j is global vocabulary id v_start + j. v_real is the GLOBAL real
// vocabulary size: a column with global id >= v_real is padding (never read,
// may hold NaN, gradient 0). The shard's real columns are j < local =
// clamp(v_real - v_start, 0, v). targets are global ids. The caller chains, with
// all-reduces over the tensor-parallel group in between:
//
//   vocab_shard_max      -> row_max, target_logit;  all-reduce max(row_max), sum(target_logit)
//   vocab_shard_sum_exp  -> row_sum from the global row_max;  all-reduce sum(row_sum)
//   row loss = row_max + log(row_sum) - target_logit   (0 for ignored rows)
//   vocab_shard_backward -> dlogits from the global row_max and row_sum
//
// which equals cross_entropy_* over the whole vocabulary up to rounding:
//   * row_max[i]: the largest real logit of the row in this shard, as float32
//     (-inf when the shard has no real column). NaN logits are passed over by
//     the max and make row_sum NaN, hence the loss (as in cross_entropy_*).
//   * target_logit[i]: logits[i, targets[i] - v_start] as float32 when
//     v_start <= targets[i] < min(v_start + v, v_real), else 0 (ignored rows: 0).
//   * row_sum[i] = sum over the shard's real columns of exp(logits[i, j] - M),
//     M = the GLOBAL row_max[i] (a shift of 0 when M = -inf, so a row of -inf
//     sums to 0); 0 for a shard with no real column.
//   * dlogits[i, j] = scale * (exp(logits[i, j] - M) / S - [v_start + j == targets[i]])
//     for real columns, S the global row_sum; 0 for padding; the whole row 0
//     when targets[i] == ignore_index. scale is the row's whole gradient weight
//     (dloss, or dloss / count for a mean: count the non-ignored rows yourself).
//     Overwritten, never accumulated; may alias logits exactly (in place).
//   * A target outside [0, v_real) that is not ignore_index: the CPU functions
//     (max and backward) return invalid_argument before writing anything; the
//     CUDA functions write NaN into that row's target_logit on EVERY shard (so
//     the all-reduced loss is NaN) and fill its dlogits row with NaN.
//   * Precision: CUDA computes in float32 (ex2.approx); its row_sum is the
//     shard's own (max, sum of exp) pair rescaled by exp(max - M), equal to the
//     formula within float32 rounding. The CPU takes exp as cross_entropy_*_cpu
//     does (float32 logits: exp of x - M in float32, each term within
//     (4 + M - x) * 2^-24 relative; other types float64), sums in float64 and
//     rounds row_sum once to float32; the gradient is scale / S times those
//     exponentials in float64, rounded once. float64 logits thus get float32
//     accuracy (row_max, target_logit and row_sum are float32).
// Same dtypes, pointer rules and error codes as cross_entropy_*: float32,
// float16, bfloat16 (and float64 on the CPU); n >= 0, v >= 1, v_start >= 0,
// v_real >= 1 when n > 0; row_max, target_logit and row_sum are float32 [n].
KernelStatus vocab_shard_max_cpu(float* row_max, float* target_logit, const void* logits,
                                 const int32_t* targets, int64_t n, int64_t v, int64_t v_start,
                                 int64_t v_real, int32_t ignore_index, DType dtype);

KernelStatus vocab_shard_sum_exp_cpu(float* row_sum, const void* logits, const float* row_max,
                                     int64_t n, int64_t v, int64_t v_start, int64_t v_real,
                                     DType dtype);

KernelStatus vocab_shard_backward_cpu(void* dlogits, const void* logits, const float* row_max,
                                      const float* row_sum, const int32_t* targets, float scale,
                                      int64_t n, int64_t v, int64_t v_start, int64_t v_real,
                                      int32_t ignore_index, DType dtype);

#if COLOSSAL_WITH_CUDA
// CUDA versions of the three functions above: every pointer is a device
// pointer; float32/float16/bfloat16; v <= 2^30. Enqueued on `stream`, not
// synchronised; returns the launch status (asynchronous faults surface at the
// next synchronisation). Out-of-range targets: see the file comment.
KernelStatus cross_entropy_forward_cuda(float* loss, float* row_losses, float* lse,
                                        const void* logits, const int32_t* targets, int64_t n,
                                        int64_t v, int64_t v_real, DType dtype,
                                        const CrossEntropyOptions& options, cudaStream_t stream);

KernelStatus cross_entropy_backward_cuda(void* dlogits, const void* logits, const float* lse,
                                         const int32_t* targets, float dloss, int64_t n, int64_t v,
                                         int64_t v_real, DType dtype,
                                         const CrossEntropyOptions& options, cudaStream_t stream);

// Reads each logit from device memory once where a row fits in shared memory
// (bf16 rows up to ~110k, fp32 up to ~56k columns on H100); longer rows re-read
// the part that does not fit, usually from L2.
KernelStatus cross_entropy_fused_cuda(float* loss, float* row_losses, float* lse, void* dlogits,
                                      const void* logits, const int32_t* targets, float dloss,
                                      int64_t n, int64_t v, int64_t v_real, DType dtype,
                                      const CrossEntropyOptions& options, cudaStream_t stream);

// CUDA versions of the vocabulary-shard functions (device pointers; float32,
// float16, bfloat16; v <= 2^30; asynchronous as above). Each reads the shard's
// logits once (backward: once, and writes dlogits once).
KernelStatus vocab_shard_max_cuda(float* row_max, float* target_logit, const void* logits,
                                  const int32_t* targets, int64_t n, int64_t v, int64_t v_start,
                                  int64_t v_real, int32_t ignore_index, DType dtype,
                                  cudaStream_t stream);

KernelStatus vocab_shard_sum_exp_cuda(float* row_sum, const void* logits, const float* row_max,
                                      int64_t n, int64_t v, int64_t v_start, int64_t v_real,
                                      DType dtype, cudaStream_t stream);

KernelStatus vocab_shard_backward_cuda(void* dlogits, const void* logits, const float* row_max,
                                       const float* row_sum, const int32_t* targets, float scale,
                                       int64_t n, int64_t v, int64_t v_start, int64_t v_real,
                                       int32_t ignore_index, DType dtype, cudaStream_t stream);
#endif

}  // namespace colossal::kernels::loss

#endif  // COLOSSAL_KERNELS_LOSS_LOSS_H_
