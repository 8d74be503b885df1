// Device code of kernels/layernorm: packed loads/stores, deterministic row
// reductions, and the forward, backward and finalize kernels. Included only by
// layernorm.cu, which chooses a configuration and launches them; the design is
// described at the top of that file.
#ifndef COLOSSAL_KERNELS_LAYERNORM_LAYERNORM_KERNELS_CUH_
#define COLOSSAL_KERNELS_LAYERNORM_LAYERNORM_KERNELS_CUH_

#include <cstdint>
#include <type_traits>

#include "kernels/common/cuda_utils.cuh"

namespace colossal::kernels::layernorm::device {

using cuda::from_math;
using cuda::to_math;

constexpr int kWarp = 32;
// Forward, one warp per row: 4 rows (warps) per block.
constexpr int kFwdWarpBlock = 128;
// Backward, one warp per row: 8 warps per block share one dgamma partial.
constexpr int kBwdWarpBlock = 256;
// One block per row: at most this many threads (a multiple of 32).
constexpr int kMaxRowBlock = 512;
// The looped kernels for rows too long for registers.
constexpr int kLoopBlock = 512;
// Finalize: 32 columns x 16 partial slices per block.
constexpr int kFinalizeCols = 32;
constexpr int kFinalizeSlices = 16;

// Unused pointers stay null (e.g. beta and mean for RMSNorm).
template <typename T>
struct ForwardParams {
  T* out = nullptr;
  float* mean = nullptr;      // may be null (and is for RMSNorm)
  float* rstd = nullptr;      // may be null
  T* residual_out = nullptr;  // fused residual only
  const T* x = nullptr;
  const T* residual = nullptr;  // fused residual only
  const T* gamma = nullptr;
  const T* beta = nullptr;  // LayerNorm only
  int64_t rows = 0;
  int64_t C = 0;
  float eps = 0.0f;
};

template <typename T>
struct BackwardParams {
  T* dx = nullptr;
  const T* dout = nullptr;
  const T* x = nullptr;
  const float* mean = nullptr;  // LayerNorm only
  const float* rstd = nullptr;
  const T* gamma = nullptr;
  float* scratch = nullptr;  // [partials][C] dgamma partials, then (LayerNorm) [partials][C] dbeta
  int64_t rows = 0;
  int64_t C = 0;
  const T* addend = nullptr;  // dx = addend + gradient when set (may be dx: read before written)
};

// ---- Packed elements --------------------------------------------------------
// kVec elements of T kept as they were loaded: a uint4 (one 16-byte load or
// store) when kVec * sizeof(T) == 16, else one scalar T (kVec == 1). Rows stay
// packed in registers and are widened to float on use, which halves the
// registers a float16/bfloat16 row needs.
template <typename T, int kVec>
using Raw = std::conditional_t<kVec == 1, T, uint4>;

template <typename T, int kVec>
__device__ __forceinline__ Raw<T, kVec> load_raw(const T* p) {
  static_assert(kVec == 1 || kVec * sizeof(T) == 16, "a pack is one element or 16 bytes");
  return *reinterpret_cast<const Raw<T, kVec>*>(p);
}

template <typename T, int kVec>
__device__ __forceinline__ void store_raw(T* p, const Raw<T, kVec>& r) {
  *reinterpret_cast<Raw<T, kVec>*>(p) = r;
}

template <typename T, int kVec>
__device__ __forceinline__ float elem(const Raw<T, kVec>& r, int k) {
  if constexpr (kVec == 1) {
    return to_math(r);
  } else {
    return to_math(reinterpret_cast<const T*>(&r)[k]);
  }
}

template <typename T, int kVec>
__device__ __forceinline__ Raw<T, kVec> pack(const float (&v)[kVec]) {
  Raw<T, kVec> r;
  T* e = reinterpret_cast<T*>(&r);
#pragma unroll
  for (int k = 0; k < kVec; ++k) e[k] = from_math<T>(v[k]);
  return r;
}

// ---- Deterministic reductions -----------------------------------------------
// Butterfly sum: every lane ends with the same bits (each step adds a pair of
// values in both orders, and float addition is commutative).
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Sum over the row's threads: the warp (kWarpPerRow) or the whole block
// (blockDim.x a multiple of 32, at most kMaxRowBlock). Every thread gets the
// same value; warps are added in index order. `smem` holds kMaxRowBlock / 32
// float2. All threads of the block must call it (block mode).
template <bool kWarpPerRow>
__device__ __forceinline__ float2 row_sum(float2 v, float2* smem) {
  v.x = warp_sum(v.x);
  v.y = warp_sum(v.y);
  if constexpr (kWarpPerRow) {
    return v;
  } else {
    const int warp = threadIdx.x / kWarp;
    if ((threadIdx.x % kWarp) == 0) smem[warp] = v;
    __syncthreads();
    float2 total = make_float2(0.0f, 0.0f);
    const int warps = blockDim.x / kWarp;
    for (int w = 0; w < warps; ++w) {
      total.x += smem[w].x;
      total.y += smem[w].y;
    }
    __syncthreads();  // smem is reused by the next call
    return total;
  }
}

// ---- Forward, row in registers ----------------------------------------------
// kWarpPerRow: each warp normalises its own rows (blockDim.x / 32 rows per
// block at a time, no block-wide barrier). Else one row per block. Each thread
// holds kItems packs: pack i of the row's thread t is vector i * threads + t,
// so every load instruction of a warp covers consecutive 16-byte chunks.
// The launcher guarantees C % kVec == 0, 16-byte aligned pointers when kVec > 1,
// and C / kVec <= kItems * (threads of a row).
template <typename T, bool kRms, bool kResidual, int kVec, int kItems, bool kWarpPerRow>
__global__ void __launch_bounds__(kWarpPerRow ? kFwdWarpBlock : kMaxRowBlock)
    forward_kernel(ForwardParams<T> p) {
  using R = Raw<T, kVec>;
  __shared__ float2 smem[kMaxRowBlock / kWarp];
  const int64_t nvec = p.C / kVec;
  const float inv_c = 1.0f / static_cast<float>(p.C);
  const int threads = kWarpPerRow ? kWarp : blockDim.x;
  const int t = kWarpPerRow ? threadIdx.x % kWarp : threadIdx.x;
  const int64_t rows_per_block = kWarpPerRow ? blockDim.x / kWarp : 1;
  const int64_t first =
      static_cast<int64_t>(blockIdx.x) * rows_per_block + (kWarpPerRow ? threadIdx.x / kWarp : 0);
  // gamma/beta are the same for every row a thread handles: with few packs
  // per thread, load them once up front (in flight with the first row) rather
  // than after the statistics, which would add a dependent round trip per row.
  constexpr bool kHoldParams = kItems <= 4;
  R hg[kHoldParams ? kItems : 1], hb[kHoldParams && !kRms ? kItems : 1];
  if constexpr (kHoldParams) {
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      const int64_t idx = static_cast<int64_t>(i) * threads + t;
      hg[i] = idx < nvec ? load_raw<T, kVec>(p.gamma + idx * kVec) : R{};
      if constexpr (!kRms) hb[i] = idx < nvec ? load_raw<T, kVec>(p.beta + idx * kVec) : R{};
    }
  }
  // In block mode every thread of a block sees the same row sequence, so the
  // barriers inside row_sum are reached uniformly.
  for (int64_t row = first; row < p.rows; row += static_cast<int64_t>(gridDim.x) * rows_per_block) {
    const int64_t base = row * p.C;
    R v[kItems];
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      const int64_t idx = static_cast<int64_t>(i) * threads + t;
      if (idx < nvec) {
        if constexpr (kResidual) {
          const R a = load_raw<T, kVec>(p.x + base + idx * kVec);
          const R b = load_raw<T, kVec>(p.residual + base + idx * kVec);
          float s[kVec];
#pragma unroll
          for (int k = 0; k < kVec; ++k) s[k] = elem<T, kVec>(a, k) + elem<T, kVec>(b, k);
          v[i] = pack<T, kVec>(s);
          store_raw<T, kVec>(p.residual_out + base + idx * kVec, v[i]);
        } else {
          v[i] = load_raw<T, kVec>(p.x + base + idx * kVec);
        }
      } else {
        v[i] = R{};
      }
    }
    // Two passes over the registers: the mean, then the centred sum of
    // squares (stable even when |mean| >> std, unlike E[x^2] - E[x]^2).
    float mean = 0.0f;
    if constexpr (!kRms) {
      float s = 0.0f;
#pragma unroll
      for (int i = 0; i < kItems; ++i) {
        if (static_cast<int64_t>(i) * threads + t < nvec) {
#pragma unroll
          for (int k = 0; k < kVec; ++k) s += elem<T, kVec>(v[i], k);
        }
      }
      mean = row_sum<kWarpPerRow>(make_float2(s, 0.0f), smem).x * inv_c;
    }
    float ss = 0.0f;
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      if (static_cast<int64_t>(i) * threads + t < nvec) {
#pragma unroll
        for (int k = 0; k < kVec; ++k) {
          const float d = elem<T, kVec>(v[i], k) - mean;
          ss += d * d;
        }
      }
    }
    const float var = row_sum<kWarpPerRow>(make_float2(ss, 0.0f), smem).x * inv_c;
    const float rstd = 1.0f / sqrtf(var + p.eps);
    if (t == 0) {
      if (!kRms && p.mean != nullptr) p.mean[row] = mean;
      if (p.rstd != nullptr) p.rstd[row] = rstd;
    }
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      const int64_t idx = static_cast<int64_t>(i) * threads + t;
      if (idx < nvec) {
        R g, b{};
        if constexpr (kHoldParams) {
          g = hg[i];
          if constexpr (!kRms) b = hb[i];
        } else {
          g = load_raw<T, kVec>(p.gamma + idx * kVec);
          if constexpr (!kRms) b = load_raw<T, kVec>(p.beta + idx * kVec);
        }
        float y[kVec];
#pragma unroll
        for (int k = 0; k < kVec; ++k) {
          const float n = (elem<T, kVec>(v[i], k) - mean) * rstd;
          y[k] = kRms ? n * elem<T, kVec>(g, k) : fmaf(n, elem<T, kVec>(g, k), elem<T, kVec>(b, k));
        }
        store_raw<T, kVec>(p.out + base + idx * kVec, pack<T, kVec>(y));
      }
    }
  }
}

