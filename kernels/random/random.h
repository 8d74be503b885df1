// colossal::kernels::random — reproducible random fills (uniform, normal) from
// a counter-based Philox4x32-10 stream, bit-identical on CPU and CUDA.
//
// A fill writes n consecutive elements of the stream selected by `seed`,
// starting at stream element `offset` (philox.h defines the stream: element
// g is word g % 4 of Philox block g / 4). The offset unit is one element, so
// filling [0, n) at once equals filling [0, k) at `offset` and [k, n) at
// `offset + k`, for any k; a caller keeping a generator state advances its
// offset by n after each fill (core's Context::next_offset does). Different seeds give
// independent streams; uniform and normal fills at the same (seed, offset)
// use the same random words.
//
// Values (dtype float32, float16, bfloat16 or float64):
//   * uniform: u = (word >> 8) * 2^-24 in [0, 1) (24 random bits), then
//     lo + (hi - lo) * u in float32 (float64 for float64 output; hi - lo is
//     rounded once), rounded to nearest even to the dtype. Values lie in
//     [lo, hi]; hi itself only appears through rounding (e.g. in bfloat16).
//   * normal (Box-Muller): stream elements 4b + 2p and 4b + 2p + 1 share the
//     words (w[2p], w[2p+1]) of block b: z = r cos(theta) for the even
//     element and r sin(theta) for the odd one, r = sqrt(-2 ln u1), u1 =
//     ((w[2p] >> 8) + 1) * 2^-24 in (0, 1], theta = 2 pi (w[2p+1] >> 8) * 2^-24;
//     then mean + std * z (float32 math; float64 output computes mean + std * z
//     in float64 from the float32 z). |z| <= 5.77.
// Bit-identical on CPU and CUDA, normals included: log, sin and cos are
// computed from IEEE +, -, *, / and sqrt alone, each correctly rounded on both
// (random_math.h); the tests compare with memcmp.
//
//   using namespace colossal::kernels;
//   KernelStatus s = random::fill_normal_cpu(w, 0.0, 0.02, /*seed=*/1234, /*offset=*/0, n, DType::kF32);
//   #if COLOSSAL_WITH_CUDA
//   s = random::fill_uniform_cuda(d_w, -0.1, 0.1, 1234, offset, n, DType::kBF16, stream);
//   #endif
#ifndef COLOSSAL_KERNELS_RANDOM_RANDOM_H_
#define COLOSSAL_KERNELS_RANDOM_RANDOM_H_

#include <cstdint>

#include "kernels/common/dtype.h"
#include "kernels/common/status.h"
#include "kernels/random/philox.h"

#if COLOSSAL_WITH_CUDA
typedef struct CUstream_st* cudaStream_t;
#endif

namespace colossal::kernels::random {

// out[i] = uniform value for stream element offset + i, 0 <= i < n. lo and hi
// must be finite with lo <= hi. out is overwritten.
KernelStatus fill_uniform_cpu(void* out, double lo, double hi, uint64_t seed, uint64_t offset,
                              int64_t n, DType dtype);

// out[i] = normal value (mean, std) for stream element offset + i. mean and
// std must be finite, std >= 0. out is overwritten.
KernelStatus fill_normal_cpu(void* out, double mean, double std, uint64_t seed, uint64_t offset,
                             int64_t n, DType dtype);

#if COLOSSAL_WITH_CUDA
// The same on a device buffer (needs only element alignment), enqueued on
// `stream`, not synchronised.
KernelStatus fill_uniform_cuda(void* out, double lo, double hi, uint64_t seed, uint64_t offset,
                               int64_t n, DType dtype, cudaStream_t stream);

KernelStatus fill_normal_cuda(void* out, double mean, double std, uint64_t seed, uint64_t offset,
                              int64_t n, DType dtype, cudaStream_t stream);
#endif

}  // namespace colossal::kernels::random

#endif  // COLOSSAL_KERNELS_RANDOM_RANDOM_H_
