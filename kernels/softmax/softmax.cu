// CUDA scaled masked / causal softmax, forward and backward. Memory-bound: every
// design choice is about reading each input once and writing each output once
// with wide, coalesced accesses.
//
// Three row shapes, chosen per call from sk (one row = one softmax):
//   * warp per row, sk <= 1024: each lane holds E <= 32 columns in registers
//     (E = the smallest power of two with 32 * E >= sk, a template bucket);
//     4 rows (warps) per 128-thread block; reductions are warp shuffles only.
//   * block per row in registers, 1024 < sk <= 16384: 2..32 warps share a row,
//     32 columns per thread in the forward, 16 in the backward; shuffles plus
//     one shared-memory exchange per reduction. The row is read once, written once.
//   * block per row, staged, sk > 16384 while the row fits shared memory (up
//     to ~116k columns of a 16-bit type, ~58k of float32 on an H100; the
//     backward keeps two rows, so half that): 512 threads copy the row's
//     included prefix once into dynamic shared memory with cp.async (the whole
//     row in flight, no registers), then make three passes over the copy (max,
//     sum of exp, write y). The row leaves DRAM once and the output is written
//     once; up to ~113 KiB of copy per block (57k bfloat16 columns), two blocks
//     share an SM, so one block's arithmetic overlaps the other's copy.
//   * block per row, streaming, rows longer than that: 512 threads sweep the row
//     with an online max/sum (Milakov & Gimelshein) and sweep it again from
//     global memory to write (any length; 1.5x / 1.67x the bytes).
// Loads and stores are kVec elements wide: 16 bytes when x/y/dy/dx are 16-byte
// aligned, sk is a multiple of 16 / sizeof(T) and the mask is aligned to that many
// bytes; 1 element (scalar) otherwise. The causal forward does not read x past
// the diagonal and the causal backward does not read dy/y there (those outputs
// are exactly 0), so a causal call moves about half the input bytes.
// All math is float32: exp(|scale|(s x - m)) as exp2f((s x - m) * |scale| log2 e);
// reductions are fmaxf / float sums in a fixed tree order (deterministic).
// Each thread issues all of its loads before it uses any loaded value, so a
// thread has its whole share of the row (or of a sweep step) in flight at once.
// The mask is applied once (the staged copy is rewritten to s*x, -inf where
// excluded, exact in T), so the later passes read neither x nor the mask.
// In-place calls are safe: no pointer is __restrict__, and every element is read
// by the thread that later writes it, before it writes it.
#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/common/cuda_utils.cuh"
#include "kernels/softmax/softmax.h"
#include "kernels/softmax/softmax_internal.h"

namespace colossal::kernels::softmax {
namespace {

using cuda::from_math;
using cuda::to_math;

constexpr float kLog2e = 1.4426950408889634f;
constexpr int64_t kMaxWarpCols = 1024;              // warp per row up to here
constexpr int64_t kMaxRegisterCols = 16384;         // block per row in registers up to here
constexpr int64_t kMaxCudaCols = int64_t{1} << 30;  // columns are indexed in int
constexpr int64_t kHeadMinorMaskBytes = int64_t{4} << 20;

struct ForwardArgs {
  void* y;
  const void* x;
  const uint8_t* mask;  // null: no mask
  int64_t rows, heads, sq, sk;
  bool causal;
  bool head_minor;   // visit rows in head_minor_row order
  float sign;        // +1 or -1: the sign of scale
  float exp2_scale;  // |scale| * log2(e)
};

struct BackwardArgs {
  void* dx;
  const void* dy;
  const void* y;
  int64_t rows, sq, sk;
  bool causal;
  float scale;
};

// An unsigned type of exactly kBytes bytes, for one wide load or store.
template <int kBytes>
struct RawVec;
template <>
struct RawVec<1> {
  using type = uint8_t;
};
template <>
struct RawVec<2> {
  using type = uint16_t;
};
template <>
struct RawVec<4> {
  using type = uint32_t;
};
template <>
struct RawVec<8> {
  using type = uint2;
};
template <>
struct RawVec<16> {
  using type = uint4;
};

// kVec consecutive elements starting at p (aligned to their total size).
template <typename T, int kVec>
struct Vec {
  using Raw = typename RawVec<kVec * sizeof(T)>::type;
  Raw raw;
  __device__ __forceinline__ void load(const T* p) { raw = *reinterpret_cast<const Raw*>(p); }
  __device__ __forceinline__ void store(T* p) const { *reinterpret_cast<Raw*>(p) = raw; }
  __device__ __forceinline__ T& operator[](int k) { return reinterpret_cast<T*>(&raw)[k]; }
  __device__ __forceinline__ const T& operator[](int k) const {
    return reinterpret_cast<const T*>(&raw)[k];
  }
};

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Row-wide max / sum over kWarps warps (one row per block when kWarps > 1).
// Every thread of the row gets the result. `scratch` holds 32 floats and must
// not be reused by another reduction of the same block.
template <int kWarps>
__device__ __forceinline__ float row_max(float v, float* scratch) {
  v = warp_max(v);
  if constexpr (kWarps > 1) {
    const int lane = threadIdx.x % 32;
    if (lane == 0) scratch[threadIdx.x / 32] = v;
    __syncthreads();
    v = warp_max(lane < kWarps ? scratch[lane] : -INFINITY);
  }
  return v;
}

template <int kWarps>
__device__ __forceinline__ float row_sum(float v, float* scratch) {
  v = warp_sum(v);
  if constexpr (kWarps > 1) {
    const int lane = threadIdx.x % 32;
    if (lane == 0) scratch[threadIdx.x / 32] = v;
    __syncthreads();
    v = warp_sum(lane < kWarps ? scratch[lane] : 0.0f);
  }
  return v;
}

// kNum vectors of kVec columns of x (and of the mask, when there is one), the
// vector u at column cols[u]; vectors at or past `limit` are not read. All loads
// are issued before any value is used, so they are in flight together.
template <typename T, int kVec, int kNum>
struct RawScores {
  Vec<T, kVec> x[kNum];
  Vec<uint8_t, kVec> mask[kNum];

