// CUDA softmax cross-entropy: one CTA per row, persistent grid.
//
// Design (V = 50257 .. 128k makes every row long):
//   * A row is owned by one CTA (up to 512 threads); the grid is persistent
//     (as many CTAs as fit on the device, each looping over rows i, i + grid,
//     ...), so per-launch work such as the kMean row count is paid per CTA,
//     not per row.
//   * Pass 1 streams the row once with 16-byte loads (kUnroll vectors in flight
//     per thread before any math) and keeps a per-thread online (max, sum of
//     exp(x - max)) pair in float32: each group of vectors first takes its max,
//     rescales the running sum once, then adds exp2((x - max) * log2 e) per
//     element (ex2.approx). Pairs are merged with warp shuffles, then across
//     warps through shared memory; every thread gets the row's logsumexp.
//   * Rows start wherever row * V * sizeof(T) puts them (V = 50257 is odd), so
//     each row is split into a scalar head up to the first 128-byte boundary
//     (of the dlogits row when there is one: whole-line stores), a 16-byte
//     vector body and a scalar tail. When logits and dlogits differ in
//     alignment mod 16 the kernels fall back to one-element "vectors".
//   * Fused forward+backward: pass 1 also copies the body vectors into shared
//     memory (up to the opt-in limit, 227 KB on H100), and pass 2 computes
//     dloss * w * (exp(x - lse) - onehot) from there and stores 16-byte
//     vectors with evict-first hints. Logits are therefore read from device
//     memory once and dlogits written once; a row larger than shared memory
//     (bf16 V = 128256 is 256 KB) re-reads only its uncached tail, which was
//     loaded a moment earlier and is normally still in L2. Each thread caches
//     and later reads back only the vectors it loaded itself, so no barrier
//     guards the cache, and in-place (dlogits == logits) is safe: every
//     element is read (pass 1, and pass 2 from global for the uncached part)
//     by the thread that later overwrites it, and the target logit is read in
//     pass 1, before the row's first store.
//   * Forward alone is pass 1 plus the per-row outputs; backward alone is pass
//     2 over the saved lse: both one read of the logits.
//   * kSum/kMean: the row kernel writes per-row losses; one CTA then sums them
//     in float64 in a fixed order (strided partial sums + a fixed tree), so
//     the total is bit-for-bit reproducible (no float atomics). kMean's
//     gradient weight 1/count needs the count of non-ignored rows before any
//     gradient is written: each CTA counts the targets itself in a prologue
//     (N int32 reads per CTA, a few microseconds from L2), which avoids a
//     scratch buffer and a second launch.
//   * Out-of-range targets (not ignore_index) never index memory: the row's
//     loss is NaN and its dlogits row is filled with NaN.
//   * Vocabulary shards run the same kernel: a row's columns are global ids
//     v_start.., its real columns the shard's part of [0, v_real). Pass 1
//     writes the shard's max and target logit (vocab_shard_max), or its sum
//     of exponentials s * exp(m - M) from its own (m, s) pair and the global
//     max M (vocab_shard_sum_exp); pass 2 takes the softmax as
//     exp(x - M) * (scale / S) from the global max and sum.
//
// Measured on one H100 80GB HBM3 (device copy ~3.0 TB/s), kMean, fused, GB/s
// over 1 read + 1 write of the logits: bf16 8192x50257 0.656 ms (2510), fp32
// 8192x50257 1.323 ms (2490), bf16 4096x128256 0.847 ms (2480; 2600 counting
// the re-read tail); F.cross_entropy forward+backward takes 2.16 / 4.91 /
// 3.17 ms. Tried and rejected: 1024-thread CTAs and 8 vectors in flight per
// thread (slower: fewer CTAs per SM), capping the fp32 row cache to fit two
// CTAs per SM (no gain).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/common/cuda_utils.cuh"
#include "kernels/loss/loss.h"
#include "kernels/loss/loss_args.h"
#include "kernels/loss/loss_plan.h"

