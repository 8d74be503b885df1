// CUDA GELU, bias + GELU and SwiGLU. All of it is memory-bound (a few dozen flops per
// 2-3 elements moved), so the design is about bytes and requests in flight:
//
// * Every element is read once and written once: one pass, 16-byte vector
//   loads/stores ("packs" of 16 / sizeof(T) elements) when all pointers are
//   16-byte aligned (and cols is a multiple of the pack for the bias forms),
//   otherwise the same kernels with one-element packs. Each thread issues all
//   its loads (4-8 rows of packs) before any math, so 8-16 16-byte requests
//   are in flight per thread.
// * gelu, swiglu (forward and backward) and bias_gelu forward: flat (or [row-chunk, column])
//   grids sized from the data; the bias pack stays in registers for a thread's
//   rows, so the fusion costs no extra traffic.
// * bias_gelu backward: stage 1 — a block of 32 x 16 threads owns 32 column
//   packs and a chunk of 64 rows; each thread keeps float32 column sums of its
//   4 rows while it writes dx, the block sums its 16 row-lanes in fixed order
//   into one float32 partial row of the scratch. Stage 2 — per column, 8 lanes
//   sum strided partial rows in order, then lane 0 adds the 8 lane sums in
//   order to dbias (read, add in float32, round once). No atomics anywhere and
//   the grid depends only on (rows, cols): bit-identical results run to run.
//   The scratch is 4 * ceil(rows / 64) * cols bytes (1.5 MiB at 8192 x 3072),
//   under 2% of the traffic of stage 1.
// * Math in float32: gelu(x) = x * sigmoid(2u) with exp and the reciprocal on
//   the SFU (ex2.approx, rcp.approx: ~1e-6 relative overall for |x| <= 6), about
//   16 instructions per element for the gradient, so bfloat16 (8 elements per
//   16-byte pack) stays memory-bound. The exp argument is clamped at 80 so
//   nothing overflows, and the gradient is defined as 0 beyond the clamp
//   (where it is below 1e-34).
// * SwiGLU: one flat map of 2 inputs -> 1 output (forward) or 3 -> 2
//   (backward: dgate and dup in the same pass). The sigmoid is taken from
//   e = exp(-|x|) (ex2.approx) and r = 1 / (1 + e) (rcp.approx): sigmoid(x) and
//   1 - sigmoid(x) are r and e * r in the order of x's sign, so nothing
//   overflows or cancels for large |x|.
//
// Measured on an H100 at 8192 x 3072 (float32 / bfloat16), against PyTorch 2.11
// (tools/bench/torch_activation.py): gelu forward 77 / 41 us (PyTorch 78 / 42),
// gelu backward 106 / 57 us (113 / 60), bias_gelu forward 78 / 43 us (166 /
// 110), bias_gelu backward with dbias 115 / 66 us (188 / 118). Plain GELU is at
// the copy-bandwidth ceiling for both; the fused forms save PyTorch's extra passes.
#include <cstdint>

#include "kernels/activation/activation.h"
#include "kernels/activation/activation_layout.h"
#include "kernels/common/cuda_utils.cuh"

namespace colossal::kernels::activation {
namespace {

using cuda::from_math;
using cuda::to_math;

constexpr float kS = static_cast<float>(internal::kSqrt2OverPi);
constexpr float kC = static_cast<float>(internal::kCubic);
constexpr float kLog2e = 1.4426950408889634f;
// exp(-2u) = 2^(a * kExpScale), a = x + 0.044715 x^3; the exponent is clamped
// at 80 (in natural-log units) so 1 + e stays far from float overflow.
constexpr float kExpScale = -2.0f * kS * kLog2e;
constexpr float kExpClamp2 = 80.0f * kLog2e;

// 2^v on the SFU (ex2.approx: relative error ~2^-22, subnormal results flush to 0).
__device__ __forceinline__ float ex2_approx(float v) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(v));
  return r;
}

// 1/v on the SFU (rcp.approx: ~1 ulp), instead of the IEEE-rounded __frcp_rn
// whose correction steps cost ~8 more instructions per element.
__device__ __forceinline__ float rcp_approx(float v) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(v));
  return r;
}