  __device__ __forceinline__ void load(const T* xr, const uint8_t* mr, const int (&cols)[kNum],
                                       int limit) {
#pragma unroll
    for (int u = 0; u < kNum; ++u) {
      if (cols[u] < limit) x[u].load(xr + cols[u]);
    }
#pragma unroll
    for (int u = 0; u < kNum; ++u) {
      mask[u].raw = {};
      if (mr != nullptr && cols[u] < limit) mask[u].load(mr + cols[u]);
    }
  }

  // Vector u as scores s*x, -inf where the mask or the limit excludes a column.
  __device__ __forceinline__ void scores(float (&v)[kVec], int u, int col, int limit,
                                         float sign) const {
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const bool included = col + k < limit && mask[u][k] == 0;
      v[k] = included ? sign * to_math(x[u][k]) : -INFINITY;
    }
  }
};

// The row ([batch, heads, sq] flattened) that the slot-th unit of work of a
// masked forward handles when head_minor: slots run over (batch, i, head), so
// the heads that share a mask row run back to back and the mask leaves DRAM
// once, not once per head. Used when one batch's mask is at least
// kHeadMinorMaskBytes (at sq = sk = 4096 a head's rows span more bytes than L2
// holds: 16% faster in bf16 on an H100); smaller masks stay in L2 anyway and the
// natural order, which writes y sequentially, is 3% faster (sq = sk = 1024).
__device__ __forceinline__ int64_t head_minor_row(int64_t slot, int64_t heads, int64_t sq) {
  const int64_t per_batch = heads * sq;
  const int64_t b = slot / per_batch, r = slot % per_batch;
  return (b * heads + r % heads) * sq + r / heads;
}

// exp2((v - m) * c) for an included column, 0 for an excluded (-inf) one. The
// explicit test keeps scale == 0 (c == 0) from turning -inf * 0 into NaN.
__device__ __forceinline__ float exp_term(float v, float m, float c) {
  return v == -INFINITY ? 0.0f : exp2f((v - m) * c);
}

// ---------------------------------------------------------------------------
// Rows held in registers: kWarps warps per row, kIters vectors of kVec columns
// per thread; column of (it, t) = (it * threads_per_row + t) * kVec.

template <int kWarps>
constexpr int register_block_threads() {
  return kWarps == 1 ? 128 : 32 * kWarps;
}

template <typename T, int kVec, int kIters, int kWarps>
__global__ void __launch_bounds__(register_block_threads<kWarps>())
    forward_registers_kernel(ForwardArgs a) {
  constexpr int kRowThreads = 32 * kWarps;
  constexpr int kRowsPerBlock = register_block_threads<kWarps>() / kRowThreads;
  __shared__ float scratch_max[32], scratch_sum[32];
  const int t = threadIdx.x % kRowThreads;
  const int64_t slot = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kRowThreads;
  if (slot >= a.rows) return;  // whole warps only, and never when kWarps > 1 (grid == rows)
  const int64_t row = a.head_minor ? head_minor_row(slot, a.heads, a.sq) : slot;
  const int sk = static_cast<int>(a.sk);  // < 2^30, checked by the launcher
  const int limit = a.causal ? static_cast<int>(internal::causal_limit(row, a.sq, sk)) : sk;
  const T* x = static_cast<const T*>(a.x) + row * sk;
  T* y = static_cast<T*>(a.y) + row * sk;
  const uint8_t* mask = a.mask ? a.mask + internal::mask_row(row, a.heads, a.sq) * sk : nullptr;

  int cols[kIters];
#pragma unroll
  for (int it = 0; it < kIters; ++it) cols[it] = (it * kRowThreads + t) * kVec;
  float v[kIters][kVec];
  float m = -INFINITY;
  {
    RawScores<T, kVec, kIters> raw;
    raw.load(x, mask, cols, limit);  // limit <= sk; past the causal limit x is never read
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      raw.scores(v[it], it, cols[it], limit, a.sign);
#pragma unroll
      for (int k = 0; k < kVec; ++k) m = fmaxf(m, v[it][k]);
    }
  }
  m = row_max<kWarps>(m, scratch_max);

  float sum = 0.0f;
#pragma unroll
  for (int it = 0; it < kIters; ++it) {
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      v[it][k] = exp_term(v[it][k], m, a.exp2_scale);
      sum += v[it][k];
    }
  }
  sum = row_sum<kWarps>(sum, scratch_sum);
  const float inv = sum == 0.0f ? 0.0f : 1.0f / sum;  // 0: every column excluded

#pragma unroll
  for (int it = 0; it < kIters; ++it) {
    if (cols[it] < sk) {
      Vec<T, kVec> out;
#pragma unroll
      for (int k = 0; k < kVec; ++k) out[k] = from_math<T>(v[it][k] * inv);
      out.store(y + cols[it]);
    }
  }
}

template <typename T, int kVec, int kIters, int kWarps>
__global__ void __launch_bounds__(register_block_threads<kWarps>())
    backward_registers_kernel(BackwardArgs a) {
  constexpr int kRowThreads = 32 * kWarps;
  constexpr int kRowsPerBlock = register_block_threads<kWarps>() / kRowThreads;
  __shared__ float scratch[32];
  const int t = threadIdx.x % kRowThreads;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kRowThreads;
  if (row >= a.rows) return;
  const int sk = static_cast<int>(a.sk);  // < 2^30, checked by the launcher
  const int limit = a.causal ? static_cast<int>(internal::causal_limit(row, a.sq, sk)) : sk;
  const T* dy = static_cast<const T*>(a.dy) + row * sk;
  const T* y = static_cast<const T*>(a.y) + row * sk;
  T* dx = static_cast<T*>(a.dx) + row * sk;

  // g = dy, p = y; both 0 past the limit so they add nothing to the dot product.
  float g[kIters][kVec], p[kIters][kVec];
  float dot = 0.0f;
  {
    Vec<T, kVec> gv[kIters], pv[kIters];
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      const int col = (it * kRowThreads + t) * kVec;
      if (col < limit) {
        gv[it].load(dy + col);
        pv[it].load(y + col);
      }
    }
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      const int col = (it * kRowThreads + t) * kVec;
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        const bool included = col + k < limit;
        g[it][k] = included ? to_math(gv[it][k]) : 0.0f;
        p[it][k] = included ? to_math(pv[it][k]) : 0.0f;
        dot += g[it][k] * p[it][k];
      }
    }
  }
  dot = row_sum<kWarps>(dot, scratch);

