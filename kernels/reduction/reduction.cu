// CUDA row reductions. Design (memory-bound, one pass over the input):
//   * cols <= 32: a thread per row (a warp's loads still cover contiguous rows);
//   * cols <= 1024: a warp per row, 16-byte loads, shuffle reduction, 8 rows
//     per 256-thread block;
//   * longer rows: a 256-thread block per row, or, when rows are too few to
//     fill the GPU (fewer than kTargetBlocks), `splits` blocks per row, each
//     reducing a 64-element-aligned chunk into a float32/float64 partial in
//     `scratch`; a second kernel (a warp per row) combines a row's partials in
//     index order. [1, 256M] becomes 1024 blocks of 256K elements each, one
//     wave on an H100, no atomics.
// Every thread reads its share with 16-byte vector loads (a scalar head up to
// the first 16-byte boundary of the segment and a scalar tail), kUnroll
// vectors in flight, into kVec independent accumulators (one per vector lane);
// lanes, then warps (shuffle xor tree), then the block's warps are combined in
// a fixed order. The split depends only on the shape (reduction_plan.h), so a
// result is reproducible bit for bit on any GPU for data at the same 16-byte
// alignment.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/common/cuda_utils.cuh"
#include "kernels/reduction/reduction.h"
#include "kernels/reduction/reduction_plan.h"

namespace colossal::kernels::reduction {
namespace {

using cuda::from_math;
using cuda::to_math;
using internal::kBlockThreads;
using internal::MaxOp;
using internal::Path;
using internal::Plan;
using internal::SumOp;

constexpr int kUnroll = 4;
constexpr int kWarpsPerBlock = kBlockThreads / 32;
constexpr int64_t kMaxGrid = int64_t{1} << 20;  // kernels loop over the rest

template <typename T>
using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <typename A, typename Op>
__device__ __forceinline__ A warp_reduce(A v, Op op) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Reduces p[0, len) over `nthreads` cooperating threads; returns this
// thread's share (combine the shares with warp_reduce / block_reduce).
template <typename T, typename Op>
__device__ __forceinline__ Acc<T> thread_share(const T* p, int64_t len, int tid, int nthreads, Op op) {
  using A = Acc<T>;
  constexpr int kVec = 16 / sizeof(T);
  A acc[kVec];
#pragma unroll
  for (int k = 0; k < kVec; ++k) acc[k] = Op::template identity<A>();
  // Scalar head up to the first 16-byte boundary (buffers are element-aligned).
  const int64_t misalign = static_cast<int64_t>(reinterpret_cast<uintptr_t>(p) % 16) / sizeof(T);
  const int64_t head = misalign == 0 ? 0 : std::min<int64_t>(kVec - misalign, len);
  if (tid < head) acc[0] = op(acc[0], static_cast<A>(to_math(p[tid])));
  const uint4* v = reinterpret_cast<const uint4*>(p + head);
  const int64_t n_vec = (len - head) / kVec;
  for (int64_t i = tid; i < n_vec; i += static_cast<int64_t>(nthreads) * kUnroll) {
    uint4 r[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t idx = i + static_cast<int64_t>(u) * nthreads;
      if (idx < n_vec) r[u] = v[idx];
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t idx = i + static_cast<int64_t>(u) * nthreads;
      if (idx < n_vec) {
        const T* e = reinterpret_cast<const T*>(&r[u]);
#pragma unroll
        for (int k = 0; k < kVec; ++k) acc[k] = op(acc[k], static_cast<A>(to_math(e[k])));
      }
    }
  }
  // Scalar tail: fewer than kVec elements, fewer than nthreads.
  const int64_t tail = head + n_vec * kVec + tid;
  if (tail < len) acc[0] = op(acc[0], static_cast<A>(to_math(p[tail])));
  // Combine the lanes pairwise, in a fixed order.
#pragma unroll
  for (int width = kVec / 2; width > 0; width /= 2) {
#pragma unroll
    for (int k = 0; k < width; ++k) acc[k] = op(acc[k], acc[k + width]);
  }
  return acc[0];
}

// Block-wide combine of every thread's v; the result is valid in thread 0.
template <typename A, typename Op>
__device__ __forceinline__ A block_reduce(A v, Op op) {
  __shared__ A warp_values[kWarpsPerBlock];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_reduce(v, op);
  if (lane == 0) warp_values[warp] = v;
  __syncthreads();
  A r = Op::template identity<A>();
  if (warp == 0) {
    if (lane < kWarpsPerBlock) r = warp_values[lane];
    r = warp_reduce(r, op);
  }
  __syncthreads();  // warp_values may be reused by the next segment
  return r;
}

// Final value of a row: mean, canonical NaN, rounded to Out.
template <typename Out, typename A>
__device__ __forceinline__ Out store(A total, int64_t cols, bool mean) {
  const A v = internal::finish(total, cols, mean);
  if constexpr (std::is_same_v<Out, double>) {
    return v != v ? __longlong_as_double(0x7fffffffffffffffll) : static_cast<double>(v);
  } else {
    const float f = static_cast<float>(v);
    const float c = f != f ? __uint_as_float(0x7fffffffu) : f;
    if constexpr (std::is_same_v<Out, float>) {
      return c;
    } else {
      return from_math<Out>(c);
    }
  }
}

template <typename Out, typename T, typename Op>
__global__ void thread_per_row_kernel(Out* out, const T* in, int64_t rows, int64_t cols, bool mean,
                                      Op op) {
  using A = Acc<T>;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; r < rows; r += stride) {
    const T* row = in + r * cols;
    A acc = Op::template identity<A>();
    for (int64_t c = 0; c < cols; ++c) acc = op(acc, static_cast<A>(to_math(row[c])));
    out[r] = store<Out>(acc, cols, mean);
  }
}

template <typename Out, typename T, typename Op>
__global__ void warp_per_row_kernel(Out* out, const T* in, int64_t rows, int64_t cols, bool mean,
                                    Op op) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  for (int64_t r = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + threadIdx.x / 32; r < rows;
       r += warps) {
    const auto v = warp_reduce(thread_share(in + r * cols, cols, lane, 32, op), op);
    if (lane == 0) out[r] = store<Out>(v, cols, mean);
  }
}