// gelu(x) = x * s, s = sigmoid(2u) = 1 / (1 + exp(-2u)).
__device__ __forceinline__ float gelu_f(float x) {
  const float a = x * fmaf(kC * x, x, 1.0f);
  const float e = ex2_approx(fminf(a * kExpScale, kExpClamp2));
  return x * rcp_approx(1.0f + e);
}

// gelu'(x) = s + 2 x s (1 - s) u', u' = sqrt(2/pi) (1 + 3 * 0.044715 x^2),
// with 1 - s = e * s (no cancellation as s -> 1); 0 beyond the clamp, where the
// true value is below 1e-34 (and x^2 may overflow).
__device__ __forceinline__ float gelu_grad_f(float x) {
  const float x2 = x * x;
  const float z = x * fmaf(kC, x2, 1.0f) * kExpScale;
  const float e = ex2_approx(fminf(z, kExpClamp2));
  const float s = rcp_approx(1.0f + e);
  const float du2 = fmaf(6.0f * kC * kS, x2, 2.0f * kS);  // 2 u'
  const float g = fmaf(x * s * (e * s), du2, s);
  return z > kExpClamp2 ? 0.0f : g;
}

// sigmoid(x) and sigmoid(-x) (= 1 - sigmoid(x), without its cancellation) from
// e = exp(-|x|) in [0, 1] and r = 1 / (1 + e): r is the sigmoid of |x|, e * r
// that of -|x|. Nothing overflows for any x; for |x| > 87 e flushes to 0 and
// the small one is 0 (its true value is below 1e-38).
__device__ __forceinline__ void sigmoid_pair_f(float x, float* s, float* sm) {
  const float e = ex2_approx(-fabsf(x) * kLog2e);
  const float r = rcp_approx(1.0f + e);
  const float er = e * r;
  *s = x >= 0.0f ? r : er;
  *sm = x >= 0.0f ? er : r;
}

// N consecutive elements moved as one 16-byte access when N * sizeof(T) == 16.
template <typename T, int N>
struct alignas(sizeof(T) * N == 16 ? 16 : alignof(T)) Pack {
  T v[N];
};

template <typename T, int N>
__device__ __forceinline__ Pack<T, N> load_pack(const T* p) {
  if constexpr (sizeof(T) * N == 16) {
    const uint4 u = *reinterpret_cast<const uint4*>(p);
    Pack<T, N> r;
    *reinterpret_cast<uint4*>(r.v) = u;
    return r;
  } else {
    Pack<T, N> r;
#pragma unroll
    for (int k = 0; k < N; ++k) r.v[k] = p[k];
    return r;
  }
}

template <typename T, int N>
__device__ __forceinline__ void store_pack(T* p, const Pack<T, N>& r) {
  if constexpr (sizeof(T) * N == 16) {
    *reinterpret_cast<uint4*>(p) = *reinterpret_cast<const uint4*>(r.v);
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) p[k] = r.v[k];
  }
}

constexpr int kThreads = 256;
constexpr int kUnroll = 4;

// The elementwise maps: Op::kIn inputs and Op::kOut outputs of n elements each,
// Op::apply(x, y) in float32 per element.
struct GeluForward {  // in: x; out: gelu(x)
  static constexpr int kIn = 1, kOut = 1;
  __device__ __forceinline__ static void apply(const float (&x)[1], float (&y)[1]) { y[0] = gelu_f(x[0]); }
};
struct GeluBackward {  // in: dout, x; out: dout * gelu'(x)
  static constexpr int kIn = 2, kOut = 1;
  __device__ __forceinline__ static void apply(const float (&x)[2], float (&y)[1]) {
    y[0] = x[0] * gelu_grad_f(x[1]);
  }
};
struct SwigluForward {  // in: gate, up; out: silu(gate) * up
  static constexpr int kIn = 2, kOut = 1;
  __device__ __forceinline__ static void apply(const float (&x)[2], float (&y)[1]) {
    float s, sm;
    sigmoid_pair_f(x[0], &s, &sm);
    y[0] = x[0] * s * x[1];
  }
};
struct SwigluBackward {  // in: dout, gate, up; out: dgate, dup
  static constexpr int kIn = 3, kOut = 2;
  __device__ __forceinline__ static void apply(const float (&x)[3], float (&y)[2]) {
    float s, sm;
    sigmoid_pair_f(x[1], &s, &sm);
    y[0] = x[0] * x[2] * (s * fmaf(x[1], sm, 1.0f));  // silu' = s (1 + x (1 - s))
    y[1] = x[0] * (x[1] * s);
  }
};

