// CUDA elementwise ops. Design: memory-bound, one pass. When every buffer is
// 16-byte aligned, a thread moves whole 16-byte vectors ("items" of
// 16 / min(element sizes) elements; a cast item is one load and one or more
// stores, or the reverse), kUnroll items per thread strided by the block size
// so each load instruction is coalesced and all loads are issued before any
// math (kUnroll * inputs requests in flight per thread). One thread per item
// set, no grid-stride loop: 64M float32 adds are 16K blocks of 256 threads,
// plenty for 132 SMs. The n % vector tail, and buffers that are not 16-byte
// aligned, go through a grid-stride scalar kernel. Element math is
// elementwise_ops.h, shared with the CPU path, so results are bit-identical.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/common/cuda_utils.cuh"
#include "kernels/elementwise/elementwise.h"
#include "kernels/elementwise/elementwise_host.h"
#include "kernels/elementwise/elementwise_ops.h"

namespace colossal::kernels::elementwise {
namespace {

using cuda::from_math;
using cuda::to_math;
using internal::check_buffers;

constexpr int kThreads = 256;

template <typename T>
using Math = typename cuda::MathType<T>::type;

template <typename T>
constexpr bool kIsHalfDevice = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;

// Shape of one vector item for an op reading In and writing Out.
template <typename Out, typename In>
struct Geometry {
  static constexpr int kMinSize = sizeof(In) < sizeof(Out) ? sizeof(In) : sizeof(Out);
  static constexpr int kMaxSize = sizeof(In) < sizeof(Out) ? sizeof(Out) : sizeof(In);
  static constexpr int kVec = 16 / kMinSize;  // elements per item
  static constexpr int kInVecs = kVec * static_cast<int>(sizeof(In)) / 16;
  static constexpr int kOutVecs = kVec * static_cast<int>(sizeof(Out)) / 16;
  // About 64 bytes of the larger side per thread in flight.
  static constexpr int kUnroll = 64 / (kVec * kMaxSize) > 0 ? 64 / (kVec * kMaxSize) : 1;
};

// ---- Functors applied per element (device side of the shared element math).

template <typename T, typename Op>
struct BinaryFn {
  Op op;
  __device__ __forceinline__ T operator()(T a, T b) const {
    return from_math<T>(op(to_math(a), to_math(b)));
  }
};

template <typename T>
struct ScaleFn {
  internal::ScaleOp<Math<T>> op;
  __device__ __forceinline__ T operator()(T a) const { return from_math<T>(op(to_math(a))); }
};

template <typename Dst, typename Src>
struct CastFn {
  __device__ __forceinline__ Dst operator()(Src v) const {
    return from_math<Dst>(internal::convert<Math<Dst>, kIsHalfDevice<Dst>>(to_math(v)));
  }
};

// ---- Kernels.

// out = f(a, b), items of one 16-byte vector per input.
template <typename T, typename F>
__global__ void binary_vector_kernel(T* out, const T* a, const T* b, int64_t n_items, F f) {
  constexpr int kVec = 16 / sizeof(T);
  constexpr int kUnroll = Geometry<T, T>::kUnroll;
  const uint4* a4 = reinterpret_cast<const uint4*>(a);
  const uint4* b4 = reinterpret_cast<const uint4*>(b);
  uint4* o4 = reinterpret_cast<uint4*>(out);
  const int64_t base = static_cast<int64_t>(blockIdx.x) * blockDim.x * kUnroll + threadIdx.x;
  uint4 ra[kUnroll], rb[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int64_t v = base + static_cast<int64_t>(u) * blockDim.x;
    if (v < n_items) {
      ra[u] = a4[v];
      rb[u] = b4[v];
    }
  }
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int64_t v = base + static_cast<int64_t>(u) * blockDim.x;
    if (v < n_items) {
      T* av = reinterpret_cast<T*>(&ra[u]);
      const T* bv = reinterpret_cast<const T*>(&rb[u]);
#pragma unroll
      for (int k = 0; k < kVec; ++k) av[k] = f(av[k], bv[k]);
      o4[v] = ra[u];
    }
  }
}

template <typename T, typename F>
__global__ void binary_scalar_kernel(T* out, const T* a, const T* b, int64_t n, F f) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += stride) {
    out[i] = f(a[i], b[i]);
  }
}

