// Private to kernels/attention: the pieces the Hopper (sm_90a) kernels share,
// attention_hopper.cu's forward and attention_hopper_backward.cu's backward:
// PTX wrappers (mbarriers, TMA, setmaxnreg, wgmma), the shared-memory matrix
// descriptors of 128-byte-swizzled tiles, the wgmma shapes the kernels use,
// and the host's tensor maps. The smem layout they assume is described at the
// top of attention_hopper.cu: tiles stored as column chunks of [rows x 64]
// 16-bit elements, 128-byte rows, 1024-aligned chunk bases, written by TMA
// with CU_TENSOR_MAP_SWIZZLE_128B and read by wgmma with swizzle mode 1.
// Include only from those two .cu files (sm_90a targets).
#ifndef COLOSSAL_KERNELS_ATTENTION_ATTENTION_HOPPER_COMMON_CUH_
#define COLOSSAL_KERNELS_ATTENTION_ATTENTION_HOPPER_COMMON_CUH_

#include <cuda.h>  // CUtensorMap and the encoder's types only; libcuda is not linked
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/attention/attention_internal.h"
#include "kernels/attention/tile_order.h"
#include "kernels/common/cuda_utils.cuh"
#include "kernels/common/dtype.h"
#include "kernels/common/status.h"

namespace colossal::kernels::attention::internal::hopper {

constexpr int kRowBytes = 128;  // one swizzled row: 64 16-bit elements
constexpr int kChunkElems = kRowBytes / 2;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Registers each thread of a CTA of `threads` threads is launched with under
// __launch_bounds__(threads, 1): the 64K register file in the allocation's
// unit of 8 a thread (168 for 384 threads). setmaxnreg only moves registers
// between the CTA's warpgroups, so its targets must fit in this many times
// `threads`, or setmaxnreg.inc waits for registers that never come free.
constexpr int launch_regs(int threads) { return 65536 / threads / 8 * 8; }

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
// PTX wrappers (sm_90a).

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// One arrival that also raises the phase's expected transaction bytes.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Returns once the phase of parity `parity` has completed (phase k has parity
// k & 1; a barrier is at most one phase ahead of any waiter here).
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

// TMA: the box at coordinates {c0 (head_dim), c1 (position), c2 (head), c3
// (batch)} of `map` into shared memory at `dst`, completing `bar`'s
// transaction bytes. Out-of-bounds elements arrive as zeros and still count.
__device__ __forceinline__ void tma_load(const CUtensorMap* map, uint32_t dst, uint32_t bar, int c0,
                                         int c1, int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
}

template <int kRegs>
__device__ __forceinline__ void regs_increase() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void regs_decrease() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

// Named barriers (ids 1..15; 0 is __syncthreads'): `sync` waits until
// `count` threads (a multiple of 32) arrived or synced at `id`; `arrive`
// counts this warp without waiting.
__device__ __forceinline__ void named_bar_sync(int id, int count) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
__device__ __forceinline__ void named_bar_arrive(int id, int count) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Pins an accumulator register between wgmma.wait_group and its first use
// (and after its last use before the next wgmma): the compiler sees each
// register redefined by a volatile statement that stays ordered after the
// wait, so no read of the registers moves above it.
template <int N>
__device__ __forceinline__ void fence_regs(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}

// Bulk asynchronous reduction (sm_90): global[dst .. + bytes) += shared[src ..
// + bytes) element-wise in fp32, as one bulk-group operation issued by one
// thread. The source must have been made visible to the async proxy
// (fence_proxy_async() by its writers, then a barrier) and must not be
// overwritten before bulk_wait_read() returns. bytes: a multiple of 16, both
// addresses 16-byte aligned.
__device__ __forceinline__ void bulk_reduce_add_f32(float* dst, uint32_t src, uint32_t bytes) {
  asm volatile(
      "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst),
      "r"(src), "r"(bytes)
      : "memory");
}
__device__ __forceinline__ void bulk_commit() {
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
// This thread's bulk groups have finished reading their shared sources.
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}
// ... and have completed (their global writes done).
__device__ __forceinline__ void bulk_wait() {
  asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}
// Orders this thread's earlier generic-proxy shared-memory writes before
// later async-proxy accesses (wgmma operands, bulk copies) after a barrier.
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void st_shared_u32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}
__device__ __forceinline__ void st_shared_f32x2(uint32_t addr, float x, float y) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(addr), "f"(x), "f"(y) : "memory");
}