namespace colossal::kernels::loss {
namespace {

using cuda::from_math;
using cuda::to_math;
using internal::Args;
using internal::Entry;
using internal::kMaxThreads;
using internal::kUnroll;

constexpr float kLog2e = 1.4426950408889634f;

// 2^x with the SFU: one instruction, ~2 ulp; flushes results below 2^-126 to 0,
// which a probability that small may be.
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// exp(a - b). a - b is exact when a is near b (where exp matters), so the error
// is the SFU's, not one proportional to |a|.
__device__ __forceinline__ float exp_sub(float a, float b) { return ex2((a - b) * kLog2e); }

// A running max and sum of exp(x - max). {-inf, 0} is the empty set.
struct Stats {
  float m;
  float s;
};

// The shift used for exponentials: the max, or 0 while the max is -inf (all
// -inf so far), so -inf elements add exp(-inf) = 0 and NaN elements add NaN
// rather than being dropped.
__device__ __forceinline__ float shift_of(float m) { return m == -INFINITY ? 0.0f : m; }

__device__ __forceinline__ Stats merge(Stats a, Stats b) {
  const float m = fmaxf(a.m, b.m);
  const float c = shift_of(m);
  return {m, a.s * exp_sub(a.m, c) + b.s * exp_sub(b.m, c)};
}

__device__ __forceinline__ Stats warp_merge(Stats st) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const Stats other{__shfl_xor_sync(0xffffffffu, st.m, offset),
                      __shfl_xor_sync(0xffffffffu, st.s, offset)};
    st = merge(st, other);
  }
  return st;
}

// Every thread of the CTA gets the merged stats. shm holds 33 entries.
__device__ Stats block_merge(Stats st, Stats* shm) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  st = warp_merge(st);
  if (lane == 0) shm[warp] = st;
  __syncthreads();
  if (warp == 0) {
    Stats t = lane < static_cast<int>(blockDim.x >> 5) ? shm[lane] : Stats{-INFINITY, 0.0f};
    t = warp_merge(t);
    if (lane == 0) shm[32] = t;
  }
  __syncthreads();
  return shm[32];
}

__device__ long long block_sum(long long v, long long* shm) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  if (lane == 0) shm[warp] = v;
  __syncthreads();
  if (warp == 0) {
    long long t = lane < static_cast<int>(blockDim.x >> 5) ? shm[lane] : 0;
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) t += __shfl_xor_sync(0xffffffffu, t, offset);
    if (lane == 0) shm[32] = t;
  }
  __syncthreads();
  return shm[32];
}

// The raw bits of kVec elements of T, loaded and stored as one access.
template <typename T, int kVec>
using RawOf = std::conditional_t<
    sizeof(T) * kVec == 16, uint4,
    std::conditional_t<sizeof(T) * kVec == 4, unsigned int, unsigned short>>;

template <typename T, int kVec>
__device__ __forceinline__ float element(const RawOf<T, kVec>& raw, int q) {
  return to_math(reinterpret_cast<const T*>(&raw)[q]);
}

// Unpacks a vector into floats; `valid` elements are real logits, the rest
// (padding columns at the end of a row) become -inf, which adds nothing to a
// max or a sum of exponentials.
template <typename T, int kVec>
__device__ __forceinline__ void unpack(const RawOf<T, kVec>& raw, int valid, float (&f)[kVec]) {
  if (valid >= kVec) {
#pragma unroll
    for (int q = 0; q < kVec; ++q) f[q] = element<T, kVec>(raw, q);
  } else {
#pragma unroll
    for (int q = 0; q < kVec; ++q) f[q] = q < valid ? element<T, kVec>(raw, q) : -INFINITY;
  }
}

// Rounds kVec floats to T (pairs at once for the 16-bit types) into one vector.
template <typename T, int kVec>
__device__ __forceinline__ RawOf<T, kVec> pack(const float (&g)[kVec]) {
  RawOf<T, kVec> raw;
  if constexpr (std::is_same_v<T, __nv_bfloat16> && kVec % 2 == 0) {
#pragma unroll
    for (int q = 0; q < kVec; q += 2) {
      reinterpret_cast<__nv_bfloat162*>(&raw)[q / 2] = __floats2bfloat162_rn(g[q], g[q + 1]);
    }
  } else if constexpr (std::is_same_v<T, __half> && kVec % 2 == 0) {
#pragma unroll
    for (int q = 0; q < kVec; q += 2) {
      reinterpret_cast<__half2*>(&raw)[q / 2] = __floats2half2_rn(g[q], g[q + 1]);
    }
  } else {
#pragma unroll
    for (int q = 0; q < kVec; ++q) reinterpret_cast<T*>(&raw)[q] = from_math<T>(g[q]);
  }
  return raw;
}