// Segment s = (row s / splits, chunk s % splits). With splits == 1 the block
// writes the row's final value to out; otherwise its partial to partials[s].
template <typename Out, typename T, typename Op>
__global__ void block_per_segment_kernel(Out* out, Acc<T>* partials, const T* in, int64_t rows,
                                         int64_t cols, int64_t splits, int64_t chunk, bool mean,
                                         Op op) {
  const int64_t segments = rows * splits;
  for (int64_t s = blockIdx.x; s < segments; s += gridDim.x) {
    const int64_t r = s / splits, c0 = (s % splits) * chunk;
    const int64_t len = std::min(chunk, cols - c0);
    const auto v = block_reduce(thread_share(in + r * cols + c0, len, threadIdx.x, kBlockThreads, op), op);
    if (threadIdx.x == 0) {
      if (partials != nullptr) {
        partials[s] = v;
      } else {
        out[r] = store<Out>(v, cols, mean);
      }
    }
  }
}

// A warp per row combines the row's `splits` partials (lane j takes j, j+32, ...).
template <typename Out, typename A, typename Op>
__global__ void combine_partials_kernel(Out* out, const A* partials, int64_t rows, int64_t splits,
                                        int64_t cols, bool mean, Op op) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  for (int64_t r = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + threadIdx.x / 32; r < rows;
       r += warps) {
    A acc = Op::template identity<A>();
    for (int64_t j = lane; j < splits; j += 32) acc = op(acc, partials[r * splits + j]);
    acc = warp_reduce(acc, op);
    if (lane == 0) out[r] = store<Out>(acc, cols, mean);
  }
}

unsigned grid_of(int64_t blocks) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(blocks, kMaxGrid)));
}

