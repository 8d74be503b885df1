// CPU reference and backend for the scaled masked / causal softmax. One row at a
// time, in the same order of operations as the CUDA kernels: included columns
// become s*x (s = sign(scale)), the row max m is taken over them, then
// e = exp(|scale| * (s*x - m)) in float (double for float64), the sum of e is
// accumulated in double, and y = e * (1 / sum). Excluded columns are -inf until
// the end and come out exactly 0; an all-excluded row has sum 0 and is all zeros.
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/common/dispatch.h"
#include "kernels/softmax/softmax.h"
#include "kernels/softmax/softmax_internal.h"

namespace colossal::kernels::softmax {
namespace {

// float for float32/float16/bfloat16, double for float64.
template <typename T>
using Math = typename CpuMathType<T>::type;

template <typename F>
KernelStatus dispatch_cpu_types(DType dtype, F&& f) {
  if (dtype == DType::kF64) return f(double{});
  return dispatch_float_types(dtype, f);
}

bool cpu_dtype(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16 ||
         dtype == DType::kF64;
}

// mask == nullptr: no mask; causal: exclude columns past internal::causal_limit.
// Below this many elements rows run on the calling thread: waking the OpenMP
// team costs more than the work.
constexpr int64_t kParallelMin = int64_t{1} << 16;

template <typename T>
void forward_rows(T* y, const T* x, const uint8_t* mask, int64_t rows, int64_t heads, int64_t sq,
                  int64_t sk, bool causal, float scale) {
  using M = Math<T>;
  constexpr M kNegInf = -std::numeric_limits<M>::infinity();
  const M sign = scale < 0 ? M(-1) : M(1);
  const M magnitude = static_cast<M>(std::fabs(scale));
#pragma omp parallel if (rows * sk >= kParallelMin)
  {
  std::vector<M> v(sk);  // one per thread
#pragma omp for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * sk;
    T* yr = y + r * sk;
    const uint8_t* mr = mask ? mask + internal::mask_row(r, heads, sq) * sk : nullptr;
    const int64_t limit = causal ? internal::causal_limit(r, sq, sk) : sk;
    M m = kNegInf;
    for (int64_t j = 0; j < sk; ++j) {
      const bool included = j < limit && (mr == nullptr || mr[j] == 0);
      v[j] = included ? sign * to_math(xr[j]) : kNegInf;
      m = std::fmax(m, v[j]);  // fmax skips NaN; a NaN still poisons the sum below
    }
    double sum = 0;
    for (int64_t j = 0; j < sk; ++j) {
      const M e = v[j] == kNegInf ? M(0) : std::exp(magnitude * (v[j] - m));
      v[j] = e;
      sum += e;
    }
    const M inv = sum == 0 ? M(0) : static_cast<M>(1.0 / sum);
    for (int64_t j = 0; j < sk; ++j) yr[j] = from_math<T>(v[j] * inv);
  }
  }
}

// limit_of(r) is the number of leading included columns of row r (sk when all).
template <typename T>
void backward_rows(T* dx, const T* dy, const T* y, int64_t rows, int64_t sq, int64_t sk,
                   bool causal, float scale) {
  using M = Math<T>;
#pragma omp parallel for schedule(static) if (rows * sk >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t limit = causal ? internal::causal_limit(r, sq, sk) : sk;
    const T* gr = dy + r * sk;
    const T* pr = y + r * sk;
    T* dr = dx + r * sk;
    double dot = 0;
    for (int64_t j = 0; j < limit; ++j) {
      dot += static_cast<double>(to_math(gr[j])) * static_cast<double>(to_math(pr[j]));
    }
    const M d = static_cast<M>(dot);
    const M s = static_cast<M>(scale);
    for (int64_t j = 0; j < limit; ++j) {
      dr[j] = from_math<T>(s * to_math(pr[j]) * (to_math(gr[j]) - d));
    }
    for (int64_t j = limit; j < sk; ++j) dr[j] = from_math<T>(M(0));
  }
}