#pragma unroll
  for (int it = 0; it < kIters; ++it) {
    const int col = (it * kRowThreads + t) * kVec;
    if (col < sk) {
      Vec<T, kVec> out;
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        out[k] = from_math<T>(col + k < limit ? a.scale * p[it][k] * (g[it][k] - dot) : 0.0f);
      }
      out.store(dx + col);
    }
  }
}

// ---------------------------------------------------------------------------
// Long rows (sk > kMaxRegisterCols): one kLongThreads-thread block per row.
// Thread t owns the vectors at columns t * kVec + i * kLongThreads * kVec in
// every pass of a kernel, so each thread only ever reads
// back shared memory it wrote itself (no barrier is needed between passes except
// the ones inside the row reductions).

constexpr int kLongThreads = 512;
constexpr int kLongWarps = kLongThreads / 32;
constexpr int kStreamUnroll = 4;  // vectors in flight per thread per streaming sweep step
constexpr int kMaskUnroll = 8;    // mask vectors in flight per thread in the staged max pass

__host__ __device__ constexpr int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

// Elements of one staged row of T in shared memory: sk rounded up to 16 bytes,
// so a second staged row placed after it stays 16-byte aligned.
template <typename T>
__host__ __device__ constexpr int64_t staged_len(int64_t sk) {
  return round_up(sk, int64_t{16 / sizeof(T)});
}

// kBytes (4, 8 or 16) from global to shared memory without a register round
// trip (cp.async, sm_80+): the copies are in flight together until
// copy_async_wait_all(), which also makes them visible to the issuing thread.
template <int kBytes>
__device__ __forceinline__ void copy_async(void* smem, const void* gmem) {
  static_assert(kBytes == 4 || kBytes == 8 || kBytes == 16, "cp.async copies 4, 8 or 16 bytes");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  if constexpr (kBytes == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(s), "l"(gmem), "n"(kBytes)
                 : "memory");
  }
#else
  using Raw = typename RawVec<kBytes>::type;
  *static_cast<Raw*>(smem) = *static_cast<const Raw*>(gmem);
#endif
}

// Asks L2 for the line holding p (no register written, nothing waited for).
__device__ __forceinline__ void prefetch_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p));
}

__device__ __forceinline__ void copy_async_wait_all() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}

// Starts copying the first n elements of a row (src, global) to dst (shared),
// thread t taking its own vectors. Vectors of 4+ bytes go through cp.async, all
// in flight at once; 2-byte scalars (unaligned float16/bfloat16 rows) through
// registers, 8 loads in flight per thread. Complete after copy_async_wait_all().
template <typename T, int kVec>
__device__ __forceinline__ void stage_row(T* dst, const T* src, int n, int t) {
  constexpr int kBytes = kVec * static_cast<int>(sizeof(T));
  constexpr int kStep = kLongThreads * kVec;
  if constexpr (kBytes >= 4) {
    for (int col = t * kVec; col < n; col += kStep) copy_async<kBytes>(dst + col, src + col);
  } else {
    static_assert(kVec == 1, "sub-4-byte vectors are single 16-bit elements");
    constexpr int kBatch = 8;
    for (int base = t; base < n; base += kBatch * kStep) {
      T v[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        if (base + u * kStep < n) v[u] = src[base + u * kStep];
      }
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        if (base + u * kStep < n) dst[base + u * kStep] = v[u];
      }
    }
  }
}

// exp2((v - m) * c) of a staged score. kChecked is exp_term (needed when c is 0
// or NaN, or m is -inf); otherwise, with c > 0 and m finite or +inf, the plain
// formula already gives exp_term's value, 0 for v == -inf included.
template <bool kChecked>
__device__ __forceinline__ float staged_exp(float v, float m, float c) {
  if constexpr (kChecked) {
    return exp_term(v, m, c);
  } else {
    return exp2f((v - m) * c);
  }
}

// Pass 1 of the staged forward over the thread's vectors wholly below `full`
// (limit rounded down to whole vectors): the max of the scores s*x, -inf where
// the mask excludes. When `rewrite` (a mask or a negative scale), the copy is
// rewritten to the scores themselves, exact in T. kMasked: mask vectors are
// loaded kMaskUnroll at a time, the first batch before waiting for the row's
// copy (so it overlaps it), the rest prefetched into L2 meanwhile.
template <typename T, int kVec, bool kMasked>
__device__ __forceinline__ float staged_max(T* row, const uint8_t* mask, int full, float sign,
                                            bool rewrite, int t) {
  constexpr int kStep = kLongThreads * kVec;
  constexpr int kUnroll = kMasked ? kMaskUnroll : 4;
  if constexpr (kMasked) {
    for (int col = t * kVec + kUnroll * kStep; col < full; col += kStep) prefetch_l2(mask + col);
  }
  float m = -INFINITY;
  for (int base = t * kVec; base < full; base += kUnroll * kStep) {
    Vec<uint8_t, kVec> mk[kUnroll];
    if constexpr (kMasked) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        mk[u].raw = {};
        if (base + u * kStep < full) mk[u].load(mask + base + u * kStep);
      }
    }
    copy_async_wait_all();
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int col = base + u * kStep;
      if (col >= full) break;
      Vec<T, kVec> v;
      v.load(row + col);
      float s[kVec];
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        s[k] = sign * to_math(v[k]);
        if constexpr (kMasked) {
          if (mk[u][k] != 0) s[k] = -INFINITY;
        }
        m = fmaxf(m, s[k]);
      }
      if (rewrite) {
#pragma unroll
        for (int k = 0; k < kVec; ++k) v[k] = from_math<T>(s[k]);
        v.store(row + col);
      }
    }
  }
  return m;
}