// out = f(in) with possibly different element sizes: an item is kInVecs
// 16-byte loads and kOutVecs 16-byte stores of kVec elements.
template <typename Out, typename In, typename F>
__global__ void unary_vector_kernel(Out* out, const In* in, int64_t n_items, F f) {
  using G = Geometry<Out, In>;
  const uint4* i4 = reinterpret_cast<const uint4*>(in);
  uint4* o4 = reinterpret_cast<uint4*>(out);
  const int64_t base = static_cast<int64_t>(blockIdx.x) * blockDim.x * G::kUnroll + threadIdx.x;
  uint4 rin[G::kUnroll][G::kInVecs];
#pragma unroll
  for (int u = 0; u < G::kUnroll; ++u) {
    const int64_t v = base + static_cast<int64_t>(u) * blockDim.x;
    if (v < n_items) {
#pragma unroll
      for (int j = 0; j < G::kInVecs; ++j) rin[u][j] = i4[v * G::kInVecs + j];
    }
  }
#pragma unroll
  for (int u = 0; u < G::kUnroll; ++u) {
    const int64_t v = base + static_cast<int64_t>(u) * blockDim.x;
    if (v < n_items) {
      uint4 rout[G::kOutVecs];
      const In* iv = reinterpret_cast<const In*>(rin[u]);
      Out* ov = reinterpret_cast<Out*>(rout);
#pragma unroll
      for (int k = 0; k < G::kVec; ++k) ov[k] = f(iv[k]);
#pragma unroll
      for (int j = 0; j < G::kOutVecs; ++j) o4[v * G::kOutVecs + j] = rout[j];
    }
  }
}

template <typename Out, typename In, typename F>
__global__ void unary_scalar_kernel(Out* out, const In* in, int64_t n, F f) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += stride) {
    out[i] = f(in[i]);
  }
}

// Stores the 16-byte `pattern` (the value repeated) to n_vec vectors.
constexpr int kFillUnroll = 4;
__global__ void fill_vector_kernel(uint4* out, int64_t n_vec, uint4 pattern) {
  const int64_t base = static_cast<int64_t>(blockIdx.x) * blockDim.x * kFillUnroll + threadIdx.x;
#pragma unroll
  for (int u = 0; u < kFillUnroll; ++u) {
    const int64_t v = base + static_cast<int64_t>(u) * blockDim.x;
    if (v < n_vec) out[v] = pattern;
  }
}

// U is the unsigned integer of the element's size: fill stores bits.
template <typename U>
__global__ void fill_scalar_kernel(U* out, int64_t n, U bits) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += stride) {
    out[i] = bits;
  }
}

// ---- Launchers.

int scalar_grid(int64_t n) {
  const int64_t wanted = (n + kThreads - 1) / kThreads;
  const int sms = std::max(cuda::multiprocessor_count(), 1);
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(wanted, int64_t{sms} * 8)));
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Blocks for n_items items at kUnroll per thread, or 0 if the grid would be too large.
int64_t vector_blocks(int64_t n_items, int unroll) {
  const int64_t per_block = int64_t{kThreads} * unroll;
  const int64_t blocks = (n_items + per_block - 1) / per_block;
  return blocks > 0x7fffffff ? 0 : blocks;
}

template <typename T, typename F>
KernelStatus launch_binary(T* out, const T* a, const T* b, int64_t n, F f, cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  int64_t done = 0;
  if (aligned16(out) && aligned16(a) && aligned16(b) && n >= kVec) {
    const int64_t n_items = n / kVec;
    const int64_t blocks = vector_blocks(n_items, Geometry<T, T>::kUnroll);
    if (blocks == 0) return KernelStatus::invalid_argument("elementwise: n too large");
    binary_vector_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(out, a, b, n_items, f);
    done = n_items * kVec;
  }
  if (done < n) {
    const int64_t rest = n - done;
    binary_scalar_kernel<<<scalar_grid(rest), kThreads, 0, stream>>>(out + done, a + done, b + done,
                                                                     rest, f);
  }
  return cuda::last_launch_status();
}