// Shared-memory matrix descriptors (PTX ISA, "Matrix Descriptor Format"):
//   bits  0-13  start address >> 4
//   bits 16-29  leading dimension byte offset (LBO) >> 4
//   bits 32-45  stride dimension byte offset (SBO) >> 4
//   bits 49-51  base offset: 0 (every chunk is 1024-aligned)
//   bits 62-63  swizzle mode: 1 = 128-byte swizzle
__device__ __forceinline__ uint64_t make_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) |
         (static_cast<uint64_t>((lbo & 0x3FFFF) >> 4) << 16) |
         (static_cast<uint64_t>((sbo & 0x3FFFF) >> 4) << 32) | (uint64_t{1} << 62);
}

// K-major operand (rows = M or N, k = head_dim contiguous), 128B swizzle: the
// canonical layout is 8-row x 128-byte atoms, rows 128 bytes apart inside an
// atom and atoms SBO = 1024 bytes apart down the rows (our chunks store rows
// back to back). One k16 step reads 32 bytes of each row, inside one atom
// column, so LBO (the step to the next atom along k) is never used: 16 bytes
// (field value 1), as CUTLASS encodes it. `addr` = chunk base + row0 * 128 +
// (k0 % 64) * 2.
__device__ __forceinline__ uint64_t desc_k_major(uint32_t addr) {
  return make_desc(addr, 16, 8 * kRowBytes);
}

// MN-major operand (V as B of O = P V: k = keys are V's rows, n = head_dim is
// contiguous), 128B swizzle: the canonical layout is atoms of 64 n-elements
// (128 bytes) x 8 k-rows, rows 128 bytes apart; SBO = the step between 8-row
// groups along k (1024 bytes), LBO = the step between 64-element groups along
// n: one column chunk of the tile, `chunk_bytes` = its rows * 128 (the
// forward's V: kBlockN * 128). `addr` = tile base + k0 * 128.
__device__ __forceinline__ uint64_t desc_mn_major(uint32_t addr, uint32_t chunk_bytes) {
  return make_desc(addr, chunk_bytes, 8 * kRowBytes);
}

