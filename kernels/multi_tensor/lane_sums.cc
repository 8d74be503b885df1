#include "kernels/multi_tensor/lane_sums.h"

#include <type_traits>

#include "kernels/common/dispatch.h"
#include "kernels/common/half.h"
#include "kernels/common/simd_convert.h"
#include "kernels/multi_tensor/multi_tensor_internal.h"

namespace colossal::kernels::multi_tensor::internal {
namespace {

constexpr int kLanes = kCpuLanes;  // the SIMD loops below hold 16 lanes

template <typename T>
double square(T x) {
  const double v = static_cast<double>(to_math(x));
  return v * v;
}

template <typename T>
T add(T a, T b) {
  if constexpr (std::is_same_v<T, double> || std::is_same_v<T, float>) {
    return a + b;
  } else {
    return from_float<T>(to_math(a) + to_math(b));
  }
}

double sum_lanes(const double* lanes) {
  double sum = 0;
  for (int l = 0; l < kLanes; ++l) sum += lanes[l];
  return sum;
}

// ---- scalar: the order every other version keeps ----

// Adds x[k]'s square to lanes[(first + k) % 16] for k in [0, n). Whole rows of
// 16 go through an `omp simd` loop (each lane keeps its own order, so the
// bits are the element-by-element loop's; the compiler may use SSE2 there).
template <typename T>
void add_squares(const T* x, int64_t n, int64_t first, double* lanes) {
  int64_t k = 0;
  for (; k < n && (first + k) % kLanes != 0; ++k) lanes[(first + k) % kLanes] += square(x[k]);
  for (; k + kLanes <= n; k += kLanes) {
#pragma omp simd
    for (int l = 0; l < kLanes; ++l) lanes[l] += square(x[k + l]);
  }
  for (; k < n; ++k) lanes[(first + k) % kLanes] += square(x[k]);
}

template <typename T>
double squares_scalar(const T* x, int64_t n) {
  double lanes[kLanes] = {};
  add_squares(x, n, 0, lanes);
  return sum_lanes(lanes);
}

// acc[k] = acc + part for k in [0, n), the results' squares into lanes[(first + k) % 16].
template <typename T>
void accumulate_into(T* acc, const T* part, int64_t n, int64_t first, double* lanes) {
  auto one = [&](int64_t k, int lane) {
    acc[k] = add(acc[k], part[k]);
    lanes[lane] += square(acc[k]);
  };
  int64_t k = 0;
  for (; k < n && (first + k) % kLanes != 0; ++k) one(k, static_cast<int>((first + k) % kLanes));
  for (; k + kLanes <= n; k += kLanes) {
#pragma omp simd
    for (int l = 0; l < kLanes; ++l) one(k + l, l);
  }
  for (; k < n; ++k) one(k, static_cast<int>((first + k) % kLanes));
}

template <typename T>
double accumulate_scalar(T* acc, const T* part, int64_t n) {
  double lanes[kLanes] = {};
  accumulate_into(acc, part, n, 0, lanes);
  return sum_lanes(lanes);
}

#if defined(__x86_64__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12, see simd_convert.h
using simd::load16;
using simd::load8;
using simd::store16;
using simd::store8;

// ---- AVX2: 16 elements a step as two halves of 8; a[j] holds lanes 4j .. 4j+3 ----

COLOSSAL_AVX2 inline __m256d square4(__m128 x) {
  const __m256d v = _mm256_cvtps_pd(x);
  return _mm256_mul_pd(v, v);
}

template <typename T>
COLOSSAL_AVX2 inline void add_squares16(const T* x, __m256d* a) {
  for (int h = 0; h < 2; ++h) {
    const __m256 v = load8(x + 8 * h);
    a[2 * h] = _mm256_add_pd(a[2 * h], square4(_mm256_castps256_ps128(v)));
    a[2 * h + 1] = _mm256_add_pd(a[2 * h + 1], square4(_mm256_extractf128_ps(v, 1)));
  }
}

COLOSSAL_AVX2 inline void spill(const __m256d* a, double* lanes) {
  for (int j = 0; j < 4; ++j) _mm256_storeu_pd(lanes + 4 * j, a[j]);
}

template <typename T>
COLOSSAL_AVX2 double squares_avx2(const T* x, int64_t n) {
  __m256d a[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) add_squares16(x + i, a);
  double lanes[kLanes];
  spill(a, lanes);
  add_squares(x + i, n - i, i, lanes);
  return sum_lanes(lanes);
}

template <typename T>
COLOSSAL_AVX2 double accumulate_avx2(T* acc, const T* part, int64_t n) {
  __m256d a[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    store8(acc + i, _mm256_add_ps(load8(acc + i), load8(part + i)));
    store8(acc + i + 8, _mm256_add_ps(load8(acc + i + 8), load8(part + i + 8)));
    add_squares16(acc + i, a);  // the rounded results, read back from L1
  }
  double lanes[kLanes];
  spill(a, lanes);
  accumulate_into(acc + i, part + i, n - i, i, lanes);
  return sum_lanes(lanes);
}

// ---- AVX-512: 16 elements a step; lo holds lanes 0 .. 7, hi 8 .. 15 ----

COLOSSAL_AVX512 inline __m512d square8(__m256 x) {
  const __m512d v = _mm512_cvtps_pd(x);
  return _mm512_mul_pd(v, v);
}

template <typename T>
COLOSSAL_AVX512 inline void add_squares16(const T* x, __m512d* lo, __m512d* hi) {
  const __m512 v = load16(x);
  *lo = _mm512_add_pd(*lo, square8(_mm512_castps512_ps256(v)));
  *hi = _mm512_add_pd(*hi, square8(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
}

template <typename T>
COLOSSAL_AVX512 double squares_avx512(const T* x, int64_t n) {
  __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) add_squares16(x + i, &lo, &hi);
  double lanes[kLanes];
  _mm512_storeu_pd(lanes, lo);
  _mm512_storeu_pd(lanes + 8, hi);
  add_squares(x + i, n - i, i, lanes);
  return sum_lanes(lanes);
}

template <typename T>
COLOSSAL_AVX512 double accumulate_avx512(T* acc, const T* part, int64_t n) {
  __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    store16(acc + i, _mm512_add_ps(load16(acc + i), load16(part + i)));
    add_squares16(acc + i, &lo, &hi);  // the rounded results, read back from L1
  }
  double lanes[kLanes];
  _mm512_storeu_pd(lanes, lo);
  _mm512_storeu_pd(lanes + 8, hi);
  accumulate_into(acc + i, part + i, n - i, i, lanes);
  return sum_lanes(lanes);
}

#pragma GCC diagnostic pop
#endif  // defined(__x86_64__)

}  // namespace

template <typename T>
SquaresFn<T> squares_for(CpuIsa isa) {
#if defined(__x86_64__)
  if constexpr (!std::is_same_v<T, double>) {
    if (isa == CpuIsa::kAvx512) return &squares_avx512<T>;
    if (isa == CpuIsa::kAvx2) return &squares_avx2<T>;
  }
#endif
  return &squares_scalar<T>;
}

template <typename T>
AccumulateFn<T> accumulate_for(CpuIsa isa) {
#if defined(__x86_64__)
  if constexpr (!std::is_same_v<T, double>) {
    if (isa == CpuIsa::kAvx512) return &accumulate_avx512<T>;
    if (isa == CpuIsa::kAvx2) return &accumulate_avx2<T>;
  }
#endif
  return &accumulate_scalar<T>;
}

template SquaresFn<float> squares_for<float>(CpuIsa);
template SquaresFn<Half> squares_for<Half>(CpuIsa);
template SquaresFn<BFloat16> squares_for<BFloat16>(CpuIsa);
template SquaresFn<double> squares_for<double>(CpuIsa);
template AccumulateFn<float> accumulate_for<float>(CpuIsa);
template AccumulateFn<Half> accumulate_for<Half>(CpuIsa);
template AccumulateFn<BFloat16> accumulate_for<BFloat16>(CpuIsa);
template AccumulateFn<double> accumulate_for<double>(CpuIsa);

}  // namespace colossal::kernels::multi_tensor::internal