template <typename T, typename Op>
struct FlatBuffers {
  T* out[Op::kOut];
  const T* in[Op::kIn];
};

// Flat elementwise map over n_packs packs: each thread loads all its packs
// (kUnroll of each input) before any math. An output may equal an input: every
// element is read and written by the same thread, reads first.
template <typename T, int N, typename Op>
__global__ void flat_kernel(FlatBuffers<T, Op> b, int64_t n_packs) {
  const int64_t base = static_cast<int64_t>(blockIdx.x) * blockDim.x * kUnroll + threadIdx.x;
  Pack<T, N> p[kUnroll][Op::kIn];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int64_t i = base + static_cast<int64_t>(u) * blockDim.x;
    if (i < n_packs) {
#pragma unroll
      for (int j = 0; j < Op::kIn; ++j) p[u][j] = load_pack<T, N>(b.in[j] + i * N);
    }
  }
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int64_t i = base + static_cast<int64_t>(u) * blockDim.x;
    if (i < n_packs) {
      Pack<T, N> r[Op::kOut];
#pragma unroll
      for (int k = 0; k < N; ++k) {
        float x[Op::kIn], y[Op::kOut];
#pragma unroll
        for (int j = 0; j < Op::kIn; ++j) x[j] = to_math(p[u][j].v[k]);
        Op::apply(x, y);
#pragma unroll
        for (int o = 0; o < Op::kOut; ++o) r[o].v[k] = from_math<T>(y[o]);
      }
#pragma unroll
      for (int o = 0; o < Op::kOut; ++o) store_pack<T, N>(b.out[o] + i * N, r[o]);
    }
  }
}

template <typename T, int N, typename Op>
KernelStatus launch_flat(const FlatBuffers<T, Op>& b, int64_t n_packs, cudaStream_t stream) {
  const int64_t per_block = int64_t{kThreads} * kUnroll;
  const int64_t blocks = (n_packs + per_block - 1) / per_block;
  if (blocks > 0x7fffffff) return KernelStatus::invalid_argument("activation: n too large");
  flat_kernel<T, N, Op><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(b, n_packs);
  return cuda::last_launch_status();
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Vector packs for the aligned prefix, one-element packs for the rest.
template <typename T, typename Op>
KernelStatus flat(FlatBuffers<T, Op> b, int64_t n, cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  bool aligned = n >= kVec;
  for (const T* p : b.out) aligned = aligned && aligned16(p);
  for (const T* p : b.in) aligned = aligned && aligned16(p);
  int64_t done = 0;
  if (aligned) {
    const int64_t n_packs = n / kVec;
    KernelStatus s = launch_flat<T, kVec, Op>(b, n_packs, stream);
    if (!s.ok()) return s;
    done = n_packs * kVec;
  }
  if (done == n) return KernelStatus();
  for (T*& p : b.out) p += done;
  for (const T*& p : b.in) p += done;
  return launch_flat<T, 1, Op>(b, n - done, stream);
}

// Checks n and the buffers, then runs Op over them for `dtype`.
template <typename Op>
KernelStatus flat_cuda(void* const (&out)[Op::kOut], const void* const (&in)[Op::kIn], int64_t n, DType dtype,
                       const char* negative, const char* null_buffer, cudaStream_t stream) {
  if (n < 0) return KernelStatus::invalid_argument(negative);
  if (n == 0) return KernelStatus();
  for (const void* p : out) {
    if (p == nullptr) return KernelStatus::invalid_argument(null_buffer);
  }
  for (const void* p : in) {
    if (p == nullptr) return KernelStatus::invalid_argument(null_buffer);
  }
  return cuda::dispatch_float_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    FlatBuffers<T, Op> b;
    for (int o = 0; o < Op::kOut; ++o) b.out[o] = static_cast<T*>(out[o]);
    for (int j = 0; j < Op::kIn; ++j) b.in[j] = static_cast<const T*>(in[j]);
    return flat<T, Op>(b, n, stream);
  });
}