// ---- Forward, rows too long for registers ------------------------------------
// One block per row, three passes over global memory (sum, centred squares,
// output; the later passes mostly hit L2). Scalar accesses: correctness for any
// C, not speed. Thread t always touches columns t, t + blockDim.x, ..., so it
// reads back exactly the residual_out elements it wrote itself.
template <typename T, bool kRms, bool kResidual>
__global__ void __launch_bounds__(kLoopBlock) forward_loop_kernel(ForwardParams<T> p) {
  __shared__ float2 smem[kMaxRowBlock / kWarp];
  const float inv_c = 1.0f / static_cast<float>(p.C);
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const int64_t base = row * p.C;
    const T* src = p.x + base;
    if constexpr (kResidual) {
      for (int64_t c = threadIdx.x; c < p.C; c += blockDim.x) {
        p.residual_out[base + c] =
            from_math<T>(to_math(p.x[base + c]) + to_math(p.residual[base + c]));
      }
      src = p.residual_out + base;
    }
    float mean = 0.0f;
    if constexpr (!kRms) {
      float s = 0.0f;
      for (int64_t c = threadIdx.x; c < p.C; c += blockDim.x) s += to_math(src[c]);
      mean = row_sum<false>(make_float2(s, 0.0f), smem).x * inv_c;
    }
    float ss = 0.0f;
    for (int64_t c = threadIdx.x; c < p.C; c += blockDim.x) {
      const float d = to_math(src[c]) - mean;
      ss += d * d;
    }
    const float var = row_sum<false>(make_float2(ss, 0.0f), smem).x * inv_c;
    const float rstd = 1.0f / sqrtf(var + p.eps);
    if (threadIdx.x == 0) {
      if (!kRms && p.mean != nullptr) p.mean[row] = mean;
      if (p.rstd != nullptr) p.rstd[row] = rstd;
    }
    for (int64_t c = threadIdx.x; c < p.C; c += blockDim.x) {
      const float n = (to_math(src[c]) - mean) * rstd;
      const float y =
          kRms ? n * to_math(p.gamma[c]) : fmaf(n, to_math(p.gamma[c]), to_math(p.beta[c]));
      p.out[base + c] = from_math<T>(y);
    }
  }
}