enum class Mode { kForward, kBackward, kFused };

struct KernelArgs {
  float* row_losses;     // forward, fused (null for shards)
  float* lse_out;        // forward, fused; may be null
  const float* lse_in;   // backward
  void* dlogits;         // backward, fused
  const void* logits;
  const int32_t* targets;  // null for vocab_shard_sum_exp
  float dloss;
  int64_t n;
  int64_t v;             // row stride
  int v_real;            // real columns of a row (a shard's part of [0, target_limit))
  int len;               // elements of a row the kernel visits: v_real (forward) or v
  int cache_vectors;     // fused: body vectors of a row kept in shared memory
  int32_t ignore_index;
  bool mean;
  int64_t v_start;       // global id of column 0 (0 but for shards)
  int64_t target_limit;  // targets outside [0, target_limit) are invalid: the global v_real
  float* shard_max;      // vocab_shard_max: per-row outputs instead of the loss
  float* target_logit;
  float* shard_sum;      // vocab_shard_sum_exp: per-row output instead of the loss
  const float* global_max;  // vocab_shard_sum_exp and vocab_shard_backward
  const float* global_sum;  // vocab_shard_backward
};

// Pass 1's per-row outputs: the loss and lse, or (kShards) a shard's max and
// target logit, or a shard's sum of exp(x - M): its own (m, s) rescaled to the
// global max M (s * exp(m - M) is the same sum; 0 when the shard has no real
// column, m = -inf).
template <bool kShards>
__device__ __forceinline__ void store_row(const KernelArgs& a, int64_t row, Stats st, float lse,
                                          float target_logit, bool ignored, bool invalid) {
  if (kShards && a.shard_max != nullptr) {
    a.shard_max[row] = st.m;
    a.target_logit[row] = invalid ? NAN : target_logit;
  } else if (kShards && a.shard_sum != nullptr) {
    a.shard_sum[row] = st.s * exp_sub(st.m, shift_of(a.global_max[row]));
  } else {
    if (a.lse_out != nullptr) a.lse_out[row] = lse;
    a.row_losses[row] = ignored ? 0.0f : invalid ? NAN : lse - target_logit;
  }
}

// A row of `len` elements split into a scalar head [0, head), an aligned
// vector body of `nvec` vectors, and a scalar tail [tail, len).
struct RowSplit {
  int head;
  int nvec;
  int tail;
};

// The body starts at a 128-byte boundary of `row` (the row that is written,
// when there is one), so each warp's 512-byte access covers whole cache lines:
// a body merely 16-byte aligned leaves half-written 32-byte sectors at every
// warp boundary, which cost the backward ~15% (V = 50257, H100).
constexpr int kBodyAlign = 128;

template <typename T, int kVec>
__device__ __forceinline__ RowSplit split_row(const T* row, int len) {
  if (kVec == 1) return {0, len, len};
  const int misalign = static_cast<int>(reinterpret_cast<uintptr_t>(row) % kBodyAlign);
  const int head =
      min(len, misalign == 0 ? 0 : (kBodyAlign - misalign) / static_cast<int>(sizeof(T)));
  const int nvec = (len - head) / kVec;
  return {head, nvec, head + nvec * kVec};
}