// ---- bias + GELU: blocks of kTileX column packs x kTileY row lanes. ----
constexpr int kTileX = 32;
constexpr int kTileY = 8;
constexpr int kFwdRowsPerBlock = 32;
constexpr int kFwdIters = kFwdRowsPerBlock / kTileY;
// The backward does ~3x the math of the forward per element: 16 row lanes of 4
// rows each keep registers (and so occupancy) at a level that hides latency.
constexpr int kBwdTileY = 16;
constexpr int kBwdRowsPerBlock = static_cast<int>(internal::kBiasGradRowsPerChunk);
constexpr int kBwdIters = kBwdRowsPerBlock / kBwdTileY;
static_assert(kBwdRowsPerBlock % kBwdTileY == 0, "row chunk must split into row lanes");

// grid: x = row blocks, y = column-pack tiles.
template <typename T, int N>
__global__ void bias_gelu_forward_kernel(T* out, const T* x, const T* __restrict__ bias,
                                         int64_t rows, int64_t cols_packs) {
  const int64_t cp = static_cast<int64_t>(blockIdx.y) * kTileX + threadIdx.x;
  if (cp >= cols_packs) return;
  const int64_t cols = cols_packs * N;
  const Pack<T, N> bp = load_pack<T, N>(bias + cp * N);
  float bf[N];
#pragma unroll
  for (int k = 0; k < N; ++k) bf[k] = to_math(bp.v[k]);
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kFwdRowsPerBlock + threadIdx.y;
  Pack<T, N> p[kFwdIters];
#pragma unroll
  for (int i = 0; i < kFwdIters; ++i) {
    const int64_t r = r0 + i * kTileY;
    if (r < rows) p[i] = load_pack<T, N>(x + r * cols + cp * N);
  }
#pragma unroll
  for (int i = 0; i < kFwdIters; ++i) {
    const int64_t r = r0 + i * kTileY;
    if (r < rows) {
      Pack<T, N> o;
#pragma unroll
      for (int k = 0; k < N; ++k) o.v[k] = from_math<T>(gelu_f(to_math(p[i].v[k]) + bf[k]));
      store_pack<T, N>(out + r * cols + cp * N, o);
    }
  }
}

// Stage 1: dx for a 64-row chunk and the chunk's float32 column sums of dpre.
template <typename T, int N>
__global__ void __launch_bounds__(kTileX * kBwdTileY, 2) bias_gelu_backward_partial_kernel(T* dx, float* __restrict__ partial,
                                                  const T* dout, const T* x,
                                                  const T* __restrict__ bias, int64_t rows,
                                                  int64_t cols_packs) {
  __shared__ float lane_sums[kBwdTileY][kTileX * N];
  const int64_t cp = static_cast<int64_t>(blockIdx.y) * kTileX + threadIdx.x;
  const int64_t cols = cols_packs * N;
  const int64_t chunk = blockIdx.x;
  float acc[N];
#pragma unroll
  for (int k = 0; k < N; ++k) acc[k] = 0.0f;
  if (cp < cols_packs) {
    const Pack<T, N> bp = load_pack<T, N>(bias + cp * N);
    const int64_t r0 = chunk * kBwdRowsPerBlock + threadIdx.y;
    Pack<T, N> pd[kBwdIters], px[kBwdIters];
#pragma unroll
    for (int i = 0; i < kBwdIters; ++i) {
      const int64_t r = r0 + i * kBwdTileY;
      if (r < rows) {
        pd[i] = load_pack<T, N>(dout + r * cols + cp * N);
        px[i] = load_pack<T, N>(x + r * cols + cp * N);
      }
    }
#pragma unroll
    for (int i = 0; i < kBwdIters; ++i) {
      const int64_t r = r0 + i * kBwdTileY;
      if (r < rows) {
        Pack<T, N> o;
#pragma unroll
        for (int k = 0; k < N; ++k) {
          const float dpre =
              to_math(pd[i].v[k]) * gelu_grad_f(to_math(px[i].v[k]) + to_math(bp.v[k]));
          acc[k] += dpre;
          o.v[k] = from_math<T>(dpre);
        }
        store_pack<T, N>(dx + r * cols + cp * N, o);
      }
    }
  }
#pragma unroll
  for (int k = 0; k < N; ++k) lane_sums[threadIdx.y][threadIdx.x * N + k] = acc[k];
  __syncthreads();
  // Column e of this tile: the row lanes added in order 0, 1, ...
  for (int e = threadIdx.y * kTileX + threadIdx.x; e < kTileX * N; e += kTileX * kBwdTileY) {
    const int64_t col = static_cast<int64_t>(blockIdx.y) * kTileX * N + e;
    if (col < cols) {
      float s = 0.0f;
#pragma unroll
      for (int y = 0; y < kBwdTileY; ++y) s += lane_sums[y][e];
      partial[chunk * cols + col] = s;
    }
  }
}

