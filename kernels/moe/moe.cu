// CUDA token routing for kernels/moe.
//
// * route_forward / route_backward: one warp per token. Lanes stride over the
//   E logits; the softmax max and sum and each of the k top-1 picks are warp
//   reductions (xor shuffles: every lane ends with the same value; the picks
//   are broadcast from lane 0 so the lanes' lists of taken experts agree even
//   for NaN logits). The pick order — larger logit, then lower index — is the
//   CPU's, so both backends choose the same experts.
// * dispatch / combine: memory-bound row copies, one thread per 16-byte pack
//   (one element when a row is not a whole number of aligned packs).
// * combine_backward: one block per token; each thread walks its packs of the
//   row for all k experts at once (dout read once), and the k dot products
//   are reduced in a fixed order (warp xor shuffles, then warps in order).
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "kernels/common/cuda_utils.cuh"
#include "kernels/moe/moe.h"
#include "kernels/moe/moe_args.h"

namespace colossal::kernels::moe {
namespace {

using cuda::from_math;
using cuda::to_math;

constexpr int kWarps = 4;  // route kernels: tokens per block
constexpr int kThreads = 128;

template <typename T, int N>
struct alignas(sizeof(T) * N == 16 ? 16 : alignof(T)) Vec {
  T v[N];
};

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// (a_value, a_expert) is picked before (b_value, b_expert); expert -1 is "none".
__device__ __forceinline__ bool before(float av, int ae, float bv, int be) {
  return ae >= 0 && (be < 0 || av > bv || (av == bv && ae < be));
}

// The softmax max and denominator of one token's logits (all lanes).
template <typename T>
__device__ void softmax_stats(const T* l, int E, int lane, float* max, float* denom) {
  float m = -INFINITY;
  for (int e = lane; e < E; e += 32) m = fmaxf(m, to_math(l[e]));
  m = warp_max(m);
  float s = 0.f;
  for (int e = lane; e < E; e += 32) s += expf(to_math(l[e]) - m);
  *max = m;
  *denom = warp_sum(s);
}

template <typename T>
__global__ void __launch_bounds__(kWarps * 32)
    route_forward_kernel(float* __restrict__ weights, int32_t* __restrict__ experts,
                         const T* __restrict__ logits, int64_t tokens, int E, int k, bool normalize) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (t >= tokens) return;
  const T* l = logits + t * E;
  float m, denom;
  softmax_stats(l, E, lane, &m, &denom);
  int chosen[kMaxTopK];
  float p[kMaxTopK];
  float S = 0.f;
  for (int i = 0; i < k; ++i) {
    float bv = 0.f;
    int be = -1;
    for (int e = lane; e < E; e += 32) {
      bool taken = false;
      for (int j = 0; j < i; ++j) taken |= chosen[j] == e;
      const float v = to_math(l[e]);
      if (!taken && before(v, e, bv, be)) bv = v, be = e;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
      const int oe = __shfl_xor_sync(0xffffffffu, be, o);
      if (before(ov, oe, bv, be)) bv = ov, be = oe;
    }
    be = __shfl_sync(0xffffffffu, be, 0);
    bv = __shfl_sync(0xffffffffu, bv, 0);
    chosen[i] = be;
    p[i] = be >= 0 ? expf(bv - m) / denom : 0.f;
    S += p[i];
  }
  if (lane == 0) {
    for (int i = 0; i < k; ++i) {
      experts[t * k + i] = chosen[i];
      weights[t * k + i] = normalize ? p[i] / S : p[i];
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kWarps * 32)
    route_backward_kernel(T* __restrict__ dlogits, const float* __restrict__ dweights,
                          const T* __restrict__ logits, const int32_t* __restrict__ experts,
                          int64_t tokens, int E, int k, bool normalize) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (t >= tokens) return;
  const T* l = logits + t * E;
  float m, denom;
  softmax_stats(l, E, lane, &m, &denom);
  int ex[kMaxTopK];
  float p[kMaxTopK], dp[kMaxTopK];
  float S = 0.f, dot = 0.f, pdp = 0.f;
  for (int i = 0; i < k; ++i) {
    ex[i] = experts[t * k + i];
    p[i] = ex[i] >= 0 && ex[i] < E ? expf(to_math(l[ex[i]]) - m) / denom : 0.f;
    S += p[i];
  }
  for (int i = 0; i < k; ++i) dot += dweights[t * k + i] * (p[i] / S);
  for (int i = 0; i < k; ++i) {
    dp[i] = normalize ? (dweights[t * k + i] - dot) / S : dweights[t * k + i];
    pdp += dp[i] * p[i];
  }
  for (int e = lane; e < E; e += 32) {
    float g = 0.f;
    for (int i = 0; i < k; ++i) {
      if (ex[i] == e) g = dp[i];
    }
    dlogits[t * E + e] = from_math<T>(expf(to_math(l[e]) - m) / denom * (g - pdp));
  }
}

// rows[slots[t, i]] = x[t]: thread u copies pack u % packs of pair u / packs.
template <typename T, int N>
__global__ void __launch_bounds__(kThreads)
    dispatch_kernel(T* __restrict__ rows, const T* __restrict__ x, const int32_t* __restrict__ slots,
                    int64_t pairs, int k, int64_t packs) {
  const int64_t u = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const int64_t pair = u / packs;
  if (pair >= pairs) return;
  const int64_t c = (u - pair * packs) * N;
  const int64_t cols = packs * N;
  const Vec<T, N> v = *reinterpret_cast<const Vec<T, N>*>(x + (pair / k) * cols + c);
  *reinterpret_cast<Vec<T, N>*>(rows + int64_t{slots[pair]} * cols + c) = v;
}

// out[t] = residual[t] + sum_i w[t, i] rows[slots[t, i]]: thread u owns pack u % packs of token u / packs.
template <typename T, int N>
__global__ void __launch_bounds__(kThreads)
    combine_kernel(T* __restrict__ out, const T* __restrict__ rows, const int32_t* __restrict__ slots,
                   const float* __restrict__ weights, const T* __restrict__ residual, int64_t tokens,
                   int k, int64_t packs) {
  const int64_t u = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const int64_t t = u / packs;
  if (t >= tokens) return;
  const int64_t c = (u - t * packs) * N;
  const int64_t cols = packs * N;
  float acc[N];
  if (residual != nullptr) {
    const Vec<T, N> r = *reinterpret_cast<const Vec<T, N>*>(residual + t * cols + c);
#pragma unroll
    for (int j = 0; j < N; ++j) acc[j] = to_math(r.v[j]);
  } else {
#pragma unroll
    for (int j = 0; j < N; ++j) acc[j] = 0.f;
  }
  for (int i = 0; i < k; ++i) {
    const float w = weights != nullptr ? weights[t * k + i] : 1.f;
    const Vec<T, N> y = *reinterpret_cast<const Vec<T, N>*>(rows + int64_t{slots[t * k + i]} * cols + c);
#pragma unroll
    for (int j = 0; j < N; ++j) acc[j] = fmaf(w, to_math(y.v[j]), acc[j]);
  }
  Vec<T, N> o;
#pragma unroll
  for (int j = 0; j < N; ++j) o.v[j] = from_math<T>(acc[j]);
  *reinterpret_cast<Vec<T, N>*>(out + t * cols + c) = o;
}

// One block per token: drows[slots[t, i]] = w[t, i] dout[t] and
// dweights[t, i] = dot(dout[t], rows[slots[t, i]]).
template <typename T, int N>
__global__ void __launch_bounds__(kThreads)
    combine_backward_kernel(T* __restrict__ drows, float* __restrict__ dweights,
                            const T* __restrict__ dout, const T* __restrict__ rows,
                            const int32_t* __restrict__ slots, const float* __restrict__ weights,
                            int k, int64_t packs) {
  __shared__ float partial[kThreads / 32][kMaxTopK];
  const int64_t t = blockIdx.x;
  const int64_t cols = packs * N;
  float dot[kMaxTopK];
  int64_t slot[kMaxTopK];
  float w[kMaxTopK];
#pragma unroll
  for (int i = 0; i < kMaxTopK; ++i) {
    dot[i] = 0.f;
    slot[i] = i < k ? int64_t{slots[t * k + i]} : 0;
    w[i] = i < k ? weights[t * k + i] : 0.f;
  }
  for (int64_t p = threadIdx.x; p < packs; p += kThreads) {
    const int64_t c = p * N;
    const Vec<T, N> g = *reinterpret_cast<const Vec<T, N>*>(dout + t * cols + c);
#pragma unroll
    for (int i = 0; i < kMaxTopK; ++i) {
      if (i >= k) break;
      const Vec<T, N> y = *reinterpret_cast<const Vec<T, N>*>(rows + slot[i] * cols + c);
      Vec<T, N> d;
#pragma unroll
      for (int j = 0; j < N; ++j) {
        const float gj = to_math(g.v[j]);
        dot[i] = fmaf(gj, to_math(y.v[j]), dot[i]);
        d.v[j] = from_math<T>(w[i] * gj);
      }
      *reinterpret_cast<Vec<T, N>*>(drows + slot[i] * cols + c) = d;
    }
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int i = 0; i < kMaxTopK; ++i) {
    if (i >= k) break;
    const float s = warp_sum(dot[i]);
    if (lane == 0) partial[warp][i] = s;
  }
  __syncthreads();
  if (threadIdx.x < k) {
    float s = 0.f;
    for (int v = 0; v < kThreads / 32; ++v) s += partial[v][threadIdx.x];
    dweights[t * k + threadIdx.x] = s;
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

KernelStatus grid_for(int64_t units, int per_block, unsigned* blocks) {
  const int64_t b = (units + per_block - 1) / per_block;
  if (b > 0x7fffffff) return KernelStatus::invalid_argument("moe: too many rows for one launch");
  *blocks = static_cast<unsigned>(b);
  return KernelStatus();
}

// Calls launch(Vec width) with 16-byte packs when every row of `cols` elements
// of T starts 16-byte aligned in every buffer, else with single elements.
template <typename T, typename F>
KernelStatus by_width(int64_t cols, std::initializer_list<const void*> buffers, F&& launch) {
  constexpr int kVec = 16 / sizeof(T);
  bool packed = cols % kVec == 0;
  for (const void* p : buffers) packed &= p == nullptr || aligned16(p);
  if (packed) return launch(std::integral_constant<int, kVec>{});
  return launch(std::integral_constant<int, 1>{});
}

}  // namespace

KernelStatus route_forward_cuda(void* weights, int32_t* experts, const void* logits, int64_t tokens,
                                int64_t num_experts, int64_t top_k, bool normalize, DType dtype,
                                cudaStream_t stream) {
  KernelStatus st = internal::check_route(tokens, num_experts, top_k, {weights, experts, logits});
  if (!st.ok() || tokens == 0) return st;
  unsigned blocks;
  if (!(st = grid_for(tokens, kWarps, &blocks)).ok()) return st;
  return cuda::dispatch_float_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    route_forward_kernel<T><<<blocks, kWarps * 32, 0, stream>>>(
        static_cast<float*>(weights), experts, static_cast<const T*>(logits), tokens,
        static_cast<int>(num_experts), static_cast<int>(top_k), normalize);
    return cuda::last_launch_status();
  });
}

KernelStatus route_backward_cuda(void* dlogits, const void* dweights, const void* logits,
                                 const int32_t* experts, int64_t tokens, int64_t num_experts,
                                 int64_t top_k, bool normalize, DType dtype, cudaStream_t stream) {
  KernelStatus st =
      internal::check_route(tokens, num_experts, top_k, {dlogits, dweights, logits, experts});
  if (!st.ok() || tokens == 0) return st;
  unsigned blocks;
  if (!(st = grid_for(tokens, kWarps, &blocks)).ok()) return st;
  return cuda::dispatch_float_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    route_backward_kernel<T><<<blocks, kWarps * 32, 0, stream>>>(
        static_cast<T*>(dlogits), static_cast<const float*>(dweights), static_cast<const T*>(logits),
        experts, tokens, static_cast<int>(num_experts), static_cast<int>(top_k), normalize);
    return cuda::last_launch_status();
  });
}