template <typename Out, typename In, typename F>
KernelStatus launch_unary(Out* out, const In* in, int64_t n, F f, cudaStream_t stream) {
  using G = Geometry<Out, In>;
  int64_t done = 0;
  if (aligned16(out) && aligned16(in) && n >= G::kVec) {
    const int64_t n_items = n / G::kVec;
    const int64_t blocks = vector_blocks(n_items, G::kUnroll);
    if (blocks == 0) return KernelStatus::invalid_argument("elementwise: n too large");
    unary_vector_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(out, in, n_items, f);
    done = n_items * G::kVec;
  }
  if (done < n) {
    const int64_t rest = n - done;
    unary_scalar_kernel<<<scalar_grid(rest), kThreads, 0, stream>>>(out + done, in + done, rest, f);
  }
  return cuda::last_launch_status();
}

template <typename T>
KernelStatus binary_typed(T* out, const T* a, const T* b, int64_t n, BinaryOp op,
                          cudaStream_t stream) {
  switch (op) {
    case BinaryOp::kAdd:
      return launch_binary(out, a, b, n, BinaryFn<T, internal::AddOp>{}, stream);
    case BinaryOp::kSub:
      return launch_binary(out, a, b, n, BinaryFn<T, internal::SubOp>{}, stream);
    case BinaryOp::kMul:
      return launch_binary(out, a, b, n, BinaryFn<T, internal::MulOp>{}, stream);
  }
  return KernelStatus::invalid_argument("elementwise: unknown BinaryOp");
}

// scale/axpby: the floating dtypes (float64 included); integers are unsupported.
template <typename F>
KernelStatus dispatch_floating(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kF32: return f(float{});
    case DType::kF16: return f(__half{});
    case DType::kBF16: return f(__nv_bfloat16{});
    case DType::kF64: return f(double{});
    default:
      return KernelStatus::unsupported(
          "elementwise: scale/axpby need float32, float16, bfloat16 or float64");
  }
}

// The host element type with the same bits as device type T (for fill's value).
template <typename T>
struct HostType {
  using type = T;
};
template <>
struct HostType<__half> {
  using type = Half;
};
template <>
struct HostType<__nv_bfloat16> {
  using type = BFloat16;
};

template <size_t kSize>
struct UnsignedOfSize;
template <>
struct UnsignedOfSize<1> {
  using type = uint8_t;
};
template <>
struct UnsignedOfSize<2> {
  using type = uint16_t;
};
template <>
struct UnsignedOfSize<4> {
  using type = uint32_t;
};
template <>
struct UnsignedOfSize<8> {
  using type = uint64_t;
};

}  // namespace

KernelStatus binary_cuda(void* out, const void* a, const void* b, int64_t n, DType dtype,
                         BinaryOp op, cudaStream_t stream) {
  KernelStatus s = check_buffers("binary_cuda: n < 0 or null buffer with n > 0", n, {out, a, b});
  if (!s.ok() || n == 0) return s;
  return cuda::dispatch_all_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    return binary_typed(static_cast<T*>(out), static_cast<const T*>(a), static_cast<const T*>(b),
                        n, op, stream);
  });
}

KernelStatus scale_cuda(void* out, const void* a, double alpha, int64_t n, DType dtype,
                        cudaStream_t stream) {
  KernelStatus s = check_buffers("scale_cuda: n < 0 or null buffer with n > 0", n, {out, a});
  if (!s.ok()) return s;
  return dispatch_floating(dtype, [&](auto tag) {
    using T = decltype(tag);
    if (n == 0) return KernelStatus();
    const ScaleFn<T> f{internal::ScaleOp<Math<T>>{static_cast<Math<T>>(alpha)}};
    return launch_unary(static_cast<T*>(out), static_cast<const T*>(a), n, f, stream);
  });
}

