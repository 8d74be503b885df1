#include "kernels/common/vector_exp.h"

#include <immintrin.h>

#include <cmath>
#include <limits>

// glibc's libmvec: the AVX2 ("d", 4 x float64) variant of exp, as GCC calls it
// for `#pragma omp simd` loops under -ffast-math. Declared here so that this
// file needs neither -ffast-math nor -mavx2.
extern "C" __attribute__((target("avx2"))) __m256d _ZGVdN4v_exp(__m256d);
extern "C" __attribute__((target("avx2"))) __m256 _ZGVdN8v_expf(__m256);


namespace colossal::kernels {
namespace {

#define COLOSSAL_AVX2 __attribute__((target("avx2")))

COLOSSAL_AVX2 void exp_avx2(const double* in, double* out, int64_t n) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) _mm256_storeu_pd(out + i, _ZGVdN4v_exp(_mm256_loadu_pd(in + i)));
  for (; i < n; ++i) out[i] = std::exp(in[i]);
}

void exp_scalar(const double* in, double* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = std::exp(in[i]);
}

// (s0 + s1) + (s2 + s3) of the four partial sums.
double combine(const double s[4]) { return (s[0] + s[1]) + (s[2] + s[3]); }

COLOSSAL_AVX2 double exp_shifted_sum_f32f_avx2(const float* x, int64_t n, float shift, float* e) {
  const __m256 m = _mm256_set1_ps(shift);
  __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _ZGVdN8v_expf(_mm256_sub_ps(_mm256_loadu_ps(x + i), m));
    _mm256_storeu_ps(e + i, v);
    lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
    hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
  }
  double s[4];
  _mm256_storeu_pd(s, _mm256_add_pd(lo, hi));
  for (; i < n; ++i) {
    e[i] = std::exp(x[i] - shift);
    s[i & 3] += e[i];
  }
  return combine(s);
}

double exp_shifted_sum_f32f_scalar(const float* x, int64_t n, float shift, float* e) {
  double s[4] = {0.0, 0.0, 0.0, 0.0};
  for (int64_t i = 0; i < n; ++i) {
    e[i] = std::exp(x[i] - shift);
    s[i & 3] += e[i];
  }
  return combine(s);
}

COLOSSAL_AVX2 void scale_f32_to_f32_avx2(const float* e, int64_t n, double w, float* out) {
  const __m256d wv = _mm256_set1_pd(w);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    _mm_storeu_ps(out + i, _mm256_cvtpd_ps(_mm256_mul_pd(wv, _mm256_cvtps_pd(_mm_loadu_ps(e + i)))));
  }
  for (; i < n; ++i) out[i] = static_cast<float>(w * e[i]);
}


COLOSSAL_AVX2 float max_avx2(const float* x, int64_t n, bool* nan) {
  __m256 mv = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  __m256 unordered = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    unordered = _mm256_or_ps(unordered, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    mv = _mm256_max_ps(v, mv);  // a NaN in v keeps mv (the second operand)
  }
  float lanes[8];
  _mm256_storeu_ps(lanes, mv);
  float m = lanes[0];
  for (int k = 1; k < 8; ++k) m = lanes[k] > m ? lanes[k] : m;
  bool any = _mm256_movemask_ps(unordered) != 0;
  for (; i < n; ++i) {
    any = any || std::isnan(x[i]);
    m = x[i] > m ? x[i] : m;
  }
  *nan = any;
  return m;
}

float max_scalar(const float* x, int64_t n, bool* nan) {
  float m = -std::numeric_limits<float>::infinity();
  bool any = false;
  for (int64_t i = 0; i < n; ++i) {
    any = any || std::isnan(x[i]);
    m = x[i] > m ? x[i] : m;
  }
  *nan = any;
  return m;
}

bool has_avx2() {
  static const bool avx2 = __builtin_cpu_supports("avx2");
  return avx2;
}

}  // namespace

void exp_f64(const double* in, double* out, int64_t n) {
  has_avx2() ? exp_avx2(in, out, n) : exp_scalar(in, out, n);
}

float max_f32(const float* x, int64_t n, bool* nan) {
  return has_avx2() ? max_avx2(x, n, nan) : max_scalar(x, n, nan);
}

double exp_shifted_sum_f32f(const float* x, int64_t n, float shift, float* e) {
  return has_avx2() ? exp_shifted_sum_f32f_avx2(x, n, shift, e)
                    : exp_shifted_sum_f32f_scalar(x, n, shift, e);
}

void scale_to_f32(const float* e, int64_t n, double w, float* out) {
  if (has_avx2()) {
    scale_f32_to_f32_avx2(e, n, w, out);
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(w * e[i]);
  }
}


}  // namespace colossal::kernels