KernelStatus dispatch_cuda(void* rows, const void* x, const int32_t* slots, int64_t tokens,
                           int64_t top_k, int64_t cols, DType dtype, cudaStream_t stream) {
  KernelStatus st = internal::check_rows(tokens, top_k, cols, {rows, x, slots});
  if (!st.ok() || tokens == 0 || cols == 0) return st;
  return cuda::dispatch_float_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    return by_width<T>(cols, {rows, x}, [&](auto width) {
      constexpr int N = decltype(width)::value;
      unsigned blocks;
      KernelStatus g = grid_for(tokens * top_k * (cols / N), kThreads, &blocks);
      if (!g.ok()) return g;
      dispatch_kernel<T, N><<<blocks, kThreads, 0, stream>>>(static_cast<T*>(rows), static_cast<const T*>(x),
                                                             slots, tokens * top_k,
                                                             static_cast<int>(top_k), cols / N);
      return cuda::last_launch_status();
    });
  });
}

KernelStatus combine_cuda(void* out, const void* rows, const int32_t* slots, const void* weights,
                          const void* residual, int64_t tokens, int64_t top_k, int64_t cols,
                          DType dtype, cudaStream_t stream) {
  KernelStatus st = internal::check_rows(tokens, top_k, cols, {out, rows, slots});
  if (!st.ok() || tokens == 0 || cols == 0) return st;
  return cuda::dispatch_float_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    return by_width<T>(cols, {out, rows, residual}, [&](auto width) {
      constexpr int N = decltype(width)::value;
      unsigned blocks;
      KernelStatus g = grid_for(tokens * (cols / N), kThreads, &blocks);
      if (!g.ok()) return g;
      combine_kernel<T, N><<<blocks, kThreads, 0, stream>>>(
          static_cast<T*>(out), static_cast<const T*>(rows), slots, static_cast<const float*>(weights),
          static_cast<const T*>(residual), tokens, static_cast<int>(top_k), cols / N);
      return cuda::last_launch_status();
    });
  });
}

KernelStatus combine_backward_cuda(void* drows, void* dweights, const void* dout, const void* rows,
                                   const int32_t* slots, const void* weights, int64_t tokens,
                                   int64_t top_k, int64_t cols, DType dtype, cudaStream_t stream) {
  KernelStatus st = internal::check_rows(tokens, top_k, cols, {drows, dout, rows, slots, weights});
  if (!st.ok() || tokens == 0) return st;
  if (dweights == nullptr || weights == nullptr) return KernelStatus::invalid_argument("moe rows: null buffer");
  if (tokens > 0x7fffffff) return KernelStatus::invalid_argument("moe: too many rows for one launch");
  return cuda::dispatch_float_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    return by_width<T>(cols, {drows, dout, rows}, [&](auto width) {
      constexpr int N = decltype(width)::value;
      combine_backward_kernel<T, N><<<static_cast<unsigned>(tokens), kThreads, 0, stream>>>(
          static_cast<T*>(drows), static_cast<float*>(dweights), static_cast<const T*>(dout),
          static_cast<const T*>(rows), slots, static_cast<const float*>(weights),
          static_cast<int>(top_k), cols / N);
      return cuda::last_launch_status();
    });
  });
}

}  // namespace colossal::kernels::moe
