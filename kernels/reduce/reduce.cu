// CUDA elementwise reduce: one pass, 16-byte vector loads when both buffers are
// 16-byte aligned; a grid-stride scalar kernel for the unaligned case and the tail.
#include <algorithm>
#include <cstdint>

#include "kernels/common/cuda_utils.cuh"
#include "kernels/reduce/reduce.h"
#include "kernels/reduce/reduce_ops.h"

namespace colossal::kernels::reduce {
namespace {

using cuda::from_math;
using cuda::to_math;

constexpr int kThreads = 256;

template <typename T, typename Op>
__device__ __forceinline__ void reduce_one(T* dst, const T* src, int64_t i, Op op) {
  dst[i] = from_math<T>(op(to_math(dst[i]), to_math(src[i])));
}

// Each thread handles kUnroll 16-byte vectors, strided by the block size so
// every load instruction is coalesced; all loads are issued before any math so
// kUnroll * 2 memory requests are in flight per thread.
constexpr int kUnroll = 4;

template <typename T, typename Op>
__global__ void reduce_vector_kernel(T* __restrict__ dst, const T* __restrict__ src, int64_t n_vec,
                                     Op op) {
  constexpr int kVec = 16 / sizeof(T);
  uint4* d = reinterpret_cast<uint4*>(dst);
  const uint4* s = reinterpret_cast<const uint4*>(src);
  const int64_t base = static_cast<int64_t>(blockIdx.x) * blockDim.x * kUnroll + threadIdx.x;
  uint4 a[kUnroll], b[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int64_t v = base + static_cast<int64_t>(u) * blockDim.x;
    if (v < n_vec) {
      a[u] = d[v];
      b[u] = s[v];
    }
  }
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int64_t v = base + static_cast<int64_t>(u) * blockDim.x;
    if (v < n_vec) {
      T* av = reinterpret_cast<T*>(&a[u]);
      const T* bv = reinterpret_cast<const T*>(&b[u]);
#pragma unroll
      for (int k = 0; k < kVec; ++k) av[k] = from_math<T>(op(to_math(av[k]), to_math(bv[k])));
      d[v] = a[u];
    }
  }
}

template <typename T, typename Op>
__global__ void reduce_scalar_kernel(T* __restrict__ dst, const T* __restrict__ src, int64_t n,
                                     Op op) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += stride) {
    reduce_one(dst, src, i, op);
  }
}

int grid_for(int64_t work) {
  const int64_t wanted = (work + kThreads - 1) / kThreads;
  const int sms = std::max(cuda::multiprocessor_count(), 1);
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(wanted, int64_t{sms} * 8)));
}

template <typename T, typename Op>
KernelStatus launch(T* dst, const T* src, int64_t n, Op op, cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  const bool aligned = (reinterpret_cast<uintptr_t>(dst) % 16 == 0) &&
                       (reinterpret_cast<uintptr_t>(src) % 16 == 0);
  int64_t done = 0;
  if (aligned && kVec > 1 && n >= kVec) {
    const int64_t n_vec = n / kVec;
    const int64_t blocks = (n_vec + int64_t{kThreads} * kUnroll - 1) / (int64_t{kThreads} * kUnroll);
    if (blocks > 0x7fffffff) return KernelStatus::invalid_argument("reduce_into_cuda: n too large");
    reduce_vector_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(dst, src, n_vec, op);
    done = n_vec * kVec;
  }
  if (done < n) {
    const int64_t rest = n - done;
    reduce_scalar_kernel<<<grid_for(rest), kThreads, 0, stream>>>(dst + done, src + done, rest, op);
  }
  return cuda::last_launch_status();
}

template <typename T>
KernelStatus reduce_typed(T* dst, const T* src, int64_t n, ReduceOp op, cudaStream_t stream) {
  switch (op) {
    case ReduceOp::kSum: return launch(dst, src, n, internal::SumOp{}, stream);
    case ReduceOp::kProd: return launch(dst, src, n, internal::ProdOp{}, stream);
    case ReduceOp::kMax: return launch(dst, src, n, internal::MaxOp{}, stream);
    case ReduceOp::kMin: return launch(dst, src, n, internal::MinOp{}, stream);
  }
  return KernelStatus::invalid_argument("unknown ReduceOp");
}

}  // namespace

KernelStatus reduce_into_cuda(void* dst, const void* src, int64_t n, DType dtype, ReduceOp op,
                              cudaStream_t stream) {
  if (n < 0) return KernelStatus::invalid_argument("reduce_into_cuda: n < 0");
  if (n == 0) return KernelStatus();
  if (dst == nullptr || src == nullptr) {
    return KernelStatus::invalid_argument("reduce_into_cuda: null buffer with n > 0");
  }
  return cuda::dispatch_all_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    return reduce_typed(static_cast<T*>(dst), static_cast<const T*>(src), n, op, stream);
  });
}

}  // namespace colossal::kernels::reduce