// Sum of exp over the thread's staged scores [0, limit). float keeps the exp in
// place (exactly the value the write pass would recompute), so the write pass
// of a float row is one multiply per column.
template <typename T, int kVec, bool kChecked>
__device__ __forceinline__ float staged_sum(T* row, int limit, float m, float c, int t) {
  constexpr int kStep = kLongThreads * kVec;
  constexpr bool kKeepExp = std::is_same_v<T, float>;
  float sum = 0.0f;
#pragma unroll 4
  for (int col = t * kVec; col < limit; col += kStep) {
    Vec<T, kVec> v;
    v.load(row + col);
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const float e = staged_exp<kChecked>(to_math(v[k]), m, c);
      sum += e;
      if constexpr (kKeepExp) v[k] = e;
    }
    if constexpr (kKeepExp) v.store(row + col);
  }
  return sum;
}

// y over [0, sk) from the staged row: exp * inv below the limit, 0 * inv past it
// (0, or NaN for a NaN row, like the register path).
template <typename T, int kVec, bool kChecked>
__device__ __forceinline__ void staged_write(T* y, const T* row, int limit, int sk, float m,
                                             float c, float inv, int t) {
  constexpr int kStep = kLongThreads * kVec;
  constexpr bool kKeepExp = std::is_same_v<T, float>;
#pragma unroll 4
  for (int col = t * kVec; col < sk; col += kStep) {
    Vec<T, kVec> out;
    if (col < limit) {
      Vec<T, kVec> v;
      v.load(row + col);
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        const float e = kKeepExp ? to_math(v[k]) : staged_exp<kChecked>(to_math(v[k]), m, c);
        out[k] = from_math<T>(e * inv);
      }
    } else {
#pragma unroll
      for (int k = 0; k < kVec; ++k) out[k] = from_math<T>(0.0f * inv);
    }
    out.store(y + col);
  }
}

// Staged forward: the row's included prefix [0, limit) of x is copied once into
// dynamic shared memory in T (cp.async, the whole row in flight), then three
// passes over shared memory: (1) max of the scores s*x, rewriting the copy into
// the scores themselves (sign flipped, -inf where the mask or the limit
// excludes) when there is a mask, a negative scale or a vector straddling the
// limit — exact in T; (2) sum of exp; (3) write y. Passes 2 and 3 thus test
// nothing per column but the vector's position against the limit. DRAM sees x once, y once (and
// the mask once). Dynamic shared memory: staged_len<T>(sk) elements.
template <typename T, int kVec>
__global__ void __launch_bounds__(kLongThreads, 2) forward_staged_kernel(ForwardArgs a) {
  extern __shared__ __align__(16) unsigned char long_smem[];
  T* row_s = reinterpret_cast<T*>(long_smem);
  __shared__ float scratch_max[32], scratch_sum[32];
  const int t = threadIdx.x;
  const int64_t row = a.head_minor ? head_minor_row(blockIdx.x, a.heads, a.sq) : blockIdx.x;
  const int sk = static_cast<int>(a.sk);  // < 2^30, checked by the launcher
  const int limit = a.causal ? static_cast<int>(internal::causal_limit(row, a.sq, sk)) : sk;
  const T* x = static_cast<const T*>(a.x) + row * sk;
  T* y = static_cast<T*>(a.y) + row * sk;
  const uint8_t* mask = a.mask ? a.mask + internal::mask_row(row, a.heads, a.sq) * sk : nullptr;
  const float c = a.exp2_scale;

  stage_row<T, kVec>(row_s, x, limit, t);  // limit <= sk; past the causal limit x is not read

  // Pass 1: max, and the copy rewritten to the scores where they differ from x.
  const int full = limit / kVec * kVec;
  float m = mask != nullptr ? staged_max<T, kVec, true>(row_s, mask, full, a.sign, true, t)
                            : staged_max<T, kVec, false>(row_s, nullptr, full, a.sign,
                                                         a.sign < 0.0f, t);
  if (full < limit && t == (full / kVec) % kLongThreads) {
    // The one vector straddling a causal limit, from its owner: columns past
    // the limit become -inf, so passes 2 and 3 need no per-column test.
    copy_async_wait_all();
    Vec<T, kVec> v;
    v.load(row_s + full);
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const bool included = full + k < limit && (mask == nullptr || mask[full + k] == 0);
      const float score = included ? a.sign * to_math(v[k]) : -INFINITY;
      m = fmaxf(m, score);
      v[k] = from_math<T>(score);
    }
    v.store(row_s + full);
  }
  m = row_max<kLongWarps>(m, scratch_max);

  // Passes 2 and 3, without exp_term's -inf test where it cannot matter.
  float sum, inv;
  if (c > 0.0f && m != -INFINITY) {
    sum = row_sum<kLongWarps>(staged_sum<T, kVec, false>(row_s, limit, m, c, t), scratch_sum);
    inv = sum == 0.0f ? 0.0f : 1.0f / sum;
    staged_write<T, kVec, false>(y, row_s, limit, sk, m, c, inv, t);
  } else {
    sum = row_sum<kLongWarps>(staged_sum<T, kVec, true>(row_s, limit, m, c, t), scratch_sum);
    inv = sum == 0.0f ? 0.0f : 1.0f / sum;  // 0: every column excluded
    staged_write<T, kVec, true>(y, row_s, limit, sk, m, c, inv, t);
  }
}