template <typename T, int kVec, Mode kMode>
__global__ void __launch_bounds__(kMaxThreads) cross_entropy_kernel(KernelArgs a) {
  using Raw = RawOf<T, kVec>;
  constexpr bool kStats = kMode != Mode::kBackward;
  constexpr bool kGrad = kMode != Mode::kForward;
  constexpr bool kCache = kMode == Mode::kFused;
  __shared__ Stats stats_shm[33];
  __shared__ long long count_shm[33];
  extern __shared__ __align__(16) unsigned char cache_bytes[];
  Raw* cache = reinterpret_cast<Raw*>(cache_bytes);

  const T* logits = static_cast<const T*>(a.logits);
  T* dlogits = static_cast<T*>(a.dlogits);
  const int tid = threadIdx.x;
  const int threads = blockDim.x;

  // Gradient weight of every row: dloss, divided by the non-ignored rows for kMean.
  float scale = a.dloss;
  if (kGrad && a.mean) {
    long long count = 0;
    for (int64_t i = tid; i < a.n; i += threads) count += a.targets[i] != a.ignore_index;
    count = block_sum(count, count_shm);
    scale = count > 0 ? a.dloss / static_cast<float>(count) : 0.0f;
  }

  // Shards run the forward and backward modes only: the fused kernel (the
  // training path, at its register limit) compiles without their fields.
  constexpr bool kShards = kMode != Mode::kFused;
  const int64_t v_start = kShards ? a.v_start : 0;
  const int64_t target_limit = kShards ? a.target_limit : a.v_real;

  for (int64_t row = blockIdx.x; row < a.n; row += gridDim.x) {
    // Without targets (vocab_shard_sum_exp) a row counts as ignored, which
    // only its target logit depends on.
    const int32_t t = (kShards && a.targets == nullptr) ? a.ignore_index : a.targets[row];
    const bool ignored = t == a.ignore_index;
    const bool invalid = !ignored && (t < 0 || t >= target_limit);
    // The target's column among this row's real columns, or -1 (another shard's).
    int tl = t;
    if constexpr (kShards) {
      const int64_t t_col = static_cast<int64_t>(t) - v_start;
      tl = !ignored && !invalid && t_col >= 0 && t_col < a.v_real ? static_cast<int>(t_col) : -1;
    }
    const T* x = logits + row * a.v;
    // Split by the dlogits row when writing (it agrees with x mod 16, so the
    // x body is 16-byte aligned either way).
    const RowSplit sp = split_row<T, kVec>(kGrad ? dlogits + row * a.v : x, a.len);
    const Raw* xv = reinterpret_cast<const Raw*>(x + sp.head);

    // Pass 2's gradient: w * exp(x - shift), minus scale at the target column.
    float shift = 0.0f;
    float w = scale;
    if constexpr (kStats) {
      const bool need_stats = !(kMode == Mode::kFused && ignored && a.lse_out == nullptr);
      if (need_stats) {
        Stats st{-INFINITY, 0.0f};
        float target_logit = 0.0f;
        if (tid == 0 && !ignored && !invalid && tl >= 0) target_logit = to_math(x[tl]);
        // Scalar head (< 128 bytes) and tail (< kVec elements).
        for (int j = tid; j < sp.head && j < a.v_real; j += threads) {
          st = merge(st, Stats{to_math(x[j]), 1.0f});
        }
        if (sp.tail + tid < a.len && sp.tail + tid < a.v_real) {
          st = merge(st, Stats{to_math(x[sp.tail + tid]), 1.0f});
        }
        for (int k0 = tid; k0 < sp.nvec; k0 += kUnroll * threads) {
          Raw r[kUnroll] = {};
#pragma unroll
          for (int u = 0; u < kUnroll; ++u) {
            const int k = k0 + u * threads;
            // Vectors pass 2 reads again from global memory are loaded with the
            // default L2 policy; all others are evict-first.
            if (k < sp.nvec) r[u] = (kCache && k >= a.cache_vectors) ? __ldcg(xv + k) : __ldcs(xv + k);
          }
          // Vectors past the end of the body count as all padding.
          float f[kUnroll][kVec];
          float group_max = -INFINITY;
#pragma unroll
          for (int u = 0; u < kUnroll; ++u) {
            const int k = k0 + u * threads;
            if (kCache && k < sp.nvec && k < a.cache_vectors) cache[k] = r[u];
            unpack<T, kVec>(r[u], k < sp.nvec ? a.v_real - (sp.head + k * kVec) : 0, f[u]);
#pragma unroll
            for (int q = 0; q < kVec; ++q) group_max = fmaxf(group_max, f[u][q]);
          }
          const float m = fmaxf(st.m, group_max);
          const float c = shift_of(m);
          float s = st.s * exp_sub(st.m, c);
#pragma unroll
          for (int u = 0; u < kUnroll; ++u) {
            if (k0 + u * threads < sp.nvec) {
#pragma unroll
              for (int q = 0; q < kVec; ++q) s += exp_sub(f[u][q], c);
            }
          }
          st = {m, s};
        }
        st = block_merge(st, stats_shm);
        shift = st.m + logf(st.s);  // the row's lse
        if (tid == 0) store_row<kShards>(a, row, st, shift, target_logit, ignored, invalid);
      } else if (tid == 0) {
        a.row_losses[row] = 0.0f;
      }
    } else if (!ignored && !invalid) {
      if (kShards && a.global_sum != nullptr) {  // a shard: softmax = exp(x - M) / S
        shift = shift_of(a.global_max[row]);
        w = scale / a.global_sum[row];
      } else {
        shift = a.lse_in[row];
      }
    }

    if constexpr (kGrad) {
      T* d = dlogits + row * a.v;
      Raw* dv = reinterpret_cast<Raw*>(d + sp.head);
      if (ignored || invalid) {
        // Ignored rows get zeros, rows with a bad target NaN; nothing is read.
        const T fill = from_math<T>(ignored ? 0.0f : NAN);
        Raw fill_vec;
#pragma unroll
        for (int q = 0; q < kVec; ++q) reinterpret_cast<T*>(&fill_vec)[q] = fill;
        for (int j = tid; j < sp.head; j += threads) d[j] = fill;
        if (sp.tail + tid < a.len) d[sp.tail + tid] = fill;
        for (int k = tid; k < sp.nvec; k += threads) __stcs(dv + k, fill_vec);
        continue;
      }
      auto grad = [&](float xj, int j) -> float {
        if (j >= a.v_real) return 0.0f;  // padding columns
        const float g = w * exp_sub(xj, shift);
        return j == tl ? g - scale : g;
      };
      for (int j = tid; j < sp.head; j += threads) d[j] = from_math<T>(grad(to_math(x[j]), j));
      if (sp.tail + tid < a.len) {
        const int j = sp.tail + tid;
        d[j] = from_math<T>(grad(to_math(x[j]), j));
      }
      for (int k0 = tid; k0 < sp.nvec; k0 += kUnroll * threads) {
        Raw r[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int k = k0 + u * threads;
          if (k < sp.nvec) r[u] = (kCache && k < a.cache_vectors) ? cache[k] : __ldcs(xv + k);
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int k = k0 + u * threads;
          if (k < sp.nvec) {
            const int j0 = sp.head + k * kVec;
            float g[kVec];
            if (a.v_real - j0 >= kVec && static_cast<unsigned>(tl - j0) >= kVec) {
              // Common case: no padding and not the target column.
#pragma unroll
              for (int q = 0; q < kVec; ++q) g[q] = w * exp_sub(element<T, kVec>(r[u], q), shift);
            } else {
#pragma unroll
              for (int q = 0; q < kVec; ++q) g[q] = grad(element<T, kVec>(r[u], q), j0 + q);
            }
            __stcs(dv + k, pack<T, kVec>(g));
          }
        }
      }
    }
  }
}