// Stage 2: dbias[c] += sum over chunks of partial[chunk, c], in a fixed order.
template <typename T>
__global__ void bias_grad_finish_kernel(T* dbias, const float* __restrict__ partial, int64_t chunks,
                                        int64_t cols) {
  __shared__ float lane_sums[kTileY][kTileX];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kTileX + threadIdx.x;
  float s = 0.0f;
  if (c < cols) {
    for (int64_t k = threadIdx.y; k < chunks; k += kTileY) s += partial[k * cols + c];
  }
  lane_sums[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float total = 0.0f;
#pragma unroll
    for (int y = 0; y < kTileY; ++y) total += lane_sums[y][threadIdx.x];
    dbias[c] = from_math<T>(to_math(dbias[c]) + total);
  }
}

// Grid for [rows, cols_packs]: x = row blocks (up to 2^31 - 1), y = column tiles (up to 65535).
bool bias_grid(int64_t rows, int64_t cols_packs, int64_t rows_per_block, dim3* grid) {
  const int64_t gx = (rows + rows_per_block - 1) / rows_per_block;
  const int64_t gy = (cols_packs + kTileX - 1) / kTileX;
  if (gx > 0x7fffffff || gy > 65535) return false;
  *grid = dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy), 1);
  return true;
}

template <typename T, int N>
KernelStatus bias_forward_typed(T* out, const T* x, const T* bias, int64_t rows, int64_t cols,
                                cudaStream_t stream) {
  dim3 grid;
  if (!bias_grid(rows, cols / N, kFwdRowsPerBlock, &grid)) {
    return KernelStatus::invalid_argument("bias_gelu_forward_cuda: rows or cols too large");
  }
  bias_gelu_forward_kernel<T, N>
      <<<grid, dim3(kTileX, kTileY), 0, stream>>>(out, x, bias, rows, cols / N);
  return cuda::last_launch_status();
}

template <typename T, int N>
KernelStatus bias_backward_typed(T* dx, T* dbias, const T* dout, const T* x, const T* bias,
                                 float* partial, int64_t rows, int64_t cols, cudaStream_t stream) {
  dim3 grid;
  const int64_t chunks = internal::bias_grad_chunks(rows);
  if (!bias_grid(rows, cols / N, kBwdRowsPerBlock, &grid) || (cols + kTileX - 1) / kTileX > 0x7fffffff) {
    return KernelStatus::invalid_argument("bias_gelu_backward_cuda: rows or cols too large");
  }
  bias_gelu_backward_partial_kernel<T, N>
      <<<grid, dim3(kTileX, kBwdTileY), 0, stream>>>(dx, partial, dout, x, bias, rows, cols / N);
  KernelStatus s = cuda::last_launch_status();
  if (!s.ok()) return s;
  const unsigned finish_blocks = static_cast<unsigned>((cols + kTileX - 1) / kTileX);
  bias_grad_finish_kernel<T><<<finish_blocks, dim3(kTileX, kTileY), 0, stream>>>(dbias, partial,
                                                                                 chunks, cols);
  return cuda::last_launch_status();
}

}  // namespace

KernelStatus gelu_forward_cuda(void* out, const void* x, int64_t n, DType dtype,
                               cudaStream_t stream) {
  return flat_cuda<GeluForward>({out}, {x}, n, dtype, "gelu_forward_cuda: n < 0",
                                "gelu_forward_cuda: null buffer with n > 0", stream);
}

