// The CPU multi-tensor kernels' inner loops: a range's sum of squares (l2_norm)
// and acc += part with the results' sum of squares (accumulate), in scalar,
// AVX2 and AVX-512 versions that give the same bits.
//
// Order of the sum: element k of a range adds its square, in double, to lane
// k % 16 of 16 double accumulators, and the lanes are summed 0 to 15 at the end.
// Every version keeps that order, and the square of a float32 value is exact
// in double, so only the lane additions round, in the same order everywhere.
// (16-bit and float32 elements; float64 ranges always take the scalar loop.)
#ifndef COLOSSAL_KERNELS_MULTI_TENSOR_LANE_SUMS_H_
#define COLOSSAL_KERNELS_MULTI_TENSOR_LANE_SUMS_H_

#include <cstdint>

#include "kernels/common/cpu_isa.h"

namespace colossal::kernels::multi_tensor::internal {

// Sum of squares of x[0..n).
template <typename T>
using SquaresFn = double (*)(const T* x, int64_t n);
// acc[k] = acc[k] + part[k] for k in [0, n) (float math, double for float64,
// one rounding to T), returning the sum of squares of the results.
template <typename T>
using AccumulateFn = double (*)(T* acc, const T* part, int64_t n);

// The version for `isa` (a concrete one: kScalar, kAvx2 or kAvx512), for T in
// float, Half, BFloat16 and double.
template <typename T>
SquaresFn<T> squares_for(CpuIsa isa);
template <typename T>
AccumulateFn<T> accumulate_for(CpuIsa isa);

}  // namespace colossal::kernels::multi_tensor::internal

#endif  // COLOSSAL_KERNELS_MULTI_TENSOR_LANE_SUMS_H_