// Deterministic kSum/kMean total: float64 strided partial sums, then a fixed tree.
constexpr int kTotalThreads = 512;

__global__ void __launch_bounds__(kTotalThreads)
    total_kernel(float* loss, const float* row_losses, const int32_t* targets, int64_t n,
                 int32_t ignore_index, bool mean) {
  __shared__ double sums[kTotalThreads];
  __shared__ long long counts[kTotalThreads];
  const int tid = threadIdx.x;
  double s = 0.0;
  long long c = 0;
  for (int64_t i = tid; i < n; i += kTotalThreads) {
    s += row_losses[i];
    c += targets[i] != ignore_index;
  }
  sums[tid] = s;
  counts[tid] = c;
  __syncthreads();
  for (int stride = kTotalThreads / 2; stride > 0; stride >>= 1) {
    if (tid < stride) {
      sums[tid] += sums[tid + stride];
      counts[tid] += counts[tid + stride];
    }
    __syncthreads();
  }
  if (tid == 0) {
    if (mean) {
      loss[0] = counts[0] > 0 ? static_cast<float>(sums[0] / static_cast<double>(counts[0])) : 0.0f;
    } else {
      loss[0] = static_cast<float>(sums[0]);
    }
  }
}

struct DeviceInfo {
  int sms = 0;
  int smem_optin = 0;
};

