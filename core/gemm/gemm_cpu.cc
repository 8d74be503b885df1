// The CPU backend: OpenBLAS for the products, a loop for epilogues and for
// rounding float16/bfloat16 results once.
#include <cblas.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/gemm/gemm_internal.h"
#include "core/status/check.h"
#include "kernels/common/half.h"

namespace colossal::core::gemm::internal {
namespace {

using kernels::BFloat16;
using kernels::Half;

// One BLAS call: c (row-major [m, n]) = alpha op(a) op(b) + beta c.
void blas(const GemmProblem& p, const float* a, const float* b, float* c, float beta) {
  cblas_sgemm(CblasRowMajor, p.trans_a ? CblasTrans : CblasNoTrans,
              p.trans_b ? CblasTrans : CblasNoTrans, static_cast<blasint>(p.m),
              static_cast<blasint>(p.n), static_cast<blasint>(p.k), static_cast<float>(p.alpha), a,
              static_cast<blasint>(std::max<int64_t>(1, p.trans_a ? p.m : p.k)), b,
              static_cast<blasint>(std::max<int64_t>(1, p.trans_b ? p.k : p.n)), beta, c,
              static_cast<blasint>(std::max<int64_t>(1, p.n)));
}

void blas(const GemmProblem& p, const double* a, const double* b, double* c, double beta) {
  cblas_dgemm(CblasRowMajor, p.trans_a ? CblasTrans : CblasNoTrans,
              p.trans_b ? CblasTrans : CblasNoTrans, static_cast<blasint>(p.m),
              static_cast<blasint>(p.n), static_cast<blasint>(p.k), p.alpha, a,
              static_cast<blasint>(std::max<int64_t>(1, p.trans_a ? p.m : p.k)), b,
              static_cast<blasint>(std::max<int64_t>(1, p.trans_b ? p.k : p.n)), beta, c,
              static_cast<blasint>(std::max<int64_t>(1, p.n)));
}

// The epilogue on `acc` (the accumulator type), writing the final values to
// `out` (the storage type): adds the bias, saves the pre-GELU value and applies
// GELU, or multiplies by GELU's derivative at the saved pre-GELU value.
template <typename Acc, typename Out>
void epilogue(const GemmProblem& p, int64_t batch_index, Acc* acc, const Out* bias, Out* out) {
  const int64_t mn = p.m * p.n;
  Out* aux = p.gelu_input ? static_cast<Out*>(p.gelu_input) + batch_index * mn : nullptr;
  auto widen = [](Out x) -> Acc {
    if constexpr (std::is_same_v<Out, Acc>) {
      return x;
    } else {
      return kernels::to_float(x);
    }
  };
  auto narrow = [](Acc x) -> Out {
    if constexpr (std::is_same_v<Out, Acc>) {
      return x;
    } else {
      return kernels::from_float<Out>(x);
    }
  };
  const bool has_bias = p.epilogue == Epilogue::kBias || p.epilogue == Epilogue::kBiasGelu;
  // Rows in parallel (each element is computed the same way whatever the
  // thread count) once there is enough work to pay for waking the threads.
#pragma omp parallel for schedule(static) if (mn >= (int64_t{1} << 16))
  for (int64_t i = 0; i < p.m; ++i) {
    for (int64_t j = 0; j < p.n; ++j) {
      const int64_t idx = i * p.n + j;
      Acc v = acc[idx];
      if (has_bias) v += widen(bias[j]);
      if (p.epilogue == Epilogue::kBiasGelu) {
        if (aux != nullptr) aux[idx] = narrow(v);
        v = gelu_tanh(v);
      } else if (p.epilogue == Epilogue::kDGelu) {
        v *= gelu_tanh_grad(widen(aux[idx]));
      }
      out[idx] = narrow(v);
    }
  }
}

template <typename T>
void run_native(const GemmProblem& p) {
  const T* a = static_cast<const T*>(p.a);
  const T* b = static_cast<const T*>(p.b);
  T* c = static_cast<T*>(p.c);
  const T* bias = static_cast<const T*>(p.bias);
  for (int64_t i = 0; i < p.batch; ++i) {
    T* ci = c + i * p.m * p.n;
    if (p.beta == 0.0) std::fill(ci, ci + p.m * p.n, T(0));  // BLAS may read C even then
    blas(p, a + i * p.m * p.k, b + i * p.k * p.n, ci, static_cast<T>(p.beta));
    if (p.epilogue != Epilogue::kNone) epilogue<T, T>(p, i, ci, bias, ci);
  }
}

template <typename H>
void to_float(const H* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = kernels::to_float(src[i]);
}

// float16 / bfloat16: widen to float32, one sgemm, epilogue, round once.
template <typename H>
void run_widened(const GemmProblem& p) {
  const int64_t size_a = p.m * p.k, size_b = p.k * p.n, size_c = p.m * p.n;
  std::vector<float> a(size_a), b(size_b), c(size_c);
  const H* bias = static_cast<const H*>(p.bias);
  for (int64_t i = 0; i < p.batch; ++i) {
    to_float(static_cast<const H*>(p.a) + i * size_a, size_a, a.data());
    to_float(static_cast<const H*>(p.b) + i * size_b, size_b, b.data());
    H* out = static_cast<H*>(p.c) + i * size_c;
    if (p.beta != 0.0) {
      to_float(out, size_c, c.data());
    } else {
      std::fill(c.begin(), c.end(), 0.0f);
    }
    blas(p, a.data(), b.data(), c.data(), static_cast<float>(p.beta));
    epilogue<float, H>(p, i, c.data(), bias, out);
  }
}

}  // namespace

absl::Status run_cpu(const GemmProblem& p) {
  switch (p.dtype) {
    case DType::kF32: run_native<float>(p); return absl::OkStatus();
    case DType::kF64: run_native<double>(p); return absl::OkStatus();
    case DType::kF16: run_widened<Half>(p); return absl::OkStatus();
    case DType::kBF16: run_widened<BFloat16>(p); return absl::OkStatus();
    default: break;
  }
  COLOSSAL_FATAL() << "gemm validated an unsupported dtype " << dtype_name(p.dtype);
}

}  // namespace colossal::core::gemm::internal
