// CUDA random fills. Design: counter-based, so no state and no
// synchronisation: thread j computes two consecutive Philox blocks (eight
// stream elements: Philox's 10 rounds are ~20 multiplies per four values, the
// Box-Muller polynomials ~60 float ops per pair) and writes them with 16-byte
// stores (two for float32, one for float16/bfloat16, four for float64) when
// its eight outputs are in range and 16-byte aligned; the ragged ends (and an
// offset that is not a multiple of 4 against an aligned buffer) take per-
// element stores. A grid-stride loop caps the grid at 2^20 blocks. The
// arithmetic is random_math.h, shared with the CPU path: same bits.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/common/cuda_utils.cuh"
#include "kernels/random/philox.h"
#include "kernels/random/random.h"
#include "kernels/random/random_math.h"

namespace colossal::kernels::random {
namespace {

using cuda::from_math;

constexpr int kThreads = 256;
constexpr int64_t kMaxGrid = int64_t{1} << 20;

template <typename T>
using Math = typename cuda::MathType<T>::type;

// Group j covers stream blocks first_block + 2j and + 2j + 1, i.e. outputs
// o = 8j + i - lead for i in [0, 8) (lead = offset % 4 elements precede the
// offset in the first block).
template <typename T, typename Dist>
__global__ void fill_kernel(T* out, uint64_t seed, uint64_t first_block, int64_t lead, int64_t n,
                            Dist dist) {
  const int64_t groups = (lead + n + 7) / 8;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < groups; j += stride) {
    Math<T> m[8];
    dist(philox_stream_block(seed, first_block + 2 * static_cast<uint64_t>(j)), m);
    dist(philox_stream_block(seed, first_block + 2 * static_cast<uint64_t>(j) + 1), m + 4);
    const int64_t o0 = 8 * j - lead;
    if (o0 >= 0 && o0 + 8 <= n && reinterpret_cast<uintptr_t>(out + o0) % 16 == 0) {
      constexpr int kStores = 8 * sizeof(T) / 16;
      union {
        T t[8];
        uint4 v[kStores];
      } pack;
#pragma unroll
      for (int i = 0; i < 8; ++i) pack.t[i] = from_math<T>(m[i]);
#pragma unroll
      for (int k = 0; k < kStores; ++k) reinterpret_cast<uint4*>(out + o0)[k] = pack.v[k];
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        if (o0 + i >= 0 && o0 + i < n) out[o0 + i] = from_math<T>(m[i]);
      }
    }
  }
}

template <typename T, typename Dist>
KernelStatus launch(void* out, uint64_t seed, uint64_t offset, int64_t n, const Dist& dist,
                    cudaStream_t stream) {
  const int64_t lead = static_cast<int64_t>(offset & 3);
  const int64_t groups = (lead + n + 7) / 8;
  const int64_t blocks = std::min<int64_t>((groups + kThreads - 1) / kThreads, kMaxGrid);
  fill_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(static_cast<T*>(out), seed,
                                                                      offset >> 2, lead, n, dist);
  return cuda::last_launch_status();
}

template <typename F>
KernelStatus dispatch_random(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kF32: return f(float{});
    case DType::kF16: return f(__half{});
    case DType::kBF16: return f(__nv_bfloat16{});
    case DType::kF64: return f(double{});
    default: return KernelStatus::unsupported("random fill: unsupported dtype");
  }
}

}  // namespace

KernelStatus fill_uniform_cuda(void* out, double lo, double hi, uint64_t seed, uint64_t offset,
                               int64_t n, DType dtype, cudaStream_t stream) {
  KernelStatus s = internal::check_fill("fill_uniform_cuda: n < 0 or null out", out, n, dtype);
  if (s.ok()) s = internal::check_uniform(lo, hi);
  if (!s.ok() || n == 0) return s;
  return dispatch_random(dtype, [&](auto tag) {
    using T = decltype(tag);
    using M = Math<T>;
    // Parameters rounded on the host exactly as the CPU path rounds them.
    const internal::Uniform<M> dist{static_cast<M>(lo), static_cast<M>(hi - lo)};
    return launch<T>(out, seed, offset, n, dist, stream);
  });
}

KernelStatus fill_normal_cuda(void* out, double mean, double std, uint64_t seed, uint64_t offset,
                              int64_t n, DType dtype, cudaStream_t stream) {
  KernelStatus s = internal::check_fill("fill_normal_cuda: n < 0 or null out", out, n, dtype);
  if (s.ok()) s = internal::check_normal(mean, std);
  if (!s.ok() || n == 0) return s;
  return dispatch_random(dtype, [&](auto tag) {
    using T = decltype(tag);
    using M = Math<T>;
    const internal::Normal<M> dist{static_cast<M>(mean), static_cast<M>(std)};
    return launch<T>(out, seed, offset, n, dist, stream);
  });
}

}  // namespace colossal::kernels::random