KernelStatus device_info(DeviceInfo* info) {
  int device = 0;
  KernelStatus s = cuda::to_status(cudaGetDevice(&device));
  if (!s.ok()) return s;
  s = cuda::to_status(cudaDeviceGetAttribute(&info->sms, cudaDevAttrMultiProcessorCount, device));
  if (!s.ok()) return s;
  s = cuda::to_status(
      cudaDeviceGetAttribute(&info->smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return s;
}

template <typename T, int kVec, Mode kMode>
KernelStatus launch_rows(KernelArgs ka, cudaStream_t stream) {
  using Raw = RawOf<T, kVec>;
  auto* kernel = cross_entropy_kernel<T, kVec, kMode>;
  DeviceInfo dev;
  KernelStatus s = device_info(&dev);
  if (!s.ok()) return s;
  const int threads = internal::row_threads(ka.len, kVec);
  size_t cache_bytes = 0;
  ka.cache_vectors = 0;
  if (kMode == Mode::kFused) {
    cudaFuncAttributes attr;
    s = cuda::to_status(cudaFuncGetAttributes(&attr, kernel));
    if (!s.ok()) return s;
    ka.cache_vectors = static_cast<int>(internal::fused_cache_vectors(
        ka.len, sizeof(Raw), sizeof(T), dev.smem_optin, static_cast<int64_t>(attr.sharedSizeBytes)));
    cache_bytes = static_cast<size_t>(ka.cache_vectors) * sizeof(Raw);
    // Always the same (largest) limit, so concurrent callers with different V
    // never lower it under one another's launch; and prefer shared memory
    // over L1 so two 100 KB rows fit on one SM.
    const int limit = dev.smem_optin - static_cast<int>(attr.sharedSizeBytes);
    s = cuda::to_status(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, limit));
    if (!s.ok()) return s;
    s = cuda::to_status(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                             cudaSharedmemCarveoutMaxShared));
    if (!s.ok()) return s;
  }
  int per_sm = 0;
  s = cuda::to_status(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, cache_bytes));
  if (!s.ok()) return s;
  const int64_t resident = int64_t{std::max(per_sm, 1)} * std::max(dev.sms, 1);
  const int grid = static_cast<int>(std::min<int64_t>(ka.n, resident));
  kernel<<<grid, threads, cache_bytes, stream>>>(ka);
  return cuda::last_launch_status();
}

// Picks 16-byte vectors unless logits and dlogits disagree on alignment mod 16
// (then their rows cannot share one head/body split).
template <typename T, Mode kMode>
KernelStatus launch_typed(const KernelArgs& ka, cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  const bool same_alignment =
      ka.dlogits == nullptr ||
      (reinterpret_cast<uintptr_t>(ka.dlogits) - reinterpret_cast<uintptr_t>(ka.logits)) % 16 == 0;
  if (same_alignment) return launch_rows<T, kVec, kMode>(ka, stream);
  return launch_rows<T, 1, kMode>(ka, stream);
}