KernelStatus forward(void* y, const void* x, const uint8_t* mask, int64_t rows, int64_t heads,
                     int64_t sq, int64_t sk, DType dtype, float scale, bool causal,
                     size_t mask_bytes) {
  const size_t bytes = static_cast<size_t>(rows * sk) * dtype_size(dtype);
  KernelStatus s = internal::check_forward_buffers(y, x, mask, bytes, mask_bytes);
  if (!s.ok()) return s;
  return dispatch_cpu_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    forward_rows(static_cast<T*>(y), static_cast<const T*>(x), mask, rows, heads, sq, sk, causal,
                 scale);
    return KernelStatus();
  });
}

KernelStatus backward(void* dx, const void* dy, const void* y, int64_t rows, int64_t sq, int64_t sk,
                      DType dtype, float scale, bool causal) {
  const size_t bytes = static_cast<size_t>(rows * sk) * dtype_size(dtype);
  KernelStatus s = internal::check_backward_buffers(dx, dy, y, bytes);
  if (!s.ok()) return s;
  return dispatch_cpu_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    backward_rows(static_cast<T*>(dx), static_cast<const T*>(dy), static_cast<const T*>(y), rows,
                  sq, sk, causal, scale);
    return KernelStatus();
  });
}

}  // namespace

KernelStatus scaled_masked_softmax_forward_cpu(void* y, const void* x, const uint8_t* mask,
                                               int64_t batch, int64_t heads, int64_t sq, int64_t sk,
                                               DType dtype, float scale) {
  int64_t rows = 0;
  KernelStatus s = internal::count_rows({batch, heads, sq}, sk, &rows);
  if (!s.ok()) return s;
  if (!cpu_dtype(dtype)) return KernelStatus::unsupported("softmax cpu: dtype must be floating");
  if (rows == 0 || sk == 0) return KernelStatus();
  const size_t mask_bytes = mask ? static_cast<size_t>(batch * sq * sk) : 0;
  return forward(y, x, mask, rows, heads, sq, sk, dtype, scale, /*causal=*/false, mask_bytes);
}

KernelStatus scaled_masked_softmax_backward_cpu(void* dx, const void* dy, const void* y,
                                                int64_t batch, int64_t heads, int64_t sq,
                                                int64_t sk, DType dtype, float scale) {
  int64_t rows = 0;
  KernelStatus s = internal::count_rows({batch, heads, sq}, sk, &rows);
  if (!s.ok()) return s;
  if (!cpu_dtype(dtype)) return KernelStatus::unsupported("softmax cpu: dtype must be floating");
  if (rows == 0 || sk == 0) return KernelStatus();
  return backward(dx, dy, y, rows, sq, sk, dtype, scale, /*causal=*/false);
}

KernelStatus scaled_causal_softmax_forward_cpu(void* y, const void* x, int64_t batches, int64_t sq,
                                               int64_t sk, DType dtype, float scale) {
  int64_t rows = 0;
  KernelStatus s = internal::count_rows({batches, sq}, sk, &rows);
  if (!s.ok()) return s;
  if (!cpu_dtype(dtype)) return KernelStatus::unsupported("softmax cpu: dtype must be floating");
  if (rows == 0 || sk == 0) return KernelStatus();
  return forward(y, x, nullptr, rows, /*heads=*/1, sq, sk, dtype, scale, /*causal=*/true, 0);
}

KernelStatus scaled_causal_softmax_backward_cpu(void* dx, const void* dy, const void* y,
                                                int64_t batches, int64_t sq, int64_t sk,
                                                DType dtype, float scale) {
  int64_t rows = 0;
  KernelStatus s = internal::count_rows({batches, sq}, sk, &rows);
  if (!s.ok()) return s;
  if (!cpu_dtype(dtype)) return KernelStatus::unsupported("softmax cpu: dtype must be floating");
  if (rows == 0 || sk == 0) return KernelStatus();
  return backward(dx, dy, y, rows, sq, sk, dtype, scale, /*causal=*/true);
}

}  // namespace colossal::kernels::softmax