// ---- Backward, row in registers -----------------------------------------------
// Block b (of gridDim.x == partials) owns the contiguous rows
// [b * rows / P, (b + 1) * rows / P). Each thread always handles the same
// columns, so it sums dout * xhat and dout for them across its rows in
// registers; at the end the block's sums are written as one float32 partial
// row of scratch (warps of a block are first added in index order through
// shared memory). No atomics: finalize_kernel adds the partials in order.
// kMaxThreads bounds blockDim.x (it sets the register budget: 2 blocks of
// kBwdWarpBlock per SM in warp mode, so P = 256 blocks run in one wave).
template <typename T, bool kRms, int kVec, int kItems, bool kWarpPerRow, int kMaxThreads>
__global__ void __launch_bounds__(kMaxThreads, kWarpPerRow ? 2 : 1)
    backward_kernel(BackwardParams<T> p) {
  using R = Raw<T, kVec>;
  __shared__ float2 smem[kMaxRowBlock / kWarp];
  const int64_t nvec = p.C / kVec;
  const float inv_c = 1.0f / static_cast<float>(p.C);
  const int threads = kWarpPerRow ? kWarp : blockDim.x;
  const int t = kWarpPerRow ? threadIdx.x % kWarp : threadIdx.x;
  const int groups = kWarpPerRow ? blockDim.x / kWarp : 1;
  const int group = kWarpPerRow ? threadIdx.x / kWarp : 0;
  const int64_t partials = gridDim.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * p.rows / partials;
  const int64_t r1 = (static_cast<int64_t>(blockIdx.x) + 1) * p.rows / partials;

  // gamma is re-read (from L1) in each pass rather than held: the registers
  // go to the row and the running sums.
  float dg[kItems][kVec];
  float db[kRms ? 1 : kItems][kVec];
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      dg[i][k] = 0.0f;
      if constexpr (!kRms) db[i][k] = 0.0f;
    }
  }

  auto load_row = [&](int64_t row, R(&xv)[kItems], R(&dyv)[kItems]) {
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      const int64_t idx = static_cast<int64_t>(i) * threads + t;
      if (row < r1 && idx < nvec) {
        xv[i] = load_raw<T, kVec>(p.x + row * p.C + idx * kVec);
        dyv[i] = load_raw<T, kVec>(p.dout + row * p.C + idx * kVec);
      } else {
        xv[i] = R{};
        dyv[i] = R{};
      }
    }
  };
  // The next row's x and dout are loaded before this row is processed, so
  // each warp keeps two rows of loads in flight; skipped where the extra
  // registers would spill (16-bit rows of 4 packs per thread).
  constexpr bool kPrefetch = kItems * kVec <= 24;
  R xv[kItems], dyv[kItems];
  if constexpr (kPrefetch) load_row(r0 + group, xv, dyv);
  for (int64_t row = r0 + group; row < r1; row += groups) {
    const int64_t base = row * p.C;
    R xn[kPrefetch ? kItems : 1], dyn[kPrefetch ? kItems : 1];
    if constexpr (kPrefetch) {
      load_row(row + groups, xn, dyn);
    } else {
      load_row(row, xv, dyv);
    }
    const float m = kRms ? 0.0f : p.mean[row];
    const float rs = p.rstd[row];
    float s1 = 0.0f, s2 = 0.0f;  // sum(g), sum(g * xhat) with g = dout * gamma
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      const int64_t idx = static_cast<int64_t>(i) * threads + t;
      if (idx < nvec) {
        const R gam = load_raw<T, kVec>(p.gamma + idx * kVec);
#pragma unroll
        for (int k = 0; k < kVec; ++k) {
          const float xhat = (elem<T, kVec>(xv[i], k) - m) * rs;
          const float dy = elem<T, kVec>(dyv[i], k);
          const float g = dy * elem<T, kVec>(gam, k);
          s1 += g;
          s2 = fmaf(g, xhat, s2);
          dg[i][k] = fmaf(dy, xhat, dg[i][k]);
          if constexpr (!kRms) db[i][k] += dy;
        }
      }
    }
    const float2 sums = row_sum<kWarpPerRow>(make_float2(s1, s2), smem);
    const float m1 = kRms ? 0.0f : sums.x * inv_c;
    const float m2 = sums.y * inv_c;
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      const int64_t idx = static_cast<int64_t>(i) * threads + t;
      if (idx < nvec) {
        const R gam = load_raw<T, kVec>(p.gamma + idx * kVec);
        R old{};
        if (p.addend != nullptr) old = load_raw<T, kVec>(p.addend + base + idx * kVec);
        float d[kVec];
#pragma unroll
        for (int k = 0; k < kVec; ++k) {
          const float xhat = (elem<T, kVec>(xv[i], k) - m) * rs;
          const float g = elem<T, kVec>(dyv[i], k) * elem<T, kVec>(gam, k);
          d[k] = (g - m1 - xhat * m2) * rs;
          if (p.addend != nullptr) d[k] += elem<T, kVec>(old, k);
        }
        store_raw<T, kVec>(p.dx + base + idx * kVec, pack<T, kVec>(d));
      }
    }
    if constexpr (kPrefetch) {
#pragma unroll
      for (int i = 0; i < kItems; ++i) {
        xv[i] = xn[i];
        dyv[i] = dyn[i];
      }
    }
  }

  float* part_g = p.scratch + static_cast<int64_t>(blockIdx.x) * p.C;
  float* part_b = p.scratch + (partials + blockIdx.x) * p.C;
  if constexpr (kWarpPerRow) {
    // Warps hold sums for the same columns: add them in warp order in shared
    // memory (warp 0 stores, the others add, one warp at a time).
    constexpr int kCols = kItems * kWarp * kVec;
    __shared__ float acc[2][kCols];  // dgamma, dbeta sums
    for (int w = 0; w < groups; ++w) {
      if (group == w) {
#pragma unroll
        for (int i = 0; i < kItems; ++i) {
          const int64_t idx = static_cast<int64_t>(i) * threads + t;
          if (idx < nvec) {
#pragma unroll
            for (int k = 0; k < kVec; ++k) {
              const int col = static_cast<int>(idx) * kVec + k;
              acc[0][col] = (w == 0 ? 0.0f : acc[0][col]) + dg[i][k];
              if constexpr (!kRms) acc[1][col] = (w == 0 ? 0.0f : acc[1][col]) + db[i][k];
            }
          }
        }
      }
      __syncthreads();
    }
    for (int64_t c = threadIdx.x; c < p.C; c += blockDim.x) {
      part_g[c] = acc[0][c];
      if constexpr (!kRms) part_b[c] = acc[1][c];
    }
  } else {
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      const int64_t idx = static_cast<int64_t>(i) * threads + t;
      if (idx < nvec) {
#pragma unroll
        for (int k = 0; k < kVec; ++k) {
          part_g[idx * kVec + k] = dg[i][k];
          if constexpr (!kRms) part_b[idx * kVec + k] = db[i][k];
        }
      }
    }
  }
}

