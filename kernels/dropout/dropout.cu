// CUDA dropout: a grid-stride loop over groups of 8 stream elements (two
// Philox blocks) per thread, as kernels/random's fills; the product is one
// IEEE-rounded multiplication (__fmul_rn / __dmul_rn, never contracted), so
// every output equals the CPU's bit for bit. Memory-bound: one read and one
// write per element, plus 10 Philox rounds per 4 elements.
//
// The common case (offset a multiple of 4, buffers 16-byte aligned: every
// training call) reads and writes each group as whole 16-byte vectors, so a
// warp's accesses are contiguous (element-wise loads of 8 consecutive
// elements per thread reached ~30% of the bandwidth); the last < 8 elements,
// and any other call, take the element-wise kernel. A call split at element
// k gives the same bits, so the split changes nothing but the time.
#include <algorithm>
#include <cstdint>

#include "kernels/common/cuda_utils.cuh"
#include "kernels/dropout/dropout.h"
#include "kernels/dropout/dropout_internal.h"
#include "kernels/random/philox.h"

namespace colossal::kernels::dropout {
namespace {

using cuda::from_math;
using cuda::to_math;
using random::philox_stream_block;
using random::PhiloxBlock;

constexpr int kThreads = 256;
constexpr int64_t kMaxGrid = int64_t{1} << 20;

template <typename T>
using Math = typename cuda::MathType<T>::type;

__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }

// Group j covers stream blocks first_block + 2j, + 2j + 1: outputs o = 8j + i - lead.
template <typename T>
__global__ void dropout_kernel(T* out, const T* in, Math<T> scale, uint32_t threshold,
                               uint64_t seed, uint64_t first_block, int64_t lead, int64_t n) {
  const int64_t groups = (lead + n + 7) / 8;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < groups;
       j += stride) {
    const PhiloxBlock a = philox_stream_block(seed, first_block + 2 * static_cast<uint64_t>(j));
    const PhiloxBlock b = philox_stream_block(seed, first_block + 2 * static_cast<uint64_t>(j) + 1);
    const uint32_t w[8] = {a.w[0], a.w[1], a.w[2], a.w[3], b.w[0], b.w[1], b.w[2], b.w[3]};
    const int64_t o0 = 8 * j - lead;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int64_t o = o0 + i;
      if (o >= 0 && o < n) {
        const Math<T> v = keeps(w[i], threshold) ? mul_rn(to_math(in[o]), scale) : Math<T>(0);
        out[o] = from_math<T>(v);
      }
    }
  }
}

// Eight elements of T as 16-byte vectors (one for 16-bit types, two for
// float32, four for float64).
template <typename T>
struct alignas(16) Group8 {
  T v[8];
};

// Whole groups only: group j is elements [8j, 8j + 8) of in/out and stream
// blocks first_block + 2j, + 2j + 1 (the caller's offset is a multiple of 4).
template <typename T>
__global__ void dropout_vector_kernel(T* out, const T* in, Math<T> scale, uint32_t threshold,
                                      uint64_t seed, uint64_t first_block, int64_t groups) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < groups;
       j += stride) {
    const Group8<T> x = reinterpret_cast<const Group8<T>*>(in)[j];
    const PhiloxBlock a = philox_stream_block(seed, first_block + 2 * static_cast<uint64_t>(j));
    const PhiloxBlock b = philox_stream_block(seed, first_block + 2 * static_cast<uint64_t>(j) + 1);
    const uint32_t w[8] = {a.w[0], a.w[1], a.w[2], a.w[3], b.w[0], b.w[1], b.w[2], b.w[3]};
    Group8<T> y;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const Math<T> v = keeps(w[i], threshold) ? mul_rn(to_math(x.v[i]), scale) : Math<T>(0);
      y.v[i] = from_math<T>(v);
    }
    reinterpret_cast<Group8<T>*>(out)[j] = y;
  }
}

__global__ void mask_kernel(uint8_t* mask, uint32_t threshold, uint64_t seed, uint64_t first_block,
                            int64_t lead, int64_t n) {
  const int64_t groups = (lead + n + 3) / 4;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < groups;
       j += stride) {
    const PhiloxBlock a = philox_stream_block(seed, first_block + static_cast<uint64_t>(j));
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t o = 4 * j + i - lead;
      if (o >= 0 && o < n) mask[o] = keeps(a.w[i], threshold) ? 1 : 0;
    }
  }
}

using internal::check;

int64_t grid_for(int64_t groups) {
  return std::max<int64_t>(1, std::min<int64_t>((groups + kThreads - 1) / kThreads, kMaxGrid));
}

}  // namespace

KernelStatus dropout_cuda(void* out, const void* in, double p, uint64_t seed, uint64_t offset,
                          int64_t n, DType dtype, cudaStream_t stream) {
  KernelStatus s = check("dropout_cuda: n < 0 or null buffer", out, in, p, n);
  if (!s.ok() || n == 0) return s;
  const uint32_t threshold = drop_threshold(p);
  const double scale = 1.0 / (1.0 - p);
  auto run = [&](auto tag) {
    using T = decltype(tag);
    // scale rounded on the host exactly as the CPU path rounds it.
    const Math<T> sc = static_cast<Math<T>>(scale);
    T* y = static_cast<T*>(out);
    const T* x = static_cast<const T*>(in);
    uint64_t at = offset;
    int64_t left = n;
    const bool aligned = reinterpret_cast<uintptr_t>(y) % 16 == 0 &&
                         reinterpret_cast<uintptr_t>(x) % 16 == 0;
    if (aligned && offset % 4 == 0 && n >= 8) {
      const int64_t groups = n / 8;
      dropout_vector_kernel<T><<<static_cast<unsigned>(grid_for(groups)), kThreads, 0, stream>>>(
          y, x, sc, threshold, seed, offset >> 2, groups);
      KernelStatus launched = cuda::last_launch_status();
      if (!launched.ok() || groups * 8 == n) return launched;
      at += static_cast<uint64_t>(groups) * 8;
      left -= groups * 8;
      y += groups * 8;
      x += groups * 8;
    }
    const int64_t lead = static_cast<int64_t>(at & 3);
    dropout_kernel<T><<<static_cast<unsigned>(grid_for((lead + left + 7) / 8)), kThreads, 0,
                        stream>>>(y, x, sc, threshold, seed, at >> 2, lead, left);
    return cuda::last_launch_status();
  };
  switch (dtype) {
    case DType::kF32: return run(float{});
    case DType::kF16: return run(__half{});
    case DType::kBF16: return run(__nv_bfloat16{});
    case DType::kF64: return run(double{});
    default: return KernelStatus::unsupported("dropout_cuda: unsupported dtype");
  }
}

KernelStatus dropout_mask_cuda(uint8_t* mask, double p, uint64_t seed, uint64_t offset, int64_t n,
                               cudaStream_t stream) {
  KernelStatus s = check("dropout_mask_cuda: n < 0 or null mask", mask, mask, p, n);
  if (!s.ok() || n == 0) return s;
  const int64_t lead = static_cast<int64_t>(offset & 3);
  const int64_t blocks = grid_for((lead + n + 3) / 4);
  mask_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      mask, drop_threshold(p), seed, offset >> 2, lead, n);
  return cuda::last_launch_status();
}

}  // namespace colossal::kernels::dropout
