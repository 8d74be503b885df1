// Private to core/gemm (a public header of the target only so that its tests
// can reach these): the validated problem handed to a backend, and the
// host-side pieces of the CUDA backend's algorithm choice (cuBLASLt, or cuBLAS's
// cublasGemmEx as one more autotuning candidate).
#ifndef COLOSSAL_CORE_GEMM_GEMM_INTERNAL_H_
#define COLOSSAL_CORE_GEMM_GEMM_INTERNAL_H_

#include <cmath>
#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "bazel/cuda_config.h"
#include "core/context/context.h"
#include "core/dtype/dtype.h"
#include "core/gemm/gemm.h"

namespace colossal::core::gemm::internal {

// Row-major, contiguous; strides between batch entries are m*k, k*n, m*n.
struct GemmProblem {
  int64_t m = 0, n = 0, k = 0, batch = 1;
  DType dtype = DType::kF32;
  bool trans_a = false, trans_b = false;
  double alpha = 1.0, beta = 0.0;
  bool allow_tf32 = false;
  bool varying_size = false;  // GemmOptions::varying_size: never autotuned
  Epilogue epilogue = Epilogue::kNone;
  const void* a = nullptr;
  const void* b = nullptr;
  void* c = nullptr;
  const void* addend = nullptr;  // beta's C when not null and not c (C is then only written)
  const void* bias = nullptr;    // [n], when the epilogue has a bias
  void* gelu_input = nullptr;  // [batch, m, n]: written by kBiasGelu (optional), read by kDGelu
};

// The tanh approximation of GELU, as cuBLASLt's epilogue computes it.
template <typename T>
T gelu_tanh(T x) {
  const T kSqrt2OverPi = static_cast<T>(0.7978845608028654);
  return static_cast<T>(0.5) * x *
         (static_cast<T>(1) + std::tanh(kSqrt2OverPi * (x + static_cast<T>(0.044715) * x * x * x)));
}

// Its derivative, d gelu_tanh / dx (cuBLASLt's DGELU epilogue):
//   0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2), t = tanh(u).
template <typename T>
T gelu_tanh_grad(T x) {
  const T kSqrt2OverPi = static_cast<T>(0.7978845608028654);
  const T kCubic = static_cast<T>(0.044715);
  const T t = std::tanh(kSqrt2OverPi * (x + kCubic * x * x * x));
  return static_cast<T>(0.5) * (static_cast<T>(1) + t) +
         static_cast<T>(0.5) * x * (static_cast<T>(1) - t * t) * kSqrt2OverPi *
             (static_cast<T>(1) + static_cast<T>(3) * kCubic * x * x);
}

// OpenBLAS; every dtype gemm() accepts.
absl::Status run_cpu(const GemmProblem& p);

// How run_cuda gets its algorithm, from the cache entry for the problem (if
// any), the context's autotune setting and whether the compute stream is being
// captured into a CUDA graph.
enum class AlgoAction {
  kUseCached,    // a final entry, or a provisional one inside a capture
  kHeuristic,    // no entry, autotuning off: heuristic #1, cached as kHeuristic
  kProvisional,  // no entry, autotuning on, capturing: heuristic #1, cached as kProvisional
  kAutotune,     // no entry or a provisional one, autotuning on, not capturing: time the
                 // candidates, cache the fastest as kAutotuned
};
AlgoAction choose_algo_action(const std::optional<MatmulAlgo>& cached, GemmAutotune autotune,
                              bool capturing);

// Autotuning: how many of cuBLASLt's heuristic candidates are timed (cuBLAS,
// when cublas_can_run, comes after them as one more), and how. Each candidate runs kAutotuneWarmups times, then kAutotuneRounds rounds (the
// candidates interleaved) of kAutotuneReps back-to-back calls between CUDA
// events; a candidate's time is its fastest round.
inline constexpr int kAutotuneCandidates = 8;  // 32 measured no better (H100, 8192^3 bf16)
inline constexpr int kAutotuneWarmups = 2;
inline constexpr int kAutotuneRounds = 2;
inline constexpr int kAutotuneReps = 5;

// The index of the smallest time (the earliest among equals: heuristic order
// breaks ties); -1 when `times_ms` is empty or holds no finite time. Negative
// or NaN entries mark candidates that failed and are never chosen.
int fastest_candidate(const float* times_ms, int count);

// Whether cuBLAS (cublasGemmEx, cublasGemmStridedBatchedEx) computes the problem
// exactly as asked, so that it may be a candidate: no epilogue (plain
// C = alpha op(A) op(B) + beta C, in place: no separate addend), a dtype gemm()
// takes (bf16 and fp16 with fp32 compute, fp32 or TF32, fp64).
bool cublas_can_run(const GemmProblem& p);

// Tests only: which library a CUDA cache miss may choose (process-wide; the
// default is kAuto). Cached entries are used as they are, whatever the setting.
//   kAuto      autotuning times cuBLASLt's candidates and, when cublas_can_run,
//              cuBLAS; autotuning off and graph capture take cuBLASLt's heuristic #1.
//   kCublasLt  cuBLASLt only (autotuning times only its candidates).
//   kCublas    cuBLAS, untimed and cached as a final kHeuristic entry, for every
//              problem cublas_can_run accepts (with autotuning on or off; a
//              provisional choice while capturing stays cuBLASLt's heuristic #1);
//              other problems as kAuto.
enum class CudaLibraryChoice { kAuto, kCublasLt, kCublas };
void set_cuda_library_for_testing(CudaLibraryChoice choice);
CudaLibraryChoice cuda_library_for_testing();

// While alive, the process uses `choice` (then the previous setting again).
class ScopedCudaLibraryForTesting {
 public:
  explicit ScopedCudaLibraryForTesting(CudaLibraryChoice choice)
      : previous_(cuda_library_for_testing()) {
    set_cuda_library_for_testing(choice);
  }
  ~ScopedCudaLibraryForTesting() { set_cuda_library_for_testing(previous_); }
  ScopedCudaLibraryForTesting(const ScopedCudaLibraryForTesting&) = delete;
  ScopedCudaLibraryForTesting& operator=(const ScopedCudaLibraryForTesting&) = delete;

 private:
  CudaLibraryChoice previous_;
};

#if COLOSSAL_WITH_CUDA
// The cache key of a problem, in cuBLASLt's column-major terms (see gemm.h).
// Host-only: reads the pointers' addresses, never the memory.
MatmulAlgoKey matmul_algo_key(const GemmProblem& p);

// The arguments of the cublasGemmEx (batch 1) or cublasGemmStridedBatchedEx
// call for a problem, mapped onto column-major exactly as for cuBLASLt: cuBLAS's
// A is our B, its B our A, its m our n, its n our m. Enum fields hold the
// numeric values of cublasOperation_t, cudaDataType_t and cublasComputeType_t.
// Leading dimensions are at least 1 (cuBLAS's rule, even when k == 0 leaves a
// matrix empty); strides are 0 without a batch. Host-only.
struct CublasArgs {
  int32_t op_a = 0, op_b = 0;
  int64_t m = 0, n = 0, k = 0, batch = 1;
  int64_t lda = 0, ldb = 0, ldc = 0;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  int32_t data_type = 0, compute_type = 0, scale_type = 0;
};
CublasArgs cublas_args(const GemmProblem& p);

// cuBLASLt (or cuBLAS, when the problem's cache entry says so) on ctx.compute_stream().
absl::Status run_cuda(Context& ctx, const GemmProblem& p);
#endif

}  // namespace colossal::core::gemm::internal

#endif  // COLOSSAL_CORE_GEMM_GEMM_INTERNAL_H_