// ---- Backward, rows too long for registers -------------------------------------
// Same row ranges and scratch layout as backward_kernel; the block's partial
// row itself is the accumulator (thread t owns columns t, t + blockDim.x, ...,
// so no two threads touch one element). Scalar accesses, two passes per row.
template <typename T, bool kRms>
__global__ void __launch_bounds__(kLoopBlock) backward_loop_kernel(BackwardParams<T> p) {
  __shared__ float2 smem[kMaxRowBlock / kWarp];
  const float inv_c = 1.0f / static_cast<float>(p.C);
  const int64_t partials = gridDim.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * p.rows / partials;
  const int64_t r1 = (static_cast<int64_t>(blockIdx.x) + 1) * p.rows / partials;
  float* part_g = p.scratch + static_cast<int64_t>(blockIdx.x) * p.C;
  float* part_b = p.scratch + (partials + blockIdx.x) * p.C;
  for (int64_t c = threadIdx.x; c < p.C; c += blockDim.x) {
    part_g[c] = 0.0f;
    if constexpr (!kRms) part_b[c] = 0.0f;
  }
  for (int64_t row = r0; row < r1; ++row) {
    const int64_t base = row * p.C;
    const float m = kRms ? 0.0f : p.mean[row];
    const float rs = p.rstd[row];
    float s1 = 0.0f, s2 = 0.0f;
    for (int64_t c = threadIdx.x; c < p.C; c += blockDim.x) {
      const float xhat = (to_math(p.x[base + c]) - m) * rs;
      const float g = to_math(p.dout[base + c]) * to_math(p.gamma[c]);
      s1 += g;
      s2 = fmaf(g, xhat, s2);
    }
    const float2 sums = row_sum<false>(make_float2(s1, s2), smem);
    const float m1 = kRms ? 0.0f : sums.x * inv_c;
    const float m2 = sums.y * inv_c;
    for (int64_t c = threadIdx.x; c < p.C; c += blockDim.x) {
      const float xhat = (to_math(p.x[base + c]) - m) * rs;
      const float dy = to_math(p.dout[base + c]);
      const float g = dy * to_math(p.gamma[c]);
      float d = (g - m1 - xhat * m2) * rs;
      if (p.addend != nullptr) d += to_math(p.addend[base + c]);
      p.dx[base + c] = from_math<T>(d);
      part_g[c] = fmaf(dy, xhat, part_g[c]);
      if constexpr (!kRms) part_b[c] += dy;
    }
  }
}

