// CUDA fused attention (FlashAttention-2), causal or full mask, head_dim 64,
// 96 or 128, bf16/fp16 on tensor cores through mma.sync.m16n8k16 (inline PTX,
// sm_80+), fp32 accumulation.
//
// Masks: causal, a query block visits the key blocks 0 .. its diagonal and
// masks keys after the query on the diagonal block; full (Params::full), every
// query block visits every key block and the last one masks only keys at or
// past seq (zero-filled rows that would otherwise enter the softmax); the
// dK/dV kernel visits every query block from 0 instead of from the diagonal.
//
// Every kernel runs 4 warps (128 threads); a warp owns 16 rows of the tile it
// produces, so softmax statistics and accumulators never leave the warp's
// registers (FA2's split: no cross-warp reductions). Tiles of 64 rows x D move
// global -> shared with 16-byte cp.async (rows past seq are zero-filled),
// double-buffered so the next tile's copy overlaps the current tile's math;
// shared rows are padded by 16 bytes (D + 8 elements) so every ldmatrix phase
// (8 rows x 16 bytes) hits 32 distinct banks. Operands reach the tensor cores
// through ldmatrix (.trans where the product needs the tile transposed); P and
// dS go from the fp32 accumulator layout straight into A-operand registers
// (the m16n8 accumulator of two adjacent n-tiles is exactly an m16k16 A tile).
//
// Grouped-query heads: the forward, delta and dQ kernels run per query head and
// read K, V of the head's kv head; the dK/dV kernel runs per kv head and sums
// its group's query heads in its fp32 accumulators (no atomics anywhere, so
// the backward is deterministic).
//
//   forward_kernel<T, D>      CTA = 64 queries of one (batch, head); loops over
//                             the key blocks 0..diagonal (full: 0..last) with
//                             an online softmax
//                             (exp2, scores pre-scaled by scale * log2 e);
//                             writes O (normalised) and lse. Heaviest query
//                             blocks are launched first.
//   delta_kernel<T, D>        delta[row] = rowsum(dO * O) (fp32 workspace).
//   dkdv_kernel<T, D, BQ>     CTA = 64 keys of one (batch, kv head); loops over
//                             the group's query heads and, for each, over query
//                             blocks of BQ from the diagonal on (one
//                             double-buffered pipeline across heads):
//                             recomputes S^T = K Q^T, P^T from
//                             lse, dV += P^T dO, dP^T = V dO^T,
//                             dS^T = P^T (dP^T - delta), dK += dS^T Q.
//   dq_kernel<T, D>           CTA = 64 queries; loops over key blocks up to the
//                             diagonal: S = Q K^T, P, dP = dO V^T, dS,
//                             dQ += dS K. (Two passes recompute P twice instead
//                             of FA2's atomic dQ accumulation: deterministic, no
//                             fp32 dQ buffer, ~40% more backward math.)
// Outputs are staged through shared memory and written with 16-byte stores.
//
// The kernels themselves live in attention_kernels.h, included below after
// the PTX wrappers they call; attention_emulation_test.cc includes the same
// file after host emulations of those wrappers and runs it on CPU threads.
//
// On compute capability 9.0 (H100, H200) the forward (head_dim 64 or 128;
// head_dim 96 stays here: the Hopper tiles are 64-column chunks) runs the
// Hopper kernel of
// attention_hopper.cu instead (wgmma + TMA, built for sm_90a only), which
// writes the same o and lse; internal::ForwardPath chooses explicitly. The
// backward there runs this file's delta kernel, then the Hopper dK/dV and dQ
// kernels of attention_hopper_backward.cu (the same deterministic split);
// internal::BackwardPath chooses explicitly.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <climits>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "kernels/attention/attention.h"
#include "kernels/attention/attention_hopper.h"
#include "kernels/attention/attention_internal.h"
#include "kernels/common/cuda_utils.cuh"

namespace colossal::kernels::attention {
namespace {

// ---------------------------------------------------------------------------
// PTX wrappers.

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared; zero-fills the destination when !valid (nothing read).
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(smem)), "l"(gmem),
               "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

// Four 8x8 b16 matrices; lane l gives the address of row (l % 8) of matrix l / 8.
// Register i of lane l holds row l / 4, columns 2 (l % 4) .. +1 of matrix i
// (with .trans: of the transposed matrix).
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}