// Staged backward: dy and y over [0, limit) copied once into shared memory
// (staged_len<T>(sk) elements each), then dot(dy, y) and dx from the copies.
template <typename T, int kVec>
__global__ void __launch_bounds__(kLongThreads, 2) backward_staged_kernel(BackwardArgs a) {
  extern __shared__ __align__(16) unsigned char long_smem[];
  __shared__ float scratch[32];
  constexpr int kStep = kLongThreads * kVec;
  const int t = threadIdx.x;
  const int64_t row = blockIdx.x;
  const int sk = static_cast<int>(a.sk);  // < 2^30, checked by the launcher
  const int limit = a.causal ? static_cast<int>(internal::causal_limit(row, a.sq, sk)) : sk;
  const T* dy = static_cast<const T*>(a.dy) + row * sk;
  const T* y = static_cast<const T*>(a.y) + row * sk;
  T* dx = static_cast<T*>(a.dx) + row * sk;
  T* g_s = reinterpret_cast<T*>(long_smem);
  T* p_s = g_s + staged_len<T>(sk);

  stage_row<T, kVec>(g_s, dy, limit, t);
  stage_row<T, kVec>(p_s, y, limit, t);
  copy_async_wait_all();

  float dot = 0.0f;
#pragma unroll 4
  for (int col = t * kVec; col < limit; col += kStep) {
    Vec<T, kVec> gv, pv;
    gv.load(g_s + col);
    pv.load(p_s + col);
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      if (col + k < limit) dot += to_math(gv[k]) * to_math(pv[k]);
    }
  }
  dot = row_sum<kLongWarps>(dot, scratch);

#pragma unroll 4
  for (int col = t * kVec; col < sk; col += kStep) {
    Vec<T, kVec> out;
    if (col < limit) {
      Vec<T, kVec> gv, pv;
      gv.load(g_s + col);
      pv.load(p_s + col);
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        const bool included = col + k < limit;
        out[k] = from_math<T>(included ? a.scale * to_math(pv[k]) * (to_math(gv[k]) - dot) : 0.0f);
      }
    } else {
#pragma unroll
      for (int k = 0; k < kVec; ++k) out[k] = from_math<T>(0.0f);
    }
    out.store(dx + col);
  }
}

// Streaming fallback for rows too long for shared memory: a sweep with an online
// max/sum (Milakov & Gimelshein), then a second sweep that re-reads x (and the
// mask) from global memory to write y — 1.5x the bytes of the staged kernel.
// Each sweep step covers kStreamUnroll * kLongThreads * kVec columns.

template <int kVec>
constexpr int stream_step() {
  return kStreamUnroll * kLongThreads * kVec;
}

// (m, s) summarises a set of scores: max m and sum of exp2((v - m) * c). s == 0
// means an empty set (or all excluded); a NaN in s is kept.
__device__ __forceinline__ void combine(float& m, float& s, float m2, float s2, float c) {
  const float nm = fmaxf(m, m2);
  const float a = s == 0.0f ? 0.0f : s * exp2f((m - nm) * c);
  const float b = s2 == 0.0f ? 0.0f : s2 * exp2f((m2 - nm) * c);
  m = nm;
  s = a + b;
}

template <typename T, int kVec>
__global__ void __launch_bounds__(kLongThreads, 2) forward_streaming_kernel(ForwardArgs a) {
  __shared__ float scratch_m[32], scratch_s[32];
  constexpr int kStep = kLongThreads * kVec;
  const int t = threadIdx.x;
  const int64_t row = a.head_minor ? head_minor_row(blockIdx.x, a.heads, a.sq) : blockIdx.x;
  const int sk = static_cast<int>(a.sk);  // < 2^30, checked by the launcher
  const int limit = a.causal ? static_cast<int>(internal::causal_limit(row, a.sq, sk)) : sk;
  const T* x = static_cast<const T*>(a.x) + row * sk;
  T* y = static_cast<T*>(a.y) + row * sk;
  const uint8_t* mask = a.mask ? a.mask + internal::mask_row(row, a.heads, a.sq) * sk : nullptr;
  const float c = a.exp2_scale;

  float m = -INFINITY, s = 0.0f;
  for (int step = 0; step < limit; step += stream_step<kVec>()) {
    int cols[kStreamUnroll];
#pragma unroll
    for (int u = 0; u < kStreamUnroll; ++u) cols[u] = step + u * kStep + t * kVec;
    RawScores<T, kVec, kStreamUnroll> raw;
    raw.load(x, mask, cols, limit);
    float v[kStreamUnroll][kVec];
    float chunk_max = -INFINITY;
#pragma unroll
    for (int u = 0; u < kStreamUnroll; ++u) {
      raw.scores(v[u], u, cols[u], limit, a.sign);
#pragma unroll
      for (int k = 0; k < kVec; ++k) chunk_max = fmaxf(chunk_max, v[u][k]);
    }
    const float nm = fmaxf(m, chunk_max);
    s = s == 0.0f ? 0.0f : s * exp2f((m - nm) * c);
#pragma unroll
    for (int u = 0; u < kStreamUnroll; ++u) {
#pragma unroll
      for (int k = 0; k < kVec; ++k) s += exp_term(v[u][k], nm, c);
    }
    m = nm;
  }

  // Row-wide (m, s): shuffles, then one exchange through shared memory.
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, offset);
    const float s2 = __shfl_xor_sync(0xffffffffu, s, offset);
    combine(m, s, m2, s2, c);
  }
  const int lane = t % 32;
  if (lane == 0) {
    scratch_m[t / 32] = m;
    scratch_s[t / 32] = s;
  }
  __syncthreads();
  m = lane < kLongWarps ? scratch_m[lane] : -INFINITY;
  s = lane < kLongWarps ? scratch_s[lane] : 0.0f;
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, offset);
    const float s2 = __shfl_xor_sync(0xffffffffu, s, offset);
    combine(m, s, m2, s2, c);
  }
  const float inv = s == 0.0f ? 0.0f : 1.0f / s;

  for (int step = 0; step < sk; step += stream_step<kVec>()) {
    int cols[kStreamUnroll];
#pragma unroll
    for (int u = 0; u < kStreamUnroll; ++u) cols[u] = step + u * kStep + t * kVec;
    float v[kStreamUnroll][kVec];
    RawScores<T, kVec, kStreamUnroll> raw;
    raw.load(x, mask, cols, limit);
#pragma unroll
    for (int u = 0; u < kStreamUnroll; ++u) raw.scores(v[u], u, cols[u], limit, a.sign);
#pragma unroll
    for (int u = 0; u < kStreamUnroll; ++u) {
      if (cols[u] < sk) {
        Vec<T, kVec> out;
#pragma unroll
        for (int k = 0; k < kVec; ++k) out[k] = from_math<T>(exp_term(v[u][k], m, c) * inv);
        out.store(y + cols[u]);
      }
    }
  }
}