KernelStatus gelu_backward_cuda(void* dx, const void* dout, const void* x, int64_t n, DType dtype,
                                cudaStream_t stream) {
  return flat_cuda<GeluBackward>({dx}, {dout, x}, n, dtype, "gelu_backward_cuda: n < 0",
                                 "gelu_backward_cuda: null buffer with n > 0", stream);
}

KernelStatus swiglu_forward_cuda(void* out, const void* gate, const void* up, int64_t n, DType dtype,
                                 cudaStream_t stream) {
  return flat_cuda<SwigluForward>({out}, {gate, up}, n, dtype, "swiglu_forward_cuda: n < 0",
                                  "swiglu_forward_cuda: null buffer with n > 0", stream);
}

KernelStatus swiglu_backward_cuda(void* dgate, void* dup, const void* dout, const void* gate, const void* up,
                                  int64_t n, DType dtype, cudaStream_t stream) {
  return flat_cuda<SwigluBackward>({dgate, dup}, {dout, gate, up}, n, dtype, "swiglu_backward_cuda: n < 0",
                                   "swiglu_backward_cuda: null buffer with n > 0", stream);
}

KernelStatus bias_gelu_forward_cuda(void* out, const void* x, const void* bias, int64_t rows,
                                    int64_t cols, DType dtype, cudaStream_t stream) {
  if (rows < 0 || cols < 0) {
    return KernelStatus::invalid_argument("bias_gelu_forward_cuda: rows < 0 or cols < 0");
  }
  if (rows == 0 || cols == 0) return KernelStatus();
  if (out == nullptr || x == nullptr || bias == nullptr) {
    return KernelStatus::invalid_argument("bias_gelu_forward_cuda: null buffer with rows * cols > 0");
  }
  return cuda::dispatch_float_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int kVec = 16 / sizeof(T);
    T* o = static_cast<T*>(out);
    const T* in = static_cast<const T*>(x);
    const T* b = static_cast<const T*>(bias);
    if (cols % kVec == 0 && aligned16(o) && aligned16(in) && aligned16(b)) {
      return bias_forward_typed<T, kVec>(o, in, b, rows, cols, stream);
    }
    return bias_forward_typed<T, 1>(o, in, b, rows, cols, stream);
  });
}

KernelStatus bias_gelu_backward_cuda(void* dx, void* dbias, const void* dout, const void* x,
                                     const void* bias, void* scratch, size_t scratch_bytes,
                                     int64_t rows, int64_t cols, DType dtype, cudaStream_t stream) {
  if (rows < 0 || cols < 0) {
    return KernelStatus::invalid_argument("bias_gelu_backward_cuda: rows < 0 or cols < 0");
  }
  if (rows == 0 || cols == 0) return KernelStatus();  // dbias += 0
  if (dx == nullptr || dbias == nullptr || dout == nullptr || x == nullptr || bias == nullptr ||
      scratch == nullptr) {
    return KernelStatus::invalid_argument(
        "bias_gelu_backward_cuda: null buffer with rows * cols > 0");
  }
  if (scratch_bytes < internal::bias_grad_scratch_bytes(rows, cols)) {
    return KernelStatus::invalid_argument(
        "bias_gelu_backward_cuda: scratch smaller than bias_gelu_backward_scratch_bytes()");
  }
  if (!aligned16(scratch)) {
    return KernelStatus::invalid_argument("bias_gelu_backward_cuda: scratch not 16-byte aligned");
  }
  return cuda::dispatch_float_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int kVec = 16 / sizeof(T);
    T* g = static_cast<T*>(dx);
    T* gb = static_cast<T*>(dbias);
    const T* dy = static_cast<const T*>(dout);
    const T* in = static_cast<const T*>(x);
    const T* b = static_cast<const T*>(bias);
    float* partial = static_cast<float*>(scratch);
    if (cols % kVec == 0 && aligned16(g) && aligned16(dy) && aligned16(in) && aligned16(b)) {
      return bias_backward_typed<T, kVec>(g, gb, dy, in, b, partial, rows, cols, stream);
    }
    return bias_backward_typed<T, 1>(g, gb, dy, in, b, partial, rows, cols, stream);
  });
}

}  // namespace colossal::kernels::activation
