// Private to core/gemm: the validated problem handed to a backend.
#ifndef COLOSSAL_CORE_GEMM_GEMM_INTERNAL_H_
#define COLOSSAL_CORE_GEMM_GEMM_INTERNAL_H_

#include <cmath>
#include <cstdint>

#include "absl/status/status.h"
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
  Epilogue epilogue = Epilogue::kNone;
  const void* a = nullptr;
  const void* b = nullptr;
  void* c = nullptr;
  const void* bias = nullptr;  // [n], when the epilogue has a bias
  void* gelu_input = nullptr;  // [batch, m, n], optional with kBiasGelu
};

// The tanh approximation of GELU, as cuBLASLt's epilogue computes it.
template <typename T>
T gelu_tanh(T x) {
  const T kSqrt2OverPi = static_cast<T>(0.7978845608028654);
  return static_cast<T>(0.5) * x *
         (static_cast<T>(1) + std::tanh(kSqrt2OverPi * (x + static_cast<T>(0.044715) * x * x * x)));
}

// OpenBLAS; every dtype gemm() accepts.
absl::Status run_cpu(const GemmProblem& p);

#if COLOSSAL_WITH_CUDA
// cuBLASLt on ctx.compute_stream().
absl::Status run_cuda(Context& ctx, const GemmProblem& p);
#endif

}  // namespace colossal::core::gemm::internal

#endif  // COLOSSAL_CORE_GEMM_GEMM_INTERNAL_H_