template <typename T, int kVec>
__global__ void __launch_bounds__(kLongThreads, 2) backward_streaming_kernel(BackwardArgs a) {
  __shared__ float scratch[32];
  constexpr int kStep = kLongThreads * kVec;
  const int t = threadIdx.x;
  const int64_t row = blockIdx.x;
  const int sk = static_cast<int>(a.sk);  // < 2^30, checked by the launcher
  const int limit = a.causal ? static_cast<int>(internal::causal_limit(row, a.sq, sk)) : sk;
  const T* dy = static_cast<const T*>(a.dy) + row * sk;
  const T* y = static_cast<const T*>(a.y) + row * sk;
  T* dx = static_cast<T*>(a.dx) + row * sk;

  float dot = 0.0f;
  for (int step = 0; step < limit; step += stream_step<kVec>()) {
    Vec<T, kVec> gv[kStreamUnroll], pv[kStreamUnroll];
#pragma unroll
    for (int u = 0; u < kStreamUnroll; ++u) {
      const int col = step + u * kStep + t * kVec;
      if (col < limit) {
        gv[u].load(dy + col);
        pv[u].load(y + col);
      }
    }
#pragma unroll
    for (int u = 0; u < kStreamUnroll; ++u) {
      const int col = step + u * kStep + t * kVec;
      if (col >= limit) continue;
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        if (col + k < limit) dot += to_math(gv[u][k]) * to_math(pv[u][k]);
      }
    }
  }
  dot = row_sum<kLongWarps>(dot, scratch);

  for (int step = 0; step < sk; step += stream_step<kVec>()) {
    int cols[kStreamUnroll];
#pragma unroll
    for (int u = 0; u < kStreamUnroll; ++u) cols[u] = step + u * kStep + t * kVec;
    Vec<T, kVec> gv[kStreamUnroll], pv[kStreamUnroll];
#pragma unroll
    for (int u = 0; u < kStreamUnroll; ++u) {
      if (cols[u] >= limit) continue;
      gv[u].load(dy + cols[u]);
      pv[u].load(y + cols[u]);
    }
#pragma unroll
    for (int u = 0; u < kStreamUnroll; ++u) {
      if (cols[u] >= sk) continue;
      Vec<T, kVec> out;
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        const bool included = cols[u] + k < limit;
        const float d = included ? a.scale * to_math(pv[u][k]) * (to_math(gv[u][k]) - dot) : 0.0f;
        out[k] = from_math<T>(d);
      }
      out.store(dx + cols[u]);
    }
  }
}

// ---------------------------------------------------------------------------
// Host side: pick the path and the template bucket, launch, report.

template <int N>
using IntC = std::integral_constant<int, N>;

bool aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// Calls f(kVec, kIters, kWarps) for the register bucket that holds sk columns:
// E columns per thread, as kIters vectors of kVec = min(kMaxVec, E) (1 if !vec).
template <int kMaxVec, int E, int kWarps, typename F>
KernelStatus with_vec(bool vec, F&& f) {
  constexpr int kVec = kMaxVec < E ? kMaxVec : E;
  if (vec) return f(IntC<kVec>{}, IntC<E / kVec>{}, IntC<kWarps>{});
  return f(IntC<1>{}, IntC<E>{}, IntC<kWarps>{});
}

// kBlockE is the columns per thread past kMaxWarpCols (block per row): the
// forward keeps 32 (more loads in flight per thread, fewer threads to sync), the
// backward, which holds two values per column, 16.
template <int kMaxVec, int kBlockE, typename F>
KernelStatus with_register_shape(int64_t sk, bool vec, F&& f) {
  if (sk <= 32) return with_vec<kMaxVec, 1, 1>(vec, f);
  if (sk <= 64) return with_vec<kMaxVec, 2, 1>(vec, f);
  if (sk <= 128) return with_vec<kMaxVec, 4, 1>(vec, f);
  if (sk <= 256) return with_vec<kMaxVec, 8, 1>(vec, f);
  if (sk <= 512) return with_vec<kMaxVec, 16, 1>(vec, f);
  if (sk <= kMaxWarpCols) return with_vec<kMaxVec, 32, 1>(vec, f);
  if (sk <= 2048) return with_vec<kMaxVec, kBlockE, 2048 / 32 / kBlockE>(vec, f);
  if (sk <= 4096) return with_vec<kMaxVec, kBlockE, 4096 / 32 / kBlockE>(vec, f);
  if (sk <= 8192) return with_vec<kMaxVec, kBlockE, 8192 / 32 / kBlockE>(vec, f);
  return with_vec<kMaxVec, kBlockE, 16384 / 32 / kBlockE>(vec, f);  // sk <= kMaxRegisterCols
}

// The current device and the most dynamic shared memory a block may opt into
// there, less room for the kernels' static reduction scratch (limit 0: unknown).
struct DeviceSmem {
  int device = -1;
  int64_t limit = 0;
};

