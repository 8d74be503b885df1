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
// The varlen layout (attention.h) runs the same kernels with kVarlen: a CTA
// reads its sequence's first row and length from cu_seqlens[b] and
// cu_seqlens[b + 1] (b: the grid's sequence index), the grids span
// max_seqlen's blocks and CTAs past their sequence's end return at once; lse
// and delta are [heads, total_tokens]. kVarlen is a template parameter, so
// the batch layout's kernels are what they were.
//
// The kernels themselves live in attention_kernels.h, included below after
// the PTX wrappers they call; attention_emulation_test.cc includes the same
// file after host emulations of those wrappers and runs it on CPU threads.
//
// On compute capability 9.0 (H100, H200) the forward runs the Hopper kernel
// of attention_hopper.cu instead (wgmma + TMA, built for sm_90a only), which
// writes the same o and lse; internal::ForwardPath chooses explicitly. The
// backward there runs this file's delta kernel, then the Hopper kernels of
// attention_hopper_backward.cu (the deterministic dK/dV and dQ split, or dK/dV
// with the fused dQ); internal::BackwardPath chooses explicitly.
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

// The launchers pick each kernel's kFull from p.full and kVarlen from
// p.cu_seqlens; grids are (query or key blocks of p.seq, p.batch * heads or
// kv_heads), where in the varlen layout batch = num_seqs and seq = max_seqlen.
template <typename T, int D>
KernelStatus forward_typed(const Params& p, cudaStream_t stream) {
  const dim3 grid((p.seq + kBlock - 1) / kBlock, static_cast<unsigned>(p.batch * p.heads));
  auto kernel = p.cu_seqlens != nullptr
                    ? (p.full ? forward_kernel<T, D, true, true> : forward_kernel<T, D, false, true>)
                    : (p.full ? forward_kernel<T, D, true, false>
                              : forward_kernel<T, D, false, false>);
  return launch(kernel, grid, kThreads, forward_smem_bytes<T, D>(), stream, p);
}