KernelStatus axpby_cuda(void* out, const void* a, const void* b, double alpha, double beta,
                        int64_t n, DType dtype, cudaStream_t stream) {
  KernelStatus s = check_buffers("axpby_cuda: n < 0 or null buffer with n > 0", n, {out, a, b});
  if (!s.ok()) return s;
  return dispatch_floating(dtype, [&](auto tag) {
    using T = decltype(tag);
    using M = Math<T>;
    if (n == 0) return KernelStatus();
    const BinaryFn<T, internal::AxpbyOp<M>> f{
        internal::AxpbyOp<M>{static_cast<M>(alpha), static_cast<M>(beta)}};
    return launch_binary(static_cast<T*>(out), static_cast<const T*>(a), static_cast<const T*>(b),
                         n, f, stream);
  });
}

KernelStatus cast_cuda(void* out, const void* in, int64_t n, DType out_dtype, DType in_dtype,
                       cudaStream_t stream) {
  KernelStatus s = check_buffers("cast_cuda: n < 0 or null buffer with n > 0", n, {out, in});
  if (!s.ok()) return s;
  s = cuda::dispatch_all_types(out_dtype, [](auto) { return KernelStatus(); });
  if (!s.ok()) return s;
  s = cuda::dispatch_all_types(in_dtype, [](auto) { return KernelStatus(); });
  if (!s.ok() || n == 0) return s;
  if (out_dtype == in_dtype) {
    if (out == in) return KernelStatus();
    return cuda::to_status(cudaMemcpyAsync(out, in, static_cast<size_t>(n) * dtype_size(in_dtype),
                                           cudaMemcpyDeviceToDevice, stream));
  }
  if (out == in && dtype_size(out_dtype) != dtype_size(in_dtype)) {
    return KernelStatus::invalid_argument("cast_cuda: in place needs dtypes of the same size");
  }
  return cuda::dispatch_all_types(out_dtype, [&](auto out_tag) {
    using Dst = decltype(out_tag);
    return cuda::dispatch_all_types(in_dtype, [&](auto in_tag) {
      using Src = decltype(in_tag);
      return launch_unary(static_cast<Dst*>(out), static_cast<const Src*>(in), n,
                          CastFn<Dst, Src>{}, stream);
    });
  });
}

KernelStatus fill_cuda(void* out, double value, int64_t n, DType dtype, cudaStream_t stream) {
  KernelStatus s = check_buffers("fill_cuda: n < 0 or null buffer with n > 0", n, {out});
  if (!s.ok()) return s;
  return cuda::dispatch_all_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    using Host = typename HostType<T>::type;
    using U = typename UnsignedOfSize<sizeof(T)>::type;
    if (n == 0) return KernelStatus();
    // The value is converted on the host by the CPU path's code: same bits.
    const Host v = internal::fill_value<Host>(value);
    U bits;
    std::memcpy(&bits, &v, sizeof(bits));
    constexpr int kVec = 16 / sizeof(T);
    int64_t done = 0;
    if (aligned16(out) && n >= kVec) {
      uint4 pattern;
      U* lanes = reinterpret_cast<U*>(&pattern);
      for (int k = 0; k < kVec; ++k) lanes[k] = bits;
      const int64_t n_vec = n / kVec;
      const int64_t blocks = vector_blocks(n_vec, kFillUnroll);
      if (blocks == 0) return KernelStatus::invalid_argument("fill_cuda: n too large");
      fill_vector_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
          static_cast<uint4*>(out), n_vec, pattern);
      done = n_vec * kVec;
    }
    if (done < n) {
      fill_scalar_kernel<<<scalar_grid(n - done), kThreads, 0, stream>>>(static_cast<U*>(out) + done,
                                                                         n - done, bits);
    }
    return cuda::last_launch_status();
  });
}

}  // namespace colossal::kernels::elementwise