// wgmma operand lists: 64 or 32 fp32 accumulators "+f".
#define COLOSSAL_F8(d, i)                                                                         \
  "+f"(d[i + 0]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
      "+f"(d[i + 6]), "+f"(d[i + 7])
#define COLOSSAL_F32(d) COLOSSAL_F8(d, 0), COLOSSAL_F8(d, 8), COLOSSAL_F8(d, 16), COLOSSAL_F8(d, 24)
#define COLOSSAL_F64(d) \
  COLOSSAL_F32(d), COLOSSAL_F8(d, 32), COLOSSAL_F8(d, 40), COLOSSAL_F8(d, 48), COLOSSAL_F8(d, 56)
#define COLOSSAL_ACC32                                                                     \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, " \
  "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define COLOSSAL_ACC64                                                                     \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, " \
  "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, "  \
  "%36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, "  \
  "%53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"

// d (64 x 128, fp32) = (scale_d ? d : 0) + A B: A = 64 x 16 and B = 16 x 128
// from shared memory, both K-major (imm-trans-a = imm-trans-b = 0).
#define COLOSSAL_WGMMA_SS_N128(ty)                                                \
  asm volatile(                                                                   \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." ty "." ty " " COLOSSAL_ACC64 \
      ", %64, %65, p, 1, 1, 0, 0;\n}\n"                                           \
      : COLOSSAL_F64(d)                                                           \
      : "l"(desc_a), "l"(desc_b), "r"(scale_d))
// The same with N = 64 (32 accumulators).
#define COLOSSAL_WGMMA_SS_N64(ty)                                                \
  asm volatile(                                                                  \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                               \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32." ty "." ty " " COLOSSAL_ACC32 \
      ", %32, %33, p, 1, 1, 0, 0;\n}\n"                                          \
      : COLOSSAL_F32(d)                                                          \
      : "l"(desc_a), "l"(desc_b), "r"(scale_d))
// The same with both operands MN-major (imm-trans-a = imm-trans-b = 1): A's
// 64 rows contiguous in shared memory, B's N columns contiguous.
#define COLOSSAL_WGMMA_SS_N64_TT(ty)                                             \
  asm volatile(                                                                  \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                               \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32." ty "." ty " " COLOSSAL_ACC32 \
      ", %32, %33, p, 1, 1, 1, 1;\n}\n"                                          \
      : COLOSSAL_F32(d)                                                          \
      : "l"(desc_a), "l"(desc_b), "r"(scale_d))
// d (64 x N) += A B: A = 64 x 16 from registers (a[0..3], the m16n8k16 A
// fragment of each warp's 16 rows), B = 16 x N from shared memory, MN-major
// (imm-trans-b = 1).
#define COLOSSAL_WGMMA_RS_N128(ty)                                                \
  asm volatile(                                                                   \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." ty "." ty " " COLOSSAL_ACC64 \
      ", {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"                             \
      : COLOSSAL_F64(d)                                                           \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1))
#define COLOSSAL_WGMMA_RS_N64(ty)                                                \
  asm volatile(                                                                  \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                               \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32." ty "." ty " " COLOSSAL_ACC32 \
      ", {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"                            \
      : COLOSSAL_F32(d)                                                          \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1))

template <typename T>
struct Wgmma {
  static constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  static_assert(kBf16 || std::is_same_v<T, __half>, "Wgmma: bfloat16 or half");

  // S tile: 64 query rows x 128 keys.
  static __device__ __forceinline__ void qk(float (&d)[64], uint64_t desc_a, uint64_t desc_b,
                                            int scale_d) {
    if constexpr (kBf16) {
      COLOSSAL_WGMMA_SS_N128("bf16");
    } else {
      COLOSSAL_WGMMA_SS_N128("f16");
    }
  }
  // 64 x 64 tile, both operands K-major from shared memory (the backward's
  // S, dP and their transposes over 64-key or 64-query tiles).
  static __device__ __forceinline__ void qk(float (&d)[32], uint64_t desc_a, uint64_t desc_b,
                                            int scale_d) {
    if constexpr (kBf16) {
      COLOSSAL_WGMMA_SS_N64("bf16");
    } else {
      COLOSSAL_WGMMA_SS_N64("f16");
    }
  }
  // 64 x 64 tile, A and B both MN-major in shared memory (the backward's
  // dQ = dS K from the transposed dS^T tile and K's rows).
  static __device__ __forceinline__ void ss_tt(float (&d)[32], uint64_t desc_a, uint64_t desc_b,
                                               int scale_d) {
    if constexpr (kBf16) {
      COLOSSAL_WGMMA_SS_N64_TT("bf16");
    } else {
      COLOSSAL_WGMMA_SS_N64_TT("f16");
    }
  }
  // O tile: 64 query rows x D, D = 128 (64 accumulators a thread) or 64 (32).
  static __device__ __forceinline__ void pv(float (&d)[64], const uint32_t (&a)[4],
                                            uint64_t desc_b) {
    if constexpr (kBf16) {
      COLOSSAL_WGMMA_RS_N128("bf16");
    } else {
      COLOSSAL_WGMMA_RS_N128("f16");
    }
  }
  static __device__ __forceinline__ void pv(float (&d)[32], const uint32_t (&a)[4],
                                            uint64_t desc_b) {
    if constexpr (kBf16) {
      COLOSSAL_WGMMA_RS_N64("bf16");
    } else {
      COLOSSAL_WGMMA_RS_N64("f16");
    }
  }
  // lo in the low half, hi in the high half (lower column first, as the A
  // fragment wants).
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    uint32_t r;
    if constexpr (kBf16) {
      __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
      r = *reinterpret_cast<uint32_t*>(&v);
    } else {
      __half2 v = __floats2half2_rn(lo, hi);
      r = *reinterpret_cast<uint32_t*>(&v);
    }
    return r;
  }
};
#undef COLOSSAL_WGMMA_SS_N128
#undef COLOSSAL_WGMMA_SS_N64
#undef COLOSSAL_WGMMA_SS_N64_TT
#undef COLOSSAL_WGMMA_RS_N128
#undef COLOSSAL_WGMMA_RS_N64
#undef COLOSSAL_ACC32
#undef COLOSSAL_ACC64
#undef COLOSSAL_F64
#undef COLOSSAL_F32
#undef COLOSSAL_F8

// 2^x; exact 0 for -inf.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Where sequence b's rows are, in the batch layout (cu_seqlens null: batch b
// of `seq` positions) or the varlen one (sequence b of the packed rows,
// cu_seqlens[b] .. cu_seqlens[b + 1]; `seq` is then total_tokens, the flat
// maps' row count). Positions t count from the sequence's start.
struct SeqView {
  int len;         // positions
  int map_b;       // the tensor maps' batch coordinate
  int map_row0;    // the maps' row coordinate of position 0
  int64_t row0;    // the row of position 0 in o, dq, dk, dv ([rows, row_stride])
  int64_t stats0;  // lse / delta of (query head h, position t): stats0 + h * stats_head + t
  int64_t stats_head;
};
__device__ __forceinline__ SeqView seq_view(const int* cu_seqlens, int b, int seq, int heads) {
  if (cu_seqlens == nullptr) {
    return {seq, b, 0, static_cast<int64_t>(b) * seq, static_cast<int64_t>(b) * heads * seq, seq};
  }
  const int start = cu_seqlens[b];
  return {cu_seqlens[b + 1] - start, 0, start, start, start, seq};
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// The current device's L2 cache in bytes; 0 if the runtime cannot tell.
inline int64_t l2_bytes() {
  int device = 0, l2 = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return l2;
}

// section_heads() on the current device's L2 cache (tile_order.h); one group
// per section where the size is unknown.
inline int l2_section(int64_t bytes_per_head, int64_t heads, int64_t group) {
  return section_heads(l2_bytes(), bytes_per_head, heads, group);
}

// ---------------------------------------------------------------------------
// Host: tensor maps through the driver's cuTensorMapEncodeTiled, fetched at run
// time (cudaGetDriverEntryPointByVersion) so nothing links libcuda.

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                 const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                 const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                 CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

inline EncodeTiled encode_tiled() {
  static const EncodeTiled fn = []() -> EncodeTiled {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    // 12000: the ABI of cuTensorMapEncodeTiled as CUDA 12.0 introduced it.
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return nullptr;
    }
    return reinterpret_cast<EncodeTiled>(f);
  }();
  return fn;
}

// The largest byte stride a tensor map takes (exclusive).
constexpr int64_t kMaxMapStride = int64_t{1} << 40;

// A 4-D map {head_dim, seq, heads_n, batch} over rows `row_stride` elements
// apart (head n at n * head_dim), boxes of {64, box_rows, 1, 1} swizzled by
// 128 bytes; out-of-bounds elements read as zero.
inline KernelStatus make_map(CUtensorMap* map, const void* base, DType dtype, const Geometry& g,
                             int64_t heads_n, int64_t row_stride, int box_rows) {
  const EncodeTiled encode = encode_tiled();
  if (encode == nullptr) {
    return KernelStatus::unsupported("attention hopper: cuTensorMapEncodeTiled unavailable");
  }
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(g.head_dim), static_cast<cuuint64_t>(g.seq),
                              static_cast<cuuint64_t>(heads_n), static_cast<cuuint64_t>(g.batch)};
  const cuuint64_t strides[3] = {static_cast<cuuint64_t>(row_stride * 2),
                                 static_cast<cuuint64_t>(g.head_dim * 2),
                                 static_cast<cuuint64_t>(g.seq * row_stride * 2)};
  const cuuint32_t box[4] = {kChunkElems, static_cast<cuuint32_t>(box_rows), 1, 1};
  const cuuint32_t elem_strides[4] = {1, 1, 1, 1};
  const CUresult r = encode(
      map,
      dtype == DType::kBF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4,
      const_cast<void*>(base), dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  // Unsupported rather than an error: the automatic dispatch then runs the
  // portable kernel (the supports() checks should have excluded this).
  if (r != CUDA_SUCCESS) {
    return KernelStatus::unsupported("attention hopper: cuTensorMapEncodeTiled refused the tensor");
  }
  return KernelStatus();
}

// The maps of q, k, v and, when `d_o` is given, d_o (maps[0..3]): q and d_o in
// boxes of `q_rows` rows, k and v in boxes of `kv_rows`.
inline KernelStatus make_maps(CUtensorMap* maps, const void* q, const void* k, const void* v,
                              const void* d_o, DType dtype, const Geometry& g, int q_rows,
                              int kv_rows) {
  KernelStatus s = make_map(&maps[0], q, dtype, g, g.heads, g.qkv_row_stride, q_rows);
  if (s.ok()) s = make_map(&maps[1], k, dtype, g, g.kv_heads, g.qkv_row_stride, kv_rows);
  if (s.ok()) s = make_map(&maps[2], v, dtype, g, g.kv_heads, g.qkv_row_stride, kv_rows);
  if (s.ok() && d_o != nullptr) {
    s = make_map(&maps[3], d_o, dtype, g, g.heads, g.o_row_stride, q_rows);
  }
  return s;
}

// `kernel` on `grid` CTAs of `threads` threads with `smem` bytes of
// dynamic shared memory (its limit raised first), on `stream`.
template <typename Kernel, typename... Args>
KernelStatus launch_kernel(Kernel kernel, unsigned grid, int threads, int smem,
                           cudaStream_t stream, const Args&... args) {
  const KernelStatus s = cuda::to_status(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  if (!s.ok()) return s;
  kernel<<<grid, threads, smem, stream>>>(args...);
  return cuda::last_launch_status();
}

}  // namespace colossal::kernels::attention::internal::hopper

#endif  // COLOSSAL_KERNELS_ATTENTION_ATTENTION_HOPPER_COMMON_CUH_