// The m16n8k16 mma with A and B of PTX type `ab` ("bf16" / "f16"), fp32 C = D.
#define COLOSSAL_MMA_M16N8K16(ab)                                                         \
  asm("mma.sync.aligned.m16n8k16.row.col.f32." ab "." ab ".f32 {%0, %1, %2, %3}, "       \
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"                                   \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                    \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1))

// The 32 bits of a packed pair (__nv_bfloat162 / __half2).
template <typename V>
__device__ __forceinline__ uint32_t bits32(V v) {
  static_assert(sizeof(V) == sizeof(uint32_t));
  return *reinterpret_cast<uint32_t*>(&v);
}

// d += a * b for one m16n8k16 tile. Lane l, g = l / 4, t = l % 4:
//   a[0] = A[g][2t..2t+1], a[1] = A[g+8][2t..], a[2] = A[g][2t+8..], a[3] = A[g+8][2t+8..]
//   b0 = B[2t..2t+1][g], b1 = B[2t+8..2t+9][g]
//   d[0..1] = D[g][2t..2t+1], d[2..3] = D[g+8][2t..2t+1]
template <typename T>
struct Mma {
  static constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  static_assert(kBf16 || std::is_same_v<T, __half>, "Mma: bfloat16 or half");

  static __device__ __forceinline__ void run(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    if constexpr (kBf16) {
      COLOSSAL_MMA_M16N8K16("bf16");
    } else {
      COLOSSAL_MMA_M16N8K16("f16");
    }
  }
  // lo in the low half (.x), hi in the high half.
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    if constexpr (kBf16) {
      return bits32(__floats2bfloat162_rn(lo, hi));
    } else {
      return bits32(__floats2half2_rn(lo, hi));
    }
  }
};
#undef COLOSSAL_MMA_M16N8K16

// 2^x; exact 0 for -inf.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

#define COLOSSAL_UNROLL _Pragma("unroll")
#include "kernels/attention/attention_kernels.h"
#undef COLOSSAL_UNROLL

// ---------------------------------------------------------------------------
// Launchers.

