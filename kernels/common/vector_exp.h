// colossal::kernels::vector_exp — float64 exp over arrays, vectorized, and the
// softmax row steps built on it.
//
// Every exp is within 4 ulp of the exact value (float64: ~1e-15 relative), so
// CPU references that compute in float64 stay float64-accurate while running
// 4 values per instruction. On CPUs with AVX2 these call glibc's vector math
// library (libmvec's 4-lane exp); elsewhere std::exp, one value at a time. The
// ISA is picked once at run time, so the binary needs no -march flag. Sums are
// taken in four partial sums by index mod 4, added as (s0 + s1) + (s2 + s3):
// the same order with and without AVX2.
//
//   double buf[256];
//   for (int i = 0; i < 256; ++i) buf[i] = x[i] - max;
//   colossal::kernels::exp_f64(buf, buf, 256);
//
//   bool nan = false;
//   const float m = colossal::kernels::max_f32(row, n, &nan);
//   const double s = colossal::kernels::exp_shifted_sum_f32f(row, n, m, e);  // e[j] = exp(row[j] - m)
#ifndef COLOSSAL_KERNELS_COMMON_VECTOR_EXP_H_
#define COLOSSAL_KERNELS_COMMON_VECTOR_EXP_H_

#include <cstdint>

namespace colossal::kernels {

// out[i] = exp(in[i]) for i < n. in and out may be the same array.
void exp_f64(const double* in, double* out, int64_t n);

// The largest of x[0..n) (-inf for n == 0); *nan is set when any x[i] is NaN
// (the maximum of the others is returned then).
float max_f32(const float* x, int64_t n, bool* nan);

// For float32 softmax rows where float64 accuracy is not needed (training):
// e[i] = exp(x[i] - shift) with the difference rounded to
// float32 and libmvec's 8-lane expf (within 4 ulp; std::exp elsewhere), so
// e[i] is within (4 + |x[i] - shift|) * 2^-24 relative of the exact value.
// The sum is taken in float64 (partial sums by i mod 4; on AVX2 in two halves
// of 8-lane blocks, so the last bits may differ from the scalar path).
double exp_shifted_sum_f32f(const float* x, int64_t n, float shift, float* e);

// out[i] = float(w * e[i]) for i < n: one rounding of a float64 product.
void scale_to_f32(const float* e, int64_t n, double w, float* out);

}  // namespace colossal::kernels

#endif  // COLOSSAL_KERNELS_COMMON_VECTOR_EXP_H_