DeviceSmem device_smem() {
  DeviceSmem d;
  int bytes = 0;
  if (cudaGetDevice(&d.device) != cudaSuccess ||
      cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, d.device) !=
          cudaSuccess) {
    return DeviceSmem{};
  }
  d.limit = std::max<int64_t>(0, int64_t{bytes} - 1024);
  return d;
}

// Devices (by id) whose attributes launch_long_rows has set for one kernel.
constexpr int kMaxCachedDevices = 64;
using ConfiguredDevices = std::atomic<bool>[kMaxCachedDevices];

// Launches a long-row kernel, one block per row, with `smem` bytes of dynamic
// shared memory. Past the default 48 KiB, the first launch of the kernel on a
// device raises its limit to the device's whole opt-in size (always the same
// value, so racing threads agree) and asks for the largest shared-memory
// carveout, so two blocks of up to ~113 KiB each share an SM (sm_90: 228 KiB
// per SM, 1 KiB of it reserved per block).
template <typename Args>
KernelStatus launch_long_rows(void (*kernel)(Args), ConfiguredDevices* configured, const Args& a,
                              int64_t smem, const DeviceSmem& d, cudaStream_t stream) {
  if (a.rows > INT_MAX) return KernelStatus::invalid_argument("softmax cuda: too many rows");
  std::atomic<bool>* done = nullptr;
  bool skipped = false;  // the attributes were taken as set by an earlier launch
  if (smem > 48 * 1024) {
    if (configured != nullptr && d.device >= 0 && d.device < kMaxCachedDevices) {
      done = &(*configured)[d.device];
    }
    skipped = done != nullptr && done->load(std::memory_order_acquire);
    if (!skipped) {
      KernelStatus s = cuda::to_status(cudaFuncSetAttribute(
          kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(d.limit)));
      if (!s.ok()) return s;
      s = cuda::to_status(cudaFuncSetAttribute(
          kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared));
      if (!s.ok()) return s;
      if (done != nullptr) done->store(true, std::memory_order_release);
    }
  }
  kernel<<<static_cast<unsigned>(a.rows), kLongThreads, smem, stream>>>(a);
  KernelStatus s = cuda::last_launch_status();
  if (!s.ok() && skipped) {
    // The context may have been reset since: set the attributes again and retry once.
    done->store(false, std::memory_order_release);
    return launch_long_rows(kernel, configured, a, smem, d, stream);
  }
  return s;
}

template <int kWarps>
KernelStatus register_grid(int64_t rows, unsigned* blocks) {
  constexpr int64_t kRowsPerBlock = register_block_threads<kWarps>() / (32 * kWarps);
  const int64_t n = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  if (n > INT_MAX) return KernelStatus::invalid_argument("softmax cuda: too many rows");
  *blocks = static_cast<unsigned>(n);
  return KernelStatus();
}

// The kernels of one direction for element type T, for launch_typed.
// kBlockE: columns per thread of the block-per-row register bucket (the
// forward keeps 32: more loads in flight per thread, fewer threads to sync; the
// backward, which holds two values per column, 16). kStagedRows: rows of T a
// staged block keeps in shared memory (x; or dy and y).
template <typename T_>
struct ForwardKernels {
  using T = T_;
  using Args = ForwardArgs;
  static constexpr int kBlockE = 32, kStagedRows = 1;
  template <int kVec, int kIters, int kWarps>
  static auto registers() {
    return forward_registers_kernel<T, kVec, kIters, kWarps>;
  }
  template <int kVec>
  static auto staged() {
    return forward_staged_kernel<T, kVec>;
  }
  template <int kVec>
  static auto streaming() {
    return forward_streaming_kernel<T, kVec>;
  }
};

template <typename T_>
struct BackwardKernels {
  using T = T_;
  using Args = BackwardArgs;
  static constexpr int kBlockE = 16, kStagedRows = 2;
  template <int kVec, int kIters, int kWarps>
  static auto registers() {
    return backward_registers_kernel<T, kVec, kIters, kWarps>;
  }
  template <int kVec>
  static auto staged() {
    return backward_staged_kernel<T, kVec>;
  }
  template <int kVec>
  static auto streaming() {
    return backward_streaming_kernel<T, kVec>;
  }
};

// Picks the row shape for sk and launches: registers up to kMaxRegisterCols,
// then staged in shared memory while the staged rows fit the device's opt-in
// shared memory, streamed past that. vec: 16-byte accesses are possible.
template <typename K>
KernelStatus launch_typed(const typename K::Args& a, bool vec, cudaStream_t stream) {
  using T = typename K::T;
  constexpr int kMaxVec = 16 / sizeof(T);
  if (a.sk <= kMaxRegisterCols) {
    return with_register_shape<kMaxVec, K::kBlockE>(
        a.sk, vec, [&](auto vec_c, auto iters_c, auto warps_c) {
          constexpr int kVec = decltype(vec_c)::value, kIters = decltype(iters_c)::value;
          constexpr int kWarps = decltype(warps_c)::value;
          unsigned blocks = 0;
          const KernelStatus s = register_grid<kWarps>(a.rows, &blocks);
          if (!s.ok()) return s;
          const auto kernel = K::template registers<kVec, kIters, kWarps>();
          kernel<<<blocks, register_block_threads<kWarps>(), 0, stream>>>(a);
          return cuda::last_launch_status();
        });
  }
  auto long_rows = [&](auto vec_c) {
    constexpr int kVec = decltype(vec_c)::value;
    const int64_t smem = K::kStagedRows * staged_len<T>(a.sk) * int64_t{sizeof(T)};
    const DeviceSmem d = device_smem();
    if (smem <= d.limit) {
      static ConfiguredDevices configured;  // one per staged kernel instantiation
      return launch_long_rows(K::template staged<kVec>(), &configured, a, smem, d, stream);
    }
    return launch_long_rows(K::template streaming<kVec>(), nullptr, a, 0, d, stream);
  };
  return vec ? long_rows(IntC<kMaxVec>{}) : long_rows(IntC<1>{});
}