template <typename Out, typename T, typename Op>
KernelStatus launch(Out* out, const T* in, void* scratch, int64_t scratch_bytes, int64_t rows,
                    int64_t cols, bool mean, Op op, cudaStream_t stream) {
  using A = Acc<T>;
  const Plan plan = internal::make_plan(rows, cols);
  switch (plan.path) {
    case Path::kThreadPerRow:
      thread_per_row_kernel<<<grid_of((rows + kBlockThreads - 1) / kBlockThreads), kBlockThreads, 0,
                              stream>>>(out, in, rows, cols, mean, op);
      return cuda::last_launch_status();
    case Path::kWarpPerRow:
      warp_per_row_kernel<<<grid_of((rows + kWarpsPerBlock - 1) / kWarpsPerBlock), kBlockThreads, 0,
                            stream>>>(out, in, rows, cols, mean, op);
      return cuda::last_launch_status();
    case Path::kBlockPerRow:
      break;
  }
  A* partials = nullptr;
  if (plan.splits > 1) {
    if (scratch == nullptr || scratch_bytes < rows * plan.splits * static_cast<int64_t>(sizeof(A))) {
      return KernelStatus::invalid_argument(
          "reduce_rows_cuda: scratch smaller than reduce_rows_scratch_bytes()");
    }
    if (reinterpret_cast<uintptr_t>(scratch) % sizeof(A) != 0) {
      return KernelStatus::invalid_argument("reduce_rows_cuda: scratch not 8-byte aligned");
    }
    partials = static_cast<A*>(scratch);
  }
  block_per_segment_kernel<<<grid_of(rows * plan.splits), kBlockThreads, 0, stream>>>(
      out, partials, in, rows, cols, plan.splits, plan.chunk, mean, op);
  if (plan.splits > 1) {
    const KernelStatus s = cuda::last_launch_status();
    if (!s.ok()) return s;
    combine_partials_kernel<<<grid_of((rows + kWarpsPerBlock - 1) / kWarpsPerBlock), kBlockThreads, 0,
                              stream>>>(out, partials, rows, plan.splits, cols, mean, op);
  }
  return cuda::last_launch_status();
}

template <typename F>
KernelStatus dispatch_input(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kF32: return f(float{});
    case DType::kF16: return f(__half{});
    case DType::kBF16: return f(__nv_bfloat16{});
    case DType::kF64: return f(double{});
    default:
      return KernelStatus::unsupported(
          "reduce_rows: input must be float32, float16, bfloat16 or float64");
  }
}

}  // namespace

KernelStatus reduce_rows_cuda(void* out, const void* in, void* scratch, int64_t scratch_bytes,
                              int64_t rows, int64_t cols, DType out_dtype, DType in_dtype,
                              RowReduceOp op, cudaStream_t stream) {
  if (rows < 0 || cols < 0) return KernelStatus::invalid_argument("reduce_rows_cuda: negative size");
  if (op != RowReduceOp::kSum && op != RowReduceOp::kMean && op != RowReduceOp::kMax) {
    return KernelStatus::invalid_argument("reduce_rows_cuda: unknown RowReduceOp");
  }
  if (rows == 0) return KernelStatus();
  if (out == nullptr || (cols > 0 && in == nullptr)) {
    return KernelStatus::invalid_argument("reduce_rows_cuda: null buffer with rows * cols > 0");
  }
  if (cols == 0 && op == RowReduceOp::kMax) {
    return KernelStatus::invalid_argument("reduce_rows_cuda: max of an empty row");
  }
  const bool mean = op == RowReduceOp::kMean;
  return dispatch_input(in_dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(in);
    auto run = [&](auto* o) {
      if (op == RowReduceOp::kMax) {
        return launch(o, x, scratch, scratch_bytes, rows, cols, false, MaxOp{}, stream);
      }
      return launch(o, x, scratch, scratch_bytes, rows, cols, mean, SumOp{}, stream);
    };
    if (out_dtype == DType::kF32) return run(static_cast<float*>(out));
    if (out_dtype == in_dtype) return run(static_cast<T*>(out));
    return KernelStatus::unsupported("reduce_rows_cuda: out_dtype must be float32 or in_dtype");
  });
}

}  // namespace colossal::kernels::reduction