// `hopper`: the Hopper backward after the delta kernel (geometry g; fused dQ
// into `dq_accum` unless it is null); `fallback`: the portable kernels where
// the driver refuses Hopper's tensor maps (kUnsupported), else that status is
// returned.
template <typename T, int D>
KernelStatus backward_typed(const Params& p, cudaStream_t stream, bool hopper, bool fallback,
                            const internal::Geometry& g, DType dtype, float* dq_accum = nullptr,
                            const internal::Sequences& seqs = {}) {
  static_assert(D % 16 == 0, "the kernels tile head_dim by 16");
  const bool varlen = p.cu_seqlens != nullptr;
  const int64_t rows = (varlen ? p.total : p.batch * p.seq) * p.heads;
  const int64_t delta_blocks = (rows + 255) / 256;
  if (delta_blocks > INT_MAX) return KernelStatus::invalid_argument("attention cuda: too large");
  KernelStatus s = launch(varlen ? delta_kernel<T, D, true> : delta_kernel<T, D, false>,
                          dim3(static_cast<unsigned>(delta_blocks)), 256, 0, stream, p);
  if (!s.ok()) return s;
  if (hopper) {
    s = internal::hopper_backward(p.dq, p.dk, p.dv, p.d_o, p.q, p.k, p.v, p.lse, p.delta,
                                  dq_accum, g, dtype, p.scale, p.full != 0, seqs, stream);
    if (!fallback || s.code() != KernelStatus::Code::kUnsupported) return s;
  }
  constexpr int BQ = dkdv_block_q<D>();
  const unsigned bh = static_cast<unsigned>(p.batch * p.heads);
  const unsigned bkv = static_cast<unsigned>(p.batch * p.kv_heads);
  const unsigned blocks = static_cast<unsigned>((p.seq + kBlock - 1) / kBlock);
  auto dkdv = varlen ? (p.full ? dkdv_kernel<T, D, BQ, true, true>
                               : dkdv_kernel<T, D, BQ, false, true>)
                     : (p.full ? dkdv_kernel<T, D, BQ, true, false>
                               : dkdv_kernel<T, D, BQ, false, false>);
  s = launch(dkdv, dim3(blocks, bkv), kThreads, dkdv_smem_bytes<T, D, BQ>(), stream, p);
  if (!s.ok()) return s;
  auto dq = varlen ? (p.full ? dq_kernel<T, D, true, true> : dq_kernel<T, D, false, true>)
                   : (p.full ? dq_kernel<T, D, true, false> : dq_kernel<T, D, false, false>);
  return launch(dq, dim3(blocks, bh), kThreads, dq_smem_bytes<T, D>(), stream, p);
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

// The Params fields both directions share: q, k, v, geometry, scale and mask
// (the batch layout: cu_seqlens null).
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

// common_params of the varlen layout (flat: its flat geometry).
Params varlen_params(const internal::Geometry& flat, const void* q, const void* k, const void* v,
                     float scale, AttentionMask mask, const int32_t* cu_seqlens, int64_t num_seqs,
                     int64_t max_seqlen) {
  Params p = common_params(flat, q, k, v, scale, mask);
  p.batch = num_seqs;
  p.seq = static_cast<int>(max_seqlen);
  p.cu_seqlens = cu_seqlens;
  p.total = flat.seq;
  return p;
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The checks every CUDA call makes on geometry g (the varlen layout: its flat
// geometry, after check_varlen): grid_seq positions (seq; max_seqlen) per
// sequence and grid_seqs sequences (batch; num_seqs) size the grids.
KernelStatus check_cuda(const internal::Geometry& g, DType dtype, AttentionMask mask,
                        std::initializer_list<const void*> ptrs, int64_t grid_seq,
                        int64_t grid_seqs) {
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
  if (grid_seq > kMaxSeq) {
    return KernelStatus::invalid_argument("attention cuda: seq (varlen: max_seqlen) above 2^30");
  }
  if (grid_seqs > 65535 || grid_seqs * g.heads > 65535) {
    return KernelStatus::invalid_argument(
        "attention cuda: batch (varlen: num_seqs) * heads above 65535");
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

// The varlen layout's own checks (the device's cu_seqlens cannot be read):
// its geometry, max_seqlen, and cu_seqlens present and int32-aligned.
KernelStatus check_varlen(const internal::Geometry& flat, const int32_t* cu_seqlens,
                          int64_t num_seqs, int64_t max_seqlen) {
  KernelStatus s = internal::check_varlen_geometry(flat, num_seqs);
  if (!s.ok()) return s;
  if (max_seqlen < 0) return KernelStatus::invalid_argument("attention: negative size");
  if (max_seqlen == 0 && flat.seq > 0) {
    return KernelStatus::invalid_argument("attention varlen: max_seqlen 0 with total_tokens > 0");
  }
  if (cu_seqlens == nullptr) return KernelStatus::invalid_argument("attention varlen: null cu_seqlens");
  if (reinterpret_cast<uintptr_t>(cu_seqlens) % alignof(int32_t) != 0) {
    return KernelStatus::invalid_argument("attention varlen: cu_seqlens is not 4-byte aligned");
  }
  return KernelStatus();
}

// The bytes of cu_seqlens (an input the outputs must not overlap); nothing
// in the batch layout.
internal::Extent cu_seqlens_extent(const int32_t* cu_seqlens, int64_t num_seqs) {
  if (cu_seqlens == nullptr) return {0, 0};
  return internal::plain_extent(cu_seqlens, static_cast<size_t>(num_seqs + 1) * sizeof(int32_t));
}

// Bytes of one float per query row (lse, delta): batch * heads * seq of them.
size_t row_floats_bytes(int64_t batch, int64_t heads, int64_t seq) {
  return static_cast<size_t>(batch * heads * seq) * sizeof(float);
}

// Whether o or lse overlaps an input or each other (g: the batch geometry or
// the varlen layout's flat one, whose lse is as large; cu: cu_seqlens_extent).
bool forward_overlaps(const internal::Geometry& g, DType dtype, const void* o, const float* lse,
                      const void* q, const void* k, const void* v, internal::Extent cu) {
  const size_t elem = dtype_size(dtype);
  const auto [qe, ke, ve] = internal::qkv_extents(q, k, v, g, elem);
  const auto oe = internal::extent(o, g, g.o_row_stride, g.heads, elem);
  const auto le = internal::plain_extent(lse, row_floats_bytes(g.batch, g.heads, g.seq));
  return internal::outputs_overlap_inputs({oe, le}, {qe, ke, ve, cu}) || internal::overlap(oe, le);
}

// Whether dq, dk, dv or the workspace's first workspace_bytes overlap an
// input, or the workspace overlaps dq, dk or dv (g and cu as
// forward_overlaps').
bool backward_overlaps(const internal::Geometry& g, DType dtype, const void* dq, const void* dk,
                       const void* dv, const void* d_o, const void* q, const void* k,
                       const void* v, const void* o, const float* lse, const void* workspace,
                       size_t workspace_bytes, internal::Extent cu) {
  const size_t elem = dtype_size(dtype);
  const size_t rows_bytes = row_floats_bytes(g.batch, g.heads, g.seq);
  const auto we = internal::plain_extent(workspace, workspace_bytes);
  const auto [dqe, dke, dve] = internal::qkv_extents(dq, dk, dv, g, elem);
  const auto [qe, ke, ve] = internal::qkv_extents(q, k, v, g, elem);
  return internal::outputs_overlap_inputs(
             {dqe, dke, dve, we},
             {qe, ke, ve, internal::extent(d_o, g, g.o_row_stride, g.heads, elem),
              internal::extent(o, g, g.o_row_stride, g.heads, elem),
              internal::plain_extent(lse, rows_bytes), cu}) ||
         internal::outputs_overlap_inputs({we}, {dqe, dke, dve});
}

// The portable forward of checked arguments.
KernelStatus portable_forward(Params p, void* o, float* lse, DType dtype, int64_t head_dim,
                              cudaStream_t stream) {
  p.out = o;
  p.lse_out = lse;
  return dispatch(dtype, head_dim, [&](auto tag, auto dim) {
    return forward_typed<decltype(tag), decltype(dim)::value>(p, stream);
  });
}

// The backward's Params past common_params / varlen_params.
void set_backward(Params& p, void* dq, void* dk, void* dv, const void* d_o, const void* o,
                  const float* lse, void* workspace) {
  p.o = o;
  p.d_o = d_o;
  p.dq = dq;
  p.dk = dk;
  p.dv = dv;
  p.lse = lse;
  p.delta = static_cast<float*>(workspace);
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
  KernelStatus s = check_cuda(g, dtype, mask, {o, lse, q, k, v}, seq, batch);
  if (!s.ok()) return s;
  if (path == ForwardPath::kHopper && !hopper_device()) {
    return KernelStatus::unsupported(
        "attention forward: the Hopper kernel needs a compute capability 9.0 device");
  }
  if (g.empty()) return s;
  if (forward_overlaps(g, dtype, o, lse, q, k, v, cu_seqlens_extent(nullptr, 0))) {
    return KernelStatus::invalid_argument("attention forward: o or lse overlaps an input");
  }
  const bool full = mask == AttentionMask::kFull;
  if (path == ForwardPath::kHopper) {
    if (!hopper_forward_supports(g, dtype)) {
      return KernelStatus::unsupported("attention forward: problem outside the Hopper kernel");
    }
    return hopper_forward(o, lse, q, k, v, g, dtype, scale, full, Sequences{}, stream);
  }
  if (path == ForwardPath::kAuto && hopper_device() && hopper_forward_supports(g, dtype)) {
    s = hopper_forward(o, lse, q, k, v, g, dtype, scale, full, Sequences{}, stream);
    // kUnsupported: the driver refused the tensor maps; the portable kernel runs.
    if (s.code() != KernelStatus::Code::kUnsupported) return s;
  }
  return portable_forward(common_params(g, q, k, v, scale, mask), o, lse, dtype, head_dim, stream);
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

KernelStatus attention_varlen_forward_cuda_path(
    ForwardPath path, AttentionMask mask, void* o, float* lse, const void* q, const void* k,
    const void* v, const int32_t* cu_seqlens, int64_t num_seqs, int64_t total_tokens,
    int64_t max_seqlen, int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t qkv_row_stride,
    int64_t o_row_stride, DType dtype, float scale, cudaStream_t stream) {
  const Geometry flat =
      flat_geometry(total_tokens, heads, kv_heads, head_dim, qkv_row_stride, o_row_stride);
  KernelStatus s = check_varlen(flat, cu_seqlens, num_seqs, max_seqlen);
  if (!s.ok()) return s;
  s = check_cuda(flat, dtype, mask, {o, lse, q, k, v}, max_seqlen, num_seqs);
  if (!s.ok()) return s;
  if (path == ForwardPath::kHopper && !hopper_device()) {
    return KernelStatus::unsupported(
        "attention forward: the Hopper kernel needs a compute capability 9.0 device");
  }
  if (flat.empty()) return s;
  if (forward_overlaps(flat, dtype, o, lse, q, k, v, cu_seqlens_extent(cu_seqlens, num_seqs))) {
    return KernelStatus::invalid_argument("attention forward: o or lse overlaps an input");
  }
  const bool full = mask == AttentionMask::kFull;
  const Sequences seqs{cu_seqlens, num_seqs, max_seqlen};
  if (path == ForwardPath::kHopper) {
    if (!hopper_forward_supports(flat, dtype, seqs)) {
      return KernelStatus::unsupported("attention forward: problem outside the Hopper kernel");
    }
    return hopper_forward(o, lse, q, k, v, flat, dtype, scale, full, seqs, stream);
  }
  if (path == ForwardPath::kAuto && hopper_device() && hopper_forward_supports(flat, dtype, seqs)) {
    s = hopper_forward(o, lse, q, k, v, flat, dtype, scale, full, seqs, stream);
    if (s.code() != KernelStatus::Code::kUnsupported) return s;
  }
  return portable_forward(
      varlen_params(flat, q, k, v, scale, mask, cu_seqlens, num_seqs, max_seqlen), o, lse, dtype,
      head_dim, stream);
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

KernelStatus attention_varlen_forward_cuda(void* o, float* lse, const void* q, const void* k,
                                           const void* v, const int32_t* cu_seqlens,
                                           int64_t num_seqs, int64_t total_tokens,
                                           int64_t max_seqlen, int64_t heads, int64_t kv_heads,
                                           int64_t head_dim, int64_t qkv_row_stride,
                                           int64_t o_row_stride, DType dtype, float scale,
                                           AttentionMask mask, cudaStream_t stream) {
  return internal::attention_varlen_forward_cuda_path(
      internal::ForwardPath::kAuto, mask, o, lse, q, k, v, cu_seqlens, num_seqs, total_tokens,
      max_seqlen, heads, kv_heads, head_dim, qkv_row_stride, o_row_stride, dtype, scale, stream);
}


namespace {
// The fused-dQ scratch starts after delta's rows, rounded up to 256 bytes.
size_t dq_accum_offset(const internal::Geometry& g) {
  return (row_floats_bytes(g.batch, g.heads, g.seq) + 255) & ~size_t{255};
}
}  // namespace

size_t attention_backward_workspace_bytes(int64_t batch, int64_t heads, int64_t seq,
                                          int64_t head_dim) {
  if (head_dim <= 64) {
    if (batch <= 0 || heads <= 0 || seq <= 0 || head_dim <= 0) return 0;
    return row_floats_bytes(batch, heads, seq);
  }
  return internal::fused_dq_workspace_bytes(batch, heads, seq, head_dim);
}

namespace internal {
size_t fused_dq_workspace_bytes(int64_t batch, int64_t heads, int64_t seq, int64_t head_dim) {
  if (batch <= 0 || heads <= 0 || seq <= 0 || head_dim <= 0) return 0;
  const Geometry g{batch, heads, heads, seq, head_dim, heads * head_dim, heads * head_dim};
  return dq_accum_offset(g) + hopper_dq_accum_bytes(g);
}
}  // namespace internal

size_t attention_varlen_backward_workspace_bytes(int64_t heads, int64_t total_tokens) {
  if (heads <= 0 || total_tokens <= 0) return 0;
  return row_floats_bytes(1, heads, total_tokens);
}

namespace internal {

KernelStatus attention_backward_cuda_path(
    BackwardPath path, AttentionMask mask, void* dq, void* dk, void* dv, const void* d_o,
    const void* q, const void* k, const void* v, const void* o, const float* lse, void* workspace,
    int64_t batch, int64_t heads, int64_t kv_heads, int64_t seq, int64_t head_dim,
    int64_t qkv_row_stride, int64_t o_row_stride, DType dtype, float scale, cudaStream_t stream) {
  const Geometry g{batch, heads, kv_heads, seq, head_dim, qkv_row_stride, o_row_stride};
  KernelStatus s =
      check_cuda(g, dtype, mask, {dq, dk, dv, d_o, q, k, v, o, lse, workspace}, seq, batch);
  if (!s.ok()) return s;
  if ((path == BackwardPath::kHopper || path == BackwardPath::kHopperFusedDq) &&
      !hopper_device()) {
    return KernelStatus::unsupported(
        "attention backward: the Hopper kernels need a compute capability 9.0 device");
  }
  if (g.empty()) return s;
  const bool hopper_path = path == BackwardPath::kHopper || path == BackwardPath::kHopperFusedDq;
  if (hopper_path && !hopper_backward_supports(g, dtype)) {
    return KernelStatus::unsupported("attention backward: problem outside the Hopper kernels");
  }
  const bool automatic =
      path == BackwardPath::kAuto || path == BackwardPath::kAutoDeterministic;
  const bool hopper =
      hopper_path || (automatic && hopper_device() && hopper_backward_supports(g, dtype));
  // kAuto fuses dQ where that is the faster kernel, head_dim above 64 (where
  // attention_backward_workspace_bytes includes the parts).
  const bool fused = path == BackwardPath::kHopperFusedDq ||
                     (path == BackwardPath::kAuto && hopper && head_dim > 64);
  // The workspace: delta's rows, and after them the fused dQ's parts.
  const size_t workspace_bytes = fused ? dq_accum_offset(g) + hopper_dq_accum_bytes(g)
                                       : row_floats_bytes(g.batch, g.heads, g.seq);
  if (backward_overlaps(g, dtype, dq, dk, dv, d_o, q, k, v, o, lse, workspace, workspace_bytes,
                        cu_seqlens_extent(nullptr, 0))) {
    return KernelStatus::invalid_argument(
        "attention backward: dq, dk, dv or the workspace overlaps an input or each other");
  }
  Params p = common_params(g, q, k, v, scale, mask);
  set_backward(p, dq, dk, dv, d_o, o, lse, workspace);
  float* dq_accum = fused ? reinterpret_cast<float*>(static_cast<char*>(workspace) +
                                                     dq_accum_offset(g))
                          : nullptr;
  return dispatch(dtype, head_dim, [&](auto tag, auto dim) {
    return backward_typed<decltype(tag), decltype(dim)::value>(p, stream, hopper, automatic, g,
                                                               dtype, dq_accum);
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

KernelStatus attention_varlen_backward_cuda_path(
    BackwardPath path, AttentionMask mask, void* dq, void* dk, void* dv, const void* d_o,
    const void* q, const void* k, const void* v, const void* o, const float* lse, void* workspace,
    const int32_t* cu_seqlens, int64_t num_seqs, int64_t total_tokens, int64_t max_seqlen,
    int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t qkv_row_stride,
    int64_t o_row_stride, DType dtype, float scale, cudaStream_t stream) {
  const Geometry flat =
      flat_geometry(total_tokens, heads, kv_heads, head_dim, qkv_row_stride, o_row_stride);
  KernelStatus s = check_varlen(flat, cu_seqlens, num_seqs, max_seqlen);
  if (!s.ok()) return s;
  s = check_cuda(flat, dtype, mask, {dq, dk, dv, d_o, q, k, v, o, lse, workspace}, max_seqlen,
                 num_seqs);
  if (!s.ok()) return s;
  // The fused dQ's scratch is sized for the batch layout
  // (attention_backward_workspace_bytes); varlen runs the deterministic
  // Hopper backward.
  if (path == BackwardPath::kHopperFusedDq) {
    return KernelStatus::unsupported(
        "attention backward: the fused dQ does not take the varlen layout");
  }
  if (path == BackwardPath::kHopper && !hopper_device()) {
    return KernelStatus::unsupported(
        "attention backward: the Hopper kernels need a compute capability 9.0 device");
  }
  if (flat.empty()) return s;
  if (backward_overlaps(flat, dtype, dq, dk, dv, d_o, q, k, v, o, lse, workspace,
                        attention_varlen_backward_workspace_bytes(heads, total_tokens),
                        cu_seqlens_extent(cu_seqlens, num_seqs))) {
    return KernelStatus::invalid_argument(
        "attention backward: dq, dk, dv or the workspace overlaps an input or each other");
  }
  const Sequences seqs{cu_seqlens, num_seqs, max_seqlen};
  const bool supported = hopper_backward_supports(flat, dtype, seqs);
  if (path == BackwardPath::kHopper && !supported) {
    return KernelStatus::unsupported("attention backward: problem outside the Hopper kernels");
  }
  const bool automatic =
      path == BackwardPath::kAuto || path == BackwardPath::kAutoDeterministic;
  const bool hopper =
      path == BackwardPath::kHopper || (automatic && hopper_device() && supported);
  Params p = varlen_params(flat, q, k, v, scale, mask, cu_seqlens, num_seqs, max_seqlen);
  set_backward(p, dq, dk, dv, d_o, o, lse, workspace);
  return dispatch(dtype, head_dim, [&](auto tag, auto dim) {
    return backward_typed<decltype(tag), decltype(dim)::value>(p, stream, hopper, automatic, flat,
                                                               dtype, nullptr, seqs);
  });
}

}  // namespace internal

KernelStatus attention_backward_cuda(void* dq, void* dk, void* dv, const void* d_o, const void* q,
                                     const void* k, const void* v, const void* o, const float* lse,
                                     void* workspace, int64_t batch, int64_t heads,
                                     int64_t kv_heads, int64_t seq, int64_t head_dim,
                                     int64_t qkv_row_stride, int64_t o_row_stride, DType dtype,
                                     float scale, AttentionMask mask, bool deterministic,
                                     cudaStream_t stream) {
  return internal::attention_backward_cuda_path(
      deterministic ? internal::BackwardPath::kAutoDeterministic : internal::BackwardPath::kAuto,
      mask, dq, dk, dv, d_o, q, k, v, o, lse, workspace, batch, heads, kv_heads, seq, head_dim,
      qkv_row_stride, o_row_stride, dtype, scale, stream);
}

KernelStatus causal_attention_backward_cuda(void* dq, void* dk, void* dv, const void* d_o,
                                            const void* q, const void* k, const void* v,
                                            const void* o, const float* lse, void* workspace,
                                            int64_t batch, int64_t heads, int64_t kv_heads,
                                            int64_t seq, int64_t head_dim, int64_t qkv_row_stride,
                                            int64_t o_row_stride, DType dtype, float scale,
                                            bool deterministic, cudaStream_t stream) {
  return attention_backward_cuda(dq, dk, dv, d_o, q, k, v, o, lse, workspace, batch, heads,
                                 kv_heads, seq, head_dim, qkv_row_stride, o_row_stride, dtype,
                                 scale, AttentionMask::kCausal, deterministic, stream);
}

KernelStatus attention_varlen_backward_cuda(void* dq, void* dk, void* dv, const void* d_o,
                                            const void* q, const void* k, const void* v,
                                            const void* o, const float* lse, void* workspace,
                                            const int32_t* cu_seqlens, int64_t num_seqs,
                                            int64_t total_tokens, int64_t max_seqlen,
                                            int64_t heads, int64_t kv_heads, int64_t head_dim,
                                            int64_t qkv_row_stride, int64_t o_row_stride,
                                            DType dtype, float scale, AttentionMask mask,
                                            cudaStream_t stream) {
  return internal::attention_varlen_backward_cuda_path(
      internal::BackwardPath::kAuto, mask, dq, dk, dv, d_o, q, k, v, o, lse, workspace,
      cu_seqlens, num_seqs, total_tokens, max_seqlen, heads, kv_heads, head_dim, qkv_row_stride,
      o_row_stride, dtype, scale, stream);
}

}  // namespace colossal::kernels::attention