template <typename T>
KernelStatus forward_typed(const ForwardArgs& a, cudaStream_t stream) {
  constexpr int kMaxVec = 16 / sizeof(T);
  const bool vec = aligned(a.x, 16) && aligned(a.y, 16) && a.sk % kMaxVec == 0 &&
                   (a.mask == nullptr || aligned(a.mask, kMaxVec));
  return launch_typed<ForwardKernels<T>>(a, vec, stream);
}

template <typename T>
KernelStatus backward_typed(const BackwardArgs& a, cudaStream_t stream) {
  constexpr int kMaxVec = 16 / sizeof(T);
  const bool vec =
      aligned(a.dx, 16) && aligned(a.dy, 16) && aligned(a.y, 16) && a.sk % kMaxVec == 0;
  return launch_typed<BackwardKernels<T>>(a, vec, stream);
}

KernelStatus forward(const ForwardArgs& a, DType dtype, size_t mask_bytes, cudaStream_t stream) {
  const size_t bytes = static_cast<size_t>(a.rows * a.sk) * dtype_size(dtype);
  KernelStatus s = internal::check_forward_buffers(a.y, a.x, a.mask, bytes, mask_bytes);
  if (!s.ok()) return s;
  if (a.sk > kMaxCudaCols) return KernelStatus::invalid_argument("softmax cuda: sk above 2^30");
  return cuda::dispatch_float_types(
      dtype, [&](auto tag) { return forward_typed<decltype(tag)>(a, stream); });
}

KernelStatus backward(const BackwardArgs& a, DType dtype, cudaStream_t stream) {
  const size_t bytes = static_cast<size_t>(a.rows * a.sk) * dtype_size(dtype);
  KernelStatus s = internal::check_backward_buffers(a.dx, a.dy, a.y, bytes);
  if (!s.ok()) return s;
  if (a.sk > kMaxCudaCols) return KernelStatus::invalid_argument("softmax cuda: sk above 2^30");
  return cuda::dispatch_float_types(
      dtype, [&](auto tag) { return backward_typed<decltype(tag)>(a, stream); });
}

bool cuda_dtype(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16;
}

ForwardArgs forward_args(void* y, const void* x, const uint8_t* mask, int64_t rows, int64_t heads,
                         int64_t sq, int64_t sk, bool causal, float scale) {
  const bool head_minor = mask != nullptr && heads > 1 && sq * sk >= kHeadMinorMaskBytes;
  return ForwardArgs{y,
                     x,
                     mask,
                     rows,
                     heads,
                     sq,
                     sk,
                     causal,
                     head_minor,
                     scale < 0 ? -1.0f : 1.0f,
                     std::fabs(scale) * kLog2e};
}

}  // namespace

KernelStatus scaled_masked_softmax_forward_cuda(void* y, const void* x, const uint8_t* mask,
                                                int64_t batch, int64_t heads, int64_t sq,
                                                int64_t sk, DType dtype, float scale,
                                                cudaStream_t stream) {
  int64_t rows = 0;
  KernelStatus s = internal::count_rows({batch, heads, sq}, sk, &rows);
  if (!s.ok()) return s;
  if (!cuda_dtype(dtype)) {
    return KernelStatus::unsupported("softmax cuda: dtype must be float32, float16 or bfloat16");
  }
  if (rows == 0 || sk == 0) return KernelStatus();
  const size_t mask_bytes = mask ? static_cast<size_t>(batch * sq * sk) : 0;
  return forward(forward_args(y, x, mask, rows, heads, sq, sk, false, scale), dtype, mask_bytes,
                 stream);
}

KernelStatus scaled_masked_softmax_backward_cuda(void* dx, const void* dy, const void* y,
                                                 int64_t batch, int64_t heads, int64_t sq,
                                                 int64_t sk, DType dtype, float scale,
                                                 cudaStream_t stream) {
  int64_t rows = 0;
  KernelStatus s = internal::count_rows({batch, heads, sq}, sk, &rows);
  if (!s.ok()) return s;
  if (!cuda_dtype(dtype)) {
    return KernelStatus::unsupported("softmax cuda: dtype must be float32, float16 or bfloat16");
  }
  if (rows == 0 || sk == 0) return KernelStatus();
  return backward(BackwardArgs{dx, dy, y, rows, sq, sk, false, scale}, dtype, stream);
}

KernelStatus scaled_causal_softmax_forward_cuda(void* y, const void* x, int64_t batches, int64_t sq,
                                                int64_t sk, DType dtype, float scale,
                                                cudaStream_t stream) {
  int64_t rows = 0;
  KernelStatus s = internal::count_rows({batches, sq}, sk, &rows);
  if (!s.ok()) return s;
  if (!cuda_dtype(dtype)) {
    return KernelStatus::unsupported("softmax cuda: dtype must be float32, float16 or bfloat16");
  }
  if (rows == 0 || sk == 0) return KernelStatus();
  return forward(forward_args(y, x, nullptr, rows, 1, sq, sk, true, scale), dtype, 0, stream);
}

KernelStatus scaled_causal_softmax_backward_cuda(void* dx, const void* dy, const void* y,
                                                 int64_t batches, int64_t sq, int64_t sk,
                                                 DType dtype, float scale, cudaStream_t stream) {
  int64_t rows = 0;
  KernelStatus s = internal::count_rows({batches, sq}, sk, &rows);
  if (!s.ok()) return s;
  if (!cuda_dtype(dtype)) {
    return KernelStatus::unsupported("softmax cuda: dtype must be float32, float16 or bfloat16");
  }
  if (rows == 0 || sk == 0) return KernelStatus();
  return backward(BackwardArgs{dx, dy, y, rows, sq, sk, true, scale}, dtype, stream);
}

}  // namespace colossal::kernels::softmax
