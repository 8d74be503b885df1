// colossal::core::gemm — matrix multiply: C = epilogue(alpha * op(A) * op(B) + beta * C).
//
// Row-major throughout: A is [m, k] (or [k, m] with trans_a), B is [k, n] (or
// [n, k] with trans_b), C is [m, n]; with a leading batch dimension all three
// are 3-D ([batch, ...], contiguous, so batch strides are m*k, k*n and m*n) and
// the batch runs as one strided-batched GEMM. A Linear layer's y = x W^T + b is
//   gemm(ctx, x, w, y, {.trans_b = true, .epilogue = Epilogue::kBias, .bias = &b});
//
// Dtypes (A, B and C share one): float32, float16 and bfloat16 (fp32
// accumulation, one rounding of the result), float64; with allow_tf32 a
// float32 GEMM may use TF32 tensor cores (inputs rounded to 10 mantissa bits).
//
// With GemmOptions::addend, beta's term reads that tensor instead of C, and C
// is only written: y = x W + b + r in one GEMM (a residual added as the
// result is written, cuBLASLt's separate C and D).
//
// Epilogues, applied to v = alpha * op(A) op(B) + beta * C, in fp32 (fp64 for
// float64), before the one rounding to C's dtype:
//   kBias      C = v + bias[j]                      (bias: [n], per output column)
//   kBiasGelu  C = gelu(v + bias[j]), gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
// and optionally, for GELU's backward, gelu_input = v + bias[j] (the pre-GELU value);
//   kDGelu     C = v * gelu'(gelu_input)  (GELU's backward: v is the gradient of
//              gelu's output, gelu_input the saved pre-GELU value, read; no bias,
//              beta must be 0), so an input-gradient GEMM applies the derivative
//              as it writes (cuBLASLt's DGELU epilogue).
//
// CUDA: cuBLASLt (or cuBLAS, when autotuning found it faster) on
// ctx.compute_stream(), using the context's workspace (32 MiB by default), with
// the algorithm chosen once per problem (shape, dtypes,
// transposes, epilogue, pointer alignment) and cached in the context's
// matmul_algo_cache(). How it is chosen is ctx.gemm_autotune()
// (ContextOptions::gemm_autotune, else the environment variable
// COLOSSAL_GEMM_AUTOTUNE):
//   on (default, "1")  the first call of a problem asks cuBLASLt's heuristic for
//       its top 8 candidates and, for a problem without an epilogue, adds cuBLAS
//       (cublasGemmEx / cublasGemmStridedBatchedEx with CUBLAS_GEMM_DEFAULT, the
//       call torch.matmul makes; cuBLAS's own heuristic picks kernels cuBLASLt's
//       top 8 may lack) as one more candidate after them; it runs each on the
//       compute stream (2 warm-ups, then 2 interleaved rounds of 5 calls between
//       CUDA events) and keeps the fastest (ties: the heuristic's order, cuBLAS
//       last); the cache entry records which library won, and later calls go
//       to it. That first call blocks the host until the timing is done and
//       costs 12 GEMMs per candidate; later calls cost
//       nothing extra. With beta == 0 the candidates write C (and gelu_input),
//       which the real call then overwrites; with beta != 0 they write a scratch
//       output of C's size (allocated on the compute stream, cuBLAS's candidate
//       getting a copy of C there since it works in place; when it does not fit,
//       the heuristic's first choice is kept) so C is read, never changed. While
//       the compute stream is being captured into a CUDA graph nothing is timed:
//       cuBLASLt's heuristic first choice is used and cached as provisional, and
//       the first call of that problem outside a capture autotunes. (A problem
//       already cached as cuBLAS is captured as cuBLAS: it uses the context's
//       workspace, so nothing is allocated during the capture.)
//   off ("0")  cuBLASLt's heuristic's first choice (never cuBLAS).
//       Deterministic: one GPU model and cuBLAS version always pick the same
//       algorithm, so results repeat bit
//       for bit across runs and processes. With autotuning the choice depends on
//       timings, so two runs (or two ranks) may pick different algorithms whose
//       results differ by rounding (within the tolerances of core/gemm's tests:
//       about one rounding of the output type, more with split-K); within one
//       context a problem keeps its algorithm, so repeated calls are identical.
//   "log"  on, and each tuning prints its candidates (cuBLASLt algorithm id,
//       tile, stages, split-K; "cuBLAS cublasGemmEx CUBLAS_GEMM_DEFAULT") and
//       their times to stderr.
// cuBLASLt is column-major; a row-major matrix is the column-major view of its
// transpose, so C = op(A) op(B) is computed as C^T = op(B)^T op(A)^T: cuBLASLt's
// "A" is our B and its "B" our A, its m is our n and its n our m, the transposes
// swap along, every leading dimension is a row length of ours, and bias[j] is
// cuBLASLt's per-row bias of C^T. cuBLAS gets the same arguments (its A is our B,
// its m our n, ...), through the context's cuBLAS handle, its stream set to the
// compute stream and its workspace to the context's (the one cuBLASLt uses).
// Enqueued, not synchronised.
// CPU: OpenBLAS cblas_sgemm / cblas_dgemm; float16/bfloat16 are converted to
// float32, multiplied by sgemm and rounded once; epilogues run in a loop after.
// allow_tf32 does nothing on the CPU (the result is plain fp32, more accurate).
//
//   Context& ctx = Context::get();
//   COLOSSAL_ASSIGN_OR_RETURN(Tensor h, gemm::matmul(ctx, x, w_fc, {.trans_b = true,
//       .epilogue = gemm::Epilogue::kBiasGelu, .bias = &b_fc}));
//   COLOSSAL_RETURN_IF_ERROR(gemm::gemm(ctx, h, w_proj, y, {.trans_b = true, .beta = 1.0}));
#ifndef COLOSSAL_CORE_GEMM_GEMM_H_
#define COLOSSAL_CORE_GEMM_GEMM_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/context/context.h"
#include "core/tensor/tensor.h"