template <typename Kernel>
KernelStatus launch(Kernel kernel, dim3 grid, int threads, int smem, cudaStream_t stream,
                    const Params& p) {
  if (smem > 48 * 1024) {
    const KernelStatus s = cuda::to_status(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    if (!s.ok()) return s;
  }
  kernel<<<grid, threads, smem, stream>>>(p);
  return cuda::last_launch_status();
}

template <typename T, int D>
KernelStatus forward_typed(const Params& p, cudaStream_t stream) {
  const dim3 grid((p.seq + kBlock - 1) / kBlock, static_cast<unsigned>(p.batch * p.heads));
  return launch(p.full ? forward_kernel<T, D, true> : forward_kernel<T, D, false>, grid, kThreads,
                forward_smem_bytes<T, D>(), stream, p);
}

// `hopper`: the Hopper dK/dV and dQ kernels after the delta kernel (geometry
// g); `fallback`: the portable ones where the driver refuses Hopper's tensor
// maps (kUnsupported), else that status is returned.
template <typename T, int D>
KernelStatus backward_typed(const Params& p, cudaStream_t stream, bool hopper, bool fallback,
                            const internal::Geometry& g, DType dtype) {
  static_assert(D % 16 == 0, "the kernels tile head_dim by 16");
  const int64_t rows = p.batch * p.seq * p.heads;
  const int64_t delta_blocks = (rows + 255) / 256;
  if (delta_blocks > INT_MAX) return KernelStatus::invalid_argument("attention cuda: too large");
  KernelStatus s = launch(delta_kernel<T, D>, dim3(static_cast<unsigned>(delta_blocks)), 256, 0,
                          stream, p);
  if (!s.ok()) return s;
  if (hopper) {
    s = internal::hopper_backward(p.dq, p.dk, p.dv, p.d_o, p.q, p.k, p.v, p.lse, p.delta, g, dtype,
                                  p.scale, p.full != 0, stream);
    if (!fallback || s.code() != KernelStatus::Code::kUnsupported) return s;
  }
  constexpr int BQ = dkdv_block_q<D>();
  const unsigned bh = static_cast<unsigned>(p.batch * p.heads);
  const unsigned bkv = static_cast<unsigned>(p.batch * p.kv_heads);
  const unsigned blocks = static_cast<unsigned>((p.seq + kBlock - 1) / kBlock);
  s = launch(p.full ? dkdv_kernel<T, D, BQ, true> : dkdv_kernel<T, D, BQ, false>,
             dim3(blocks, bkv), kThreads, dkdv_smem_bytes<T, D, BQ>(), stream, p);
  if (!s.ok()) return s;
  return launch(p.full ? dq_kernel<T, D, true> : dq_kernel<T, D, false>, dim3(blocks, bh),
                kThreads, dq_smem_bytes<T, D>(), stream, p);
}

template <typename F>
KernelStatus dispatch(DType dtype, int64_t head_dim, F&& f) {
  auto by_dim = [&](auto tag) -> KernelStatus {
    using T = decltype(tag);
    if (head_dim == 64) return f(T{}, std::integral_constant<int, 64>{});
    if (head_dim == 96) return f(T{}, std::integral_constant<int, 96>{});
    if (head_dim == 128) return f(T{}, std::integral_constant<int, 128>{});
    return KernelStatus::unsupported("attention cuda: head_dim must be 64, 96 or 128");
  };
  if (dtype == DType::kBF16) return by_dim(__nv_bfloat16{});
  if (dtype == DType::kF16) return by_dim(__half{});
  return KernelStatus::unsupported("attention cuda: dtype must be bfloat16 or float16");
}

// The Params fields both directions share: q, k, v, geometry, scale and mask.
Params common_params(const internal::Geometry& g, const void* q, const void* k, const void* v,
                     float scale, AttentionMask mask) {
  Params p{};
  p.full = mask == AttentionMask::kFull ? 1 : 0;
  p.q = q;
  p.k = k;
  p.v = v;
  p.qkv_stride = g.qkv_row_stride;
  p.o_stride = g.o_row_stride;
  p.batch = g.batch;
  p.seq = static_cast<int>(g.seq);
  p.heads = static_cast<int>(g.heads);
  p.kv_heads = static_cast<int>(g.kv_heads);
  p.group = static_cast<int>(g.group());
  p.scale = scale;
  p.scale_log2 = scale * kLog2e;
  return p;
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

KernelStatus check_cuda(const internal::Geometry& g, DType dtype, AttentionMask mask,
                        std::initializer_list<const void*> ptrs) {
  KernelStatus s = internal::check_geometry(g);
  if (!s.ok()) return s;
  if (mask != AttentionMask::kCausal && mask != AttentionMask::kFull) {
    return KernelStatus::invalid_argument("attention cuda: unknown mask");
  }
  if (dtype != DType::kBF16 && dtype != DType::kF16) {
    return KernelStatus::unsupported("attention cuda: dtype must be bfloat16 or float16");
  }
  if (g.head_dim != 64 && g.head_dim != 96 && g.head_dim != 128 && !g.empty()) {
    return KernelStatus::unsupported("attention cuda: head_dim must be 64, 96 or 128");
  }
  if (g.empty()) return KernelStatus();
  if (g.seq > kMaxSeq) return KernelStatus::invalid_argument("attention cuda: seq above 2^30");
  if (g.batch * g.heads > 65535) {
    return KernelStatus::invalid_argument("attention cuda: batch * heads above 65535");
  }
  if (internal::any_null(ptrs)) return KernelStatus::invalid_argument("attention cuda: null pointer");
  for (const void* p : ptrs) {
    if (!aligned16(p)) {
      return KernelStatus::invalid_argument("attention cuda: pointers must be 16-byte aligned");
    }
  }
  if (g.qkv_row_stride % 8 != 0 || g.o_row_stride % 8 != 0) {
    return KernelStatus::invalid_argument(
        "attention cuda: row strides must be multiples of 8 elements");
  }
  return KernelStatus();
}

}  // namespace

namespace internal {

bool hopper_device() {
  // Per device: 0 not asked yet, 1 no, 2 yes. Devices past the table ask every time.
  static std::atomic<signed char> known[64];
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  if (device >= 0 && device < 64) {
    const signed char k = known[device].load(std::memory_order_relaxed);
    if (k != 0) return k == 2;
  }
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  const bool hopper = major == 9 && minor == 0;
  if (device >= 0 && device < 64) known[device].store(hopper ? 2 : 1, std::memory_order_relaxed);
  return hopper;
}

KernelStatus attention_forward_cuda_path(ForwardPath path, AttentionMask mask, void* o,
                                         float* lse, const void* q, const void* k, const void* v,
                                         int64_t batch, int64_t heads, int64_t kv_heads,
                                         int64_t seq, int64_t head_dim, int64_t qkv_row_stride,
                                         int64_t o_row_stride, DType dtype, float scale,
                                         cudaStream_t stream) {
  const Geometry g{batch, heads, kv_heads, seq, head_dim, qkv_row_stride, o_row_stride};
  KernelStatus s = check_cuda(g, dtype, mask, {o, lse, q, k, v});
  if (!s.ok()) return s;
  if (path == ForwardPath::kHopper && !hopper_device()) {
    return KernelStatus::unsupported(
        "attention forward: the Hopper kernel needs a compute capability 9.0 device");
  }
  if (g.empty()) return s;
  const size_t elem = dtype_size(dtype);
  const auto [qe, ke, ve] = internal::qkv_extents(q, k, v, g, elem);
  const auto oe = internal::extent(o, g, o_row_stride, heads, elem);
  const auto le = internal::plain_extent(lse, static_cast<size_t>(batch * heads * seq) * 4);
  if (internal::outputs_overlap_inputs({oe, le}, {qe, ke, ve}) || internal::overlap(oe, le)) {
    return KernelStatus::invalid_argument("attention forward: o or lse overlaps an input");
  }
  const bool full = mask == AttentionMask::kFull;
  if (path == ForwardPath::kHopper) {
    if (!hopper_forward_supports(g, dtype)) {
      return KernelStatus::unsupported("attention forward: problem outside the Hopper kernel");
    }
    return hopper_forward(o, lse, q, k, v, g, dtype, scale, full, stream);
  }
  if (path == ForwardPath::kAuto && hopper_device() && hopper_forward_supports(g, dtype)) {
    s = hopper_forward(o, lse, q, k, v, g, dtype, scale, full, stream);
    // kUnsupported: the driver refused the tensor maps; the portable kernel runs.
    if (s.code() != KernelStatus::Code::kUnsupported) return s;
  }
  Params p = common_params(g, q, k, v, scale, mask);
  p.out = o;
  p.lse_out = lse;
  return dispatch(dtype, head_dim, [&](auto tag, auto dim) {
    return forward_typed<decltype(tag), decltype(dim)::value>(p, stream);
  });
}

KernelStatus causal_attention_forward_cuda_path(ForwardPath path, void* o, float* lse,
                                                const void* q, const void* k, const void* v,
                                                int64_t batch, int64_t heads, int64_t kv_heads,
                                                int64_t seq, int64_t head_dim,
                                                int64_t qkv_row_stride, int64_t o_row_stride,
                                                DType dtype, float scale, cudaStream_t stream) {
  return attention_forward_cuda_path(path, AttentionMask::kCausal, o, lse, q, k, v, batch, heads,
                                     kv_heads, seq, head_dim, qkv_row_stride, o_row_stride, dtype,
                                     scale, stream);
}

}  // namespace internal

KernelStatus attention_forward_cuda(void* o, float* lse, const void* q, const void* k,
                                    const void* v, int64_t batch, int64_t heads, int64_t kv_heads,
                                    int64_t seq, int64_t head_dim, int64_t qkv_row_stride,
                                    int64_t o_row_stride, DType dtype, float scale,
                                    AttentionMask mask, cudaStream_t stream) {
  return internal::attention_forward_cuda_path(internal::ForwardPath::kAuto, mask, o, lse, q, k,
                                               v, batch, heads, kv_heads, seq, head_dim,
                                               qkv_row_stride, o_row_stride, dtype, scale, stream);
}

KernelStatus causal_attention_forward_cuda(void* o, float* lse, const void* q, const void* k,
                                           const void* v, int64_t batch, int64_t heads,
                                           int64_t kv_heads, int64_t seq, int64_t head_dim,
                                           int64_t qkv_row_stride, int64_t o_row_stride,
                                           DType dtype, float scale, cudaStream_t stream) {
  return attention_forward_cuda(o, lse, q, k, v, batch, heads, kv_heads, seq, head_dim,
                                qkv_row_stride, o_row_stride, dtype, scale, AttentionMask::kCausal,
                                stream);
}

size_t causal_attention_backward_workspace_bytes(int64_t batch, int64_t heads, int64_t seq) {
  if (batch <= 0 || heads <= 0 || seq <= 0) return 0;
  return static_cast<size_t>(batch * heads * seq) * sizeof(float);
}

namespace internal {

KernelStatus attention_backward_cuda_path(
    BackwardPath path, AttentionMask mask, void* dq, void* dk, void* dv, const void* d_o,
    const void* q, const void* k, const void* v, const void* o, const float* lse, void* workspace,
    int64_t batch, int64_t heads, int64_t kv_heads, int64_t seq, int64_t head_dim,
    int64_t qkv_row_stride, int64_t o_row_stride, DType dtype, float scale, cudaStream_t stream) {
  const Geometry g{batch, heads, kv_heads, seq, head_dim, qkv_row_stride, o_row_stride};
  KernelStatus s = check_cuda(g, dtype, mask, {dq, dk, dv, d_o, q, k, v, o, lse, workspace});
  if (!s.ok()) return s;
  if (path == BackwardPath::kHopper && !hopper_device()) {
    return KernelStatus::unsupported(
        "attention backward: the Hopper kernels need a compute capability 9.0 device");
  }
  if (g.empty()) return s;
  const size_t elem = dtype_size(dtype);
  const size_t rows_bytes = static_cast<size_t>(batch * heads * seq) * 4;
  const auto we = internal::plain_extent(workspace, rows_bytes);
  const auto [dqe, dke, dve] = internal::qkv_extents(dq, dk, dv, g, elem);
  const auto [qe, ke, ve] = internal::qkv_extents(q, k, v, g, elem);
  if (internal::outputs_overlap_inputs(
          {dqe, dke, dve, we},
          {qe, ke, ve, internal::extent(d_o, g, o_row_stride, heads, elem),
           internal::extent(o, g, o_row_stride, heads, elem),
           internal::plain_extent(lse, rows_bytes)}) ||
      internal::outputs_overlap_inputs({we}, {dqe, dke, dve})) {
    return KernelStatus::invalid_argument(
        "attention backward: dq, dk, dv or the workspace overlaps an input or each other");
  }
  Params p = common_params(g, q, k, v, scale, mask);
  p.o = o;
  p.d_o = d_o;
  p.dq = dq;
  p.dk = dk;
  p.dv = dv;
  p.lse = lse;
  p.delta = static_cast<float*>(workspace);
  if (path == BackwardPath::kHopper && !hopper_backward_supports(g, dtype)) {
    return KernelStatus::unsupported("attention backward: problem outside the Hopper kernels");
  }
  const bool hopper = path == BackwardPath::kHopper ||
                      (path == BackwardPath::kAuto && hopper_device() &&
                       hopper_backward_supports(g, dtype));
  const bool fallback = path == BackwardPath::kAuto;
  return dispatch(dtype, head_dim, [&](auto tag, auto dim) {
    return backward_typed<decltype(tag), decltype(dim)::value>(p, stream, hopper, fallback, g,
                                                               dtype);
  });
}

KernelStatus causal_attention_backward_cuda_path(
    BackwardPath path, void* dq, void* dk, void* dv, const void* d_o, const void* q, const void* k,
    const void* v, const void* o, const float* lse, void* workspace, int64_t batch, int64_t heads,
    int64_t kv_heads, int64_t seq, int64_t head_dim, int64_t qkv_row_stride, int64_t o_row_stride,
    DType dtype, float scale, cudaStream_t stream) {
  return attention_backward_cuda_path(path, AttentionMask::kCausal, dq, dk, dv, d_o, q, k, v, o,
                                      lse, workspace, batch, heads, kv_heads, seq, head_dim,
                                      qkv_row_stride, o_row_stride, dtype, scale, stream);
}

}  // namespace internal

KernelStatus attention_backward_cuda(void* dq, void* dk, void* dv, const void* d_o, const void* q,
                                     const void* k, const void* v, const void* o, const float* lse,
                                     void* workspace, int64_t batch, int64_t heads,
                                     int64_t kv_heads, int64_t seq, int64_t head_dim,
                                     int64_t qkv_row_stride, int64_t o_row_stride, DType dtype,
                                     float scale, AttentionMask mask, cudaStream_t stream) {
  return internal::attention_backward_cuda_path(
      internal::BackwardPath::kAuto, mask, dq, dk, dv, d_o, q, k, v, o, lse, workspace, batch,
      heads, kv_heads, seq, head_dim, qkv_row_stride, o_row_stride, dtype, scale, stream);
}

KernelStatus causal_attention_backward_cuda(void* dq, void* dk, void* dv, const void* d_o,
                                            const void* q, const void* k, const void* v,
                                            const void* o, const float* lse, void* workspace,
                                            int64_t batch, int64_t heads, int64_t kv_heads,
                                            int64_t seq, int64_t head_dim, int64_t qkv_row_stride,
                                            int64_t o_row_stride, DType dtype, float scale,
                                            cudaStream_t stream) {
  return attention_backward_cuda(dq, dk, dv, d_o, q, k, v, o, lse, workspace, batch, heads,
                                 kv_heads, seq, head_dim, qkv_row_stride, o_row_stride, dtype,
                                 scale, AttentionMask::kCausal, stream);
}

}  // namespace colossal::kernels::attention