KernelStatus run(Entry entry, const Args& a, float dloss, cudaStream_t stream) {
  KernelStatus s = internal::validate(entry, a, /*allow_f64=*/false);
  if (!s.ok()) return s;
  const bool total = entry != Entry::kBackward && internal::needs_total(a.options.reduction);
  if (a.n == 0) {
    if (total) {
      s = cuda::to_status(cudaMemsetAsync(a.loss, 0, sizeof(float), stream));
    }
    return s;
  }
  if (a.v > (int64_t{1} << 30)) {
    return KernelStatus::invalid_argument("cross_entropy_cuda: v > 2^30");
  }
  // Zero-initialised: the shard fields stay null/0 for the whole-vocabulary entries.
  KernelArgs ka{};
  ka.row_losses = a.row_losses;
  ka.lse_out = a.lse_out;
  ka.lse_in = a.lse_in;
  ka.dlogits = a.dlogits;
  ka.logits = a.logits;
  ka.targets = a.targets;
  ka.dloss = dloss;
  ka.n = a.n;
  ka.v = a.v;
  ka.v_real = static_cast<int>(a.local_real());
  ka.len = static_cast<int>(internal::row_stats_only(entry) ? a.local_real() : a.v);
  ka.ignore_index = a.options.ignore_index;
  ka.mean = a.options.reduction == Reduction::kMean;
  ka.v_start = a.v_start;
  ka.target_limit = a.v_real;
  ka.shard_max = a.shard_max;
  ka.target_logit = a.target_logit;
  ka.shard_sum = a.shard_sum;
  ka.global_max = a.global_max;
  ka.global_sum = a.global_sum;
  s = cuda::dispatch_float_types(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    if (entry == Entry::kFused) return launch_typed<T, Mode::kFused>(ka, stream);
    if (internal::row_stats_only(entry)) return launch_typed<T, Mode::kForward>(ka, stream);
    return launch_typed<T, Mode::kBackward>(ka, stream);
  });
  if (!s.ok() || !total) return s;
  total_kernel<<<1, kTotalThreads, 0, stream>>>(a.loss, a.row_losses, a.targets, a.n,
                                                a.options.ignore_index, ka.mean);
  return cuda::last_launch_status();
}

}  // namespace

KernelStatus cross_entropy_forward_cuda(float* loss, float* row_losses, float* lse,
                                        const void* logits, const int32_t* targets, int64_t n,
                                        int64_t v, int64_t v_real, DType dtype,
                                        const CrossEntropyOptions& options, cudaStream_t stream) {
  const Args a = internal::forward_args(loss, row_losses, lse, logits, targets, n, v, v_real, dtype, options);
  return run(Entry::kForward, a, 0.0f, stream);
}

KernelStatus cross_entropy_backward_cuda(void* dlogits, const void* logits, const float* lse,
                                         const int32_t* targets, float dloss, int64_t n, int64_t v,
                                         int64_t v_real, DType dtype,
                                         const CrossEntropyOptions& options, cudaStream_t stream) {
  const Args a = internal::backward_args(dlogits, logits, lse, targets, n, v, v_real, dtype, options);
  return run(Entry::kBackward, a, dloss, stream);
}

KernelStatus cross_entropy_fused_cuda(float* loss, float* row_losses, float* lse, void* dlogits,
                                      const void* logits, const int32_t* targets, float dloss,
                                      int64_t n, int64_t v, int64_t v_real, DType dtype,
                                      const CrossEntropyOptions& options, cudaStream_t stream) {
  const Args a =
      internal::fused_args(loss, row_losses, lse, dlogits, logits, targets, n, v, v_real, dtype, options);
  return run(Entry::kFused, a, dloss, stream);
}

KernelStatus vocab_shard_max_cuda(float* row_max, float* target_logit, const void* logits,
                                  const int32_t* targets, int64_t n, int64_t v, int64_t v_start,
                                  int64_t v_real, int32_t ignore_index, DType dtype,
                                  cudaStream_t stream) {
  return run(Entry::kShardMax,
             internal::shard_max_args(row_max, target_logit, logits, targets, n, v, v_start,
                                      v_real, ignore_index, dtype),
             0.0f, stream);
}

KernelStatus vocab_shard_sum_exp_cuda(float* row_sum, const void* logits, const float* row_max,
                                      int64_t n, int64_t v, int64_t v_start, int64_t v_real,
                                      DType dtype, cudaStream_t stream) {
  return run(Entry::kShardSumExp,
             internal::shard_sum_exp_args(row_sum, logits, row_max, n, v, v_start, v_real, dtype),
             0.0f, stream);
}

KernelStatus vocab_shard_backward_cuda(void* dlogits, const void* logits, const float* row_max,
                                       const float* row_sum, const int32_t* targets, float scale,
                                       int64_t n, int64_t v, int64_t v_start, int64_t v_real,
                                       int32_t ignore_index, DType dtype, cudaStream_t stream) {
  return run(Entry::kShardBackward,
             internal::shard_backward_args(dlogits, logits, row_max, row_sum, targets, n, v,
                                           v_start, v_real, ignore_index, dtype),
             scale, stream);
}

}  // namespace colossal::kernels::loss