// ---- Finalize: dgamma (+ dbeta) += sum of the partial rows, in order -------------
// Block (32 columns x 16 slices): slice y adds partials y, y + 16, ...; then
// thread y == 0 adds the 16 slice sums in order. Fixed order, so the result
// is the same on every run.
template <typename T>
__global__ void __launch_bounds__(kFinalizeCols* kFinalizeSlices)
    finalize_kernel(T* dgamma, T* dbeta, const float* scratch, int64_t partials, int64_t C) {
  __shared__ float sg[kFinalizeSlices][kFinalizeCols + 1];
  __shared__ float sb[kFinalizeSlices][kFinalizeCols + 1];
  const int tx = threadIdx.x % kFinalizeCols;
  const int ty = threadIdx.x / kFinalizeCols;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kFinalizeCols + tx;
  float a = 0.0f, b = 0.0f;
  if (c < C) {
    // Unrolled so several loads are in flight; the additions stay in order.
#pragma unroll 8
    for (int64_t q = ty; q < partials; q += kFinalizeSlices) {
      a += scratch[q * C + c];
      if (dbeta != nullptr) b += scratch[(partials + q) * C + c];
    }
  }
  sg[ty][tx] = a;
  sb[ty][tx] = b;
  __syncthreads();
  if (ty == 0 && c < C) {
    float ta = 0.0f, tb = 0.0f;
#pragma unroll
    for (int y = 0; y < kFinalizeSlices; ++y) {
      ta += sg[y][tx];
      tb += sb[y][tx];
    }
    dgamma[c] = from_math<T>(to_math(dgamma[c]) + ta);
    if (dbeta != nullptr) dbeta[c] = from_math<T>(to_math(dbeta[c]) + tb);
  }
}

}  // namespace colossal::kernels::layernorm::device

#endif  // COLOSSAL_KERNELS_LAYERNORM_LAYERNORM_KERNELS_CUH_