namespace colossal::core::gemm {

enum class Epilogue { kNone, kBias, kBiasGelu, kDGelu };

const char* epilogue_name(Epilogue epilogue);  // "none", "bias", "bias_gelu", "dgelu"

struct GemmOptions {
  bool trans_a = false;  // op(A) = A^T: A is stored [k, m]
  bool trans_b = false;  // op(B) = B^T: B is stored [n, k]
  double alpha = 1.0;
  // 0 means C is not read (it may hold anything, NaN included).
  double beta = 0.0;
  // Not null: beta's term reads this tensor (C's shape, dtype and device;
  // beta != 0; it may be C itself, else it must not overlap C) and C is only
  // written.
  const Tensor* addend = nullptr;
  // float32 only: allow TF32 tensor cores on CUDA (ignored on the CPU).
  bool allow_tf32 = false;
  // The problem's size changes from call to call (a mixture of experts: the
  // rows each expert receives): on CUDA the algorithm is cuBLASLt's heuristic
  // first choice, never autotuned, whose timing would recur with every new
  // size. Cached per size as usual. Ignored on the CPU.
  bool varying_size = false;
  Epilogue epilogue = Epilogue::kNone;
  // kBias / kBiasGelu: [n], C's dtype, C's device. Must be null otherwise.
  const Tensor* bias = nullptr;
  // The pre-GELU value, C's shape and dtype, n a multiple of 8 (cuBLASLt's
  // rule for it, kept on the CPU too). kBiasGelu, optional: written. kDGelu,
  // required: read. Null with the other epilogues.
  const Tensor* gelu_input = nullptr;
};

// C = epilogue(alpha * op(A) op(B) + beta * C) on ctx's device (A, B, C, bias
// and gelu_input must all be on ctx.device()). C must not overlap A or B.
// Errors (InvalidArgumentError naming the shapes and dtypes): ranks other than
// all-2 or all-3, mismatched batch/inner/outer dimensions, mixed or unsupported
// dtypes, tensors on another device, a bias or gelu_input that does not fit the
// epilogue, dimensions past what the BLAS takes (2^31 - 1). UnimplementedError
// when cuBLASLt has no algorithm for the problem.
absl::Status gemm(Context& ctx, const Tensor& a, const Tensor& b, Tensor& c,
                  const GemmOptions& options = {});

// A new C = epilogue(alpha * op(A) op(B)), allocated on ctx.compute_stream().
// options.beta must be 0. Errors as gemm(), or out of memory.
absl::StatusOr<Tensor> matmul(Context& ctx, const Tensor& a, const Tensor& b,
                              const GemmOptions& options = {});

}  // namespace colossal::core::gemm

#endif  // COLOSSAL_CORE_GEMM_GEMM_H_
