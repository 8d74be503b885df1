// colossal::kernels::dropout — inverted dropout whose keep/drop decisions come
// from the Philox stream of kernels/random (philox.h), bit-identical on CPU and
// CUDA for the same (seed, offset).
//
// Element i of a call with (seed, offset) is decided by stream element
// g = offset + i (word g % 4 of philox_stream_block(seed, g / 4), the same
// element numbering as random::fill_uniform): with r = word >> 8 (24 random
// bits, the bits fill_uniform turns into u = r * 2^-24) and the integer
// threshold t = ceil(p * 2^24),
//
//   dropped  <=>  r < t        (so P(dropped) = t / 2^24, within 2^-24 of p)
//   out[i]   =  dropped ? 0 : in[i] * scale,     scale = 1 / (1 - p)
//
// `scale` is rounded once on the host to the math type (float for
// float32/float16/bfloat16, double for float64), the product is one IEEE
// multiplication, rounded once to the dtype: the same bits on both devices. A
// dropped element is written as +0 whatever in[i] is (NaN and inf included).
//
// The same call is the forward (in = x) and the backward (in = dy: dx = dy *
// mask * scale): a module regenerates the mask from the saved (seed, offset)
// instead of storing it. Splitting a call at element k (offset + k for the
// rest) gives the same result, as for the random fills. p must be in [0, 1);
// p = 0 keeps every element (out = in * 1 exactly). out may equal in.
//
//   using namespace colossal::kernels;
//   KernelStatus s = dropout::dropout_cpu(y, x, 0.1, /*seed=*/1234, /*offset=*/0, n, DType::kF32);
//   s = dropout::dropout_cpu(dx, dy, 0.1, 1234, 0, n, DType::kF32);      // backward: same mask
//   #if COLOSSAL_WITH_CUDA
//   s = dropout::dropout_cuda(d_y, d_x, 0.1, 1234, 0, n, DType::kBF16, stream);
//   #endif
#ifndef COLOSSAL_KERNELS_DROPOUT_DROPOUT_H_
#define COLOSSAL_KERNELS_DROPOUT_DROPOUT_H_

#include <cmath>
#include <cstdint>

#include "kernels/common/dtype.h"
#include "kernels/common/host_device.h"
#include "kernels/common/status.h"
#include "kernels/random/philox.h"

#if COLOSSAL_WITH_CUDA
typedef struct CUstream_st* cudaStream_t;
#endif

namespace colossal::kernels::dropout {

// ceil(p * 2^24) for p in [0, 1) (p * 2^24 is exact in double); a word is
// dropped when (word >> 8) < threshold. 0 for p <= 0 (or NaN), 2^24 for p >= 1.
inline uint32_t drop_threshold(double p) {
  if (!(p > 0.0)) return 0;
  if (p >= 1.0) return 1u << 24;
  return static_cast<uint32_t>(std::ceil(p * 16777216.0));
}

// Whether stream word `word` keeps its element under `threshold`.
COLOSSAL_HOST_DEVICE bool keeps(uint32_t word, uint32_t threshold) {
  return (word >> 8) >= threshold;
}

// ---- CPU: reference and CPU backend. dtype float32, float16, bfloat16, float64. ----
// out[i] = in[i] * scale or 0, as above, 0 <= i < n. out may equal in.
KernelStatus dropout_cpu(void* out, const void* in, double p, uint64_t seed, uint64_t offset,
                         int64_t n, DType dtype);
// mask[i] = 1 when element offset + i is kept, 0 when dropped (tests, debugging).
KernelStatus dropout_mask_cpu(uint8_t* mask, double p, uint64_t seed, uint64_t offset, int64_t n);

#if COLOSSAL_WITH_CUDA
// ---- CUDA: device pointers, dtype float32/float16/bfloat16/float64; enqueued on
// `stream`, not synchronised. Returns the launch status.
KernelStatus dropout_cuda(void* out, const void* in, double p, uint64_t seed, uint64_t offset,
                          int64_t n, DType dtype, cudaStream_t stream);
KernelStatus dropout_mask_cuda(uint8_t* mask, double p, uint64_t seed, uint64_t offset, int64_t n,
                               cudaStream_t stream);
#endif

}  // namespace colossal::kernels::dropout

#endif  // COLOSSAL_KERNELS_DROPOUT_DROPOUT_H_
