// CUDA fused attention (causal or full mask), backward, for Hopper (compute capability 9.0,
// built for sm_90a only): the portable backward's deterministic two-kernel
// split (attention.cu: delta, dK/dV per key tile, dQ per query tile; no
// atomics) on wgmma fed by TMA, warp-specialized like attention_hopper.cu's
// forward, whose smem layout, descriptors and fragment layouts it reuses
// (attention_hopper_common.cuh). The delta kernel (rowsum(dO * O) into the
// workspace) is attention.cu's; it runs first on the same stream.
//
// Both kernels: 384 threads = 3 warpgroups. Warpgroup 0 is the producer
// (setmaxnreg.dec), warpgroups 1 and 2 the consumers (setmaxnreg.inc), 64 rows
// of the CTA's tile each. Tiles are 128-byte-swizzled column chunks of
// [rows x 64] elements written by TMA (4-D maps {head_dim, seq, heads, batch},
// zero fill past seq) and read by wgmma through descriptors; a 2-stage ring
// of "full" (TMA transaction bytes) / "empty" (8 consumer warps) mbarriers.
//
// dkdv kernel: CTA = (batch, kv head, 128 keys); heaviest (lowest) key tiles
// first (causal), or one kv head's key tiles together (full mask, and causal
// where a kv head's query side exceeds the L2; tile_slot, launch()).
// K and V of the tile land once (TMA). Then, for each query head of the kv
// head's group in order and each query step (64 queries; 128 at head dim 64
// without the fused dQ: kDkdvStep) from the step holding the tile's first
// key to the end, the producer's first warp loads the step's
// Q and dO (TMA, one lane) and its lse * log2 e (+inf past seq, so P = 0
// there) and delta (0 past seq) into the stage (all 32 lanes, plain loads and
// stores; the full barrier counts the 32 lanes' arrivals). Consumer
// warpgroup wg owns keys kv0 + 64 wg .. + 63 and per step runs
//   S^T  = K Q^T     wgmma m64n64k16 (m64n128k16 over 128-query steps), A = K
//                    rows, B = Q rows, both K-major smem
//   dP^T = V dO^T    the same with A = V rows, B = dO rows
//                    (one commit group with S^T)
//   P^T  = exp2(S^T scale log2 e - lse log2 e), 0 where query < key (the steps
//          that overlap the tile's keys) -- fp32 registers;
//   dS^T = P^T (dP^T - delta)  (fp32 P, as the portable kernel);
//   dV  += P^T dO    wgmma m64nDk16, A = P^T from registers (the accumulator
//                    layout of S^T is the register-A layout, as the forward's
//                    P), B = dO MN-major (rows are queries = k, head_dim = n
//                    contiguous: the transpose flag, the forward's V case);
//   dK  += dS^T Q    the same with A = dS^T, B = Q MN-major
//                    (one commit group with dV).
// dK, dV stay in fp32 registers across the group's query heads (a fixed
// order: deterministic) and are written once: dK * scale, dV, rounded.
//
// dq kernel: CTA = (batch, query head, 128 queries); heaviest (latest) query
// tiles first, heads in L2 sections. Q and dO land once; K and V tiles of 64 keys (128 at head dim
// 64: kDqStep) stream through
// the ring from the diagonal down to key tile 0. Consumer warpgroup wg owns
// queries q0 + 64 wg .. + 63, with its rows' lse and delta in registers:
//   S  = Q K^T, dP = dO V^T   wgmma m64n64k16 (m64n128k16 over 128-key steps),
//                             all operands K-major smem;
//   P, dS = P (dP - delta)    fp32, causal mask on the diagonal tiles;
//   dQ += dS K                wgmma m64nDk16, A = dS from registers, B = K
//                             MN-major (rows are keys = k: transpose flag).
// Finally dQ * scale, rounded once.
//
// Tails: rows past seq arrive as zeros; queries past seq get P = 0 through
// lse = +inf (dkdv) or their rows are never written (dq); keys past seq only
// meet queries before them (masked) or affect their own dK/dV rows, which are
// never written.
//
// Full mask (Params::full): dkdv visits every query step from 0 and masks
// nothing (queries past seq have P = 0 through lse = +inf; keys past seq only
// reach their own, unwritten, dK/dV rows); dq visits every key tile holding a
// key below seq and, on the last one, masks keys at or past seq (their K rows
// are zeros, so dS K would add nothing, but P is kept exactly 0 there).
//
// Fused dQ (the dkdv kernel with kFusedDq, dq_accum given): instead of the dq
// kernel, each dkdv step also writes dS^T (rounded) into shared memory in the
// swizzled layout TMA would write, both consumer warpgroups meet at a named
// barrier, and warpgroup w computes columns 64 w .. + 63 of the step's
// dQ share dS K over the tile's 128 keys (head_dim 64: its own 64 keys, every
// column), stages the 64 x 64 fp32 part in shared memory and adds it to
// dq_accum with one cp.reduce.async.bulk (the adds' order varies between
// runs); hopper_dq_convert_kernel rounds scale * dq_accum into dq. Keys past
// seq join dS K with P != 0 under the full mask; their K rows are TMA's zeros,
// so they add nothing -- which is why varlen (whose tiles read the next
// sequence's rows there) runs the deterministic kernels only.
//
// Varlen (Params::cu_seqlens): flat maps, each CTA's sequence from cu_seqlens
// (SeqView); the masks above exclude the next sequence's rows that a tile
// reads past the end. Head dim 96 runs as 128 (zero columns, not stored).
#include <cuda.h>  // CUtensorMap and the encoder's types only; libcuda is not linked
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>

#include "kernels/attention/attention_hopper.h"
#include "kernels/attention/attention_hopper_common.cuh"
#include "kernels/attention/dq_parts.h"
#include "kernels/common/cuda_utils.cuh"

namespace colossal::kernels::attention::internal {
namespace {

using namespace hopper;  // NOLINT: the shared Hopper pieces (attention_hopper_common.cuh)

constexpr int kStages = 2;     // ring depth (Q / dO steps, or K / V tiles)
constexpr int kConsumers = 2;  // consumer warpgroups, 64 rows each
constexpr int kThreads = 128 * (1 + kConsumers);
constexpr int kConsumerWarps = 4 * kConsumers;  // arrivals that empty a stage
constexpr int kProducerRegs = 24;               // setmaxnreg targets (multiples of 8)
constexpr int kConsumerRegs = 240;
static_assert(kProducerRegs * 128 + kConsumerRegs * 128 * kConsumers <=
                  launch_regs(kThreads) * kThreads,
              "setmaxnreg: the warpgroups' registers must fit what the CTA is launched with");

constexpr int kKvBlock = 128;  // dkdv: keys per CTA
constexpr int kQStep = 64;     // dkdv: queries per step (the fused dQ's parts are per kQStep)
constexpr int kDqBlock = 128;  // dq: queries per CTA

// Queries per dkdv step and keys per dq step: 64, or 128 in the deterministic
// kernels at head dim 64. There every product is short (k = 64), and the
// m64n64 ones that build S^T / dP^T (dkdv) and S / dP (dq) are bound by
// shared memory (both operands come from it: 4 KB per 64 x 64 x 16 product,
// as many bytes as the SM reads in the product's tensor-core cycles); m64n128
// halves the bytes per flop, and 128-row steps also double the k of the
// dV / dK / dQ products. At head dim 128 the accumulators of 128-wide steps
// would not fit the registers; the fused dQ's dS^T buffer is 64 queries wide.
template <int D, bool kFusedDq>
constexpr int kDkdvStep = D == 64 && !kFusedDq ? 128 : kQStep;
template <int D>
constexpr int kDqStep = D == 64 ? 128 : 64;

// Byte sizes of a tile of `rows` x D in column chunks of [rows x 64].
template <int D, int kRows>
struct Tile {
  static constexpr int kChunks = D / kChunkElems;
  static constexpr int kChunk = kRows * kRowBytes;  // 1024-aligned when kRows % 8 == 0
  static constexpr int kBytes = kChunks * kChunk;
};

struct Params {
  void* dq;
  void* dk;
  void* dv;
  const float* lse;
  const float* delta;
  float* dq_accum;  // fused dQ: the fp32 parts (kDqPart floats per step and warpgroup), zeroed
  const int* cu_seqlens;  // null: the batch layout; else varlen (seq = total_tokens)
  int64_t qkv_stride;
  int seq, heads, kv_heads, group;
  int head_dim;  // the tensors' (96 runs as 128: columns 96.. arrive as zeros, are not written)
  int bh;         // sequences * heads
  int bkv;        // sequences * kv_heads
  int q_steps;    // ceil(longest sequence / kQStep): the fused dq_accum parts' steps
  int q_blocks;   // dq: ceil(longest sequence / kDqBlock)
  int kv_blocks;  // dkdv: ceil(longest sequence / kKvBlock)
  int kv_section;  // dkdv: sequence-kv-heads per L2 section (tile_slot)
  int q_section;   // dq: sequence-heads per L2 section
  int full;       // 1: no causal mask
  float scale;       // softmax scale (dK and dQ are multiplied by it at the end)
  float scale_log2;  // scale * log2(e)
};

// dkdv barriers.
constexpr int kKvBarKV = 0;                                // K and V landed
constexpr int kKvBarFull = 1;                              // + stage: Q, dO, lse, delta landed
constexpr int kKvBarEmpty = kKvBarFull + kStages;          // + stage: consumed
constexpr int kKvBars = kKvBarEmpty + kStages;
// dq barriers.
constexpr int kDqBarQ = 0;                         // Q and dO landed
constexpr int kDqBarFull = 1;                      // + stage: K and V landed
constexpr int kDqBarEmpty = kDqBarFull + kStages;  // + stage: consumed
constexpr int kDqBars = kDqBarEmpty + kStages;

template <int D, int kStep>
constexpr int dkdv_tile_bytes() {  // K, V, Q[stages], dO[stages] + alignment slack
  return 2 * Tile<D, kKvBlock>::kBytes + 2 * kStages * Tile<D, kStep>::kBytes + 1024;
}
// Fused dQ (the dkdv kernel also adds dS K into dq_accum): the step's dS^T
// tile [128 keys x 64 queries] in two buffers (steps alternate), and each
// warpgroup's 64 x 64 fp32 dQ part staged for the bulk reduction.
constexpr int kDsBytes = kKvBlock * kRowBytes;       // 16 KB: one chunk of 128 rows
constexpr int kDqPart = kDqPartRows * kDqPartCols;    // floats of a warpgroup's part (dq_parts.h)
constexpr int kStageBytes = kDqPart * 4;              // 16 KB
template <int D, bool kFusedDq>
constexpr int dkdv_smem_bytes() {
  return dkdv_tile_bytes<D, kDkdvStep<D, kFusedDq>>() +
         (kFusedDq ? 2 * kDsBytes + 2 * kStageBytes : 0);
}
// Named barriers of the fused dkdv kernel: both consumer warpgroups' dS rows
// are in (256 threads); a warpgroup's staging buffer is free / full (128).
constexpr int kDsBar = 1;
constexpr int kStageBar = 2;  // + warpgroup

template <int D>
constexpr int dq_smem_bytes() {  // Q, dO, K[stages], V[stages] + alignment slack
  return 2 * Tile<D, kDqBlock>::kBytes + 2 * kStages * Tile<D, kDqStep<D>>::kBytes + 1024;
}

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)

__device__ __forceinline__ uint32_t bar_at(uint32_t bars, int i) { return bars + 8 * i; }

// Stores a warpgroup's 64 x D fp32 accumulator (times mul), rounded, to rows
// row_base and row_base + 8 of `base` (rows `stride` elements apart), columns
// 8c + 2t: a quad writes 16 contiguous bytes of a row per 8 columns. Rows at
// or past seq are skipped.
template <typename T, int D>
__device__ __forceinline__ void store_acc(const float (&acc)[D / 2], float mul, T* base,
                                          int64_t stride, int row_base, int seq, int cols, int t) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = row_base + 8 * r;
    if (row >= seq) continue;
    T* dst = base + static_cast<int64_t>(row) * stride + 2 * t;
#pragma unroll
    for (int c = 0; c < D / 8; ++c) {
      if (8 * c >= cols) break;
      *reinterpret_cast<uint32_t*>(dst + 8 * c) =
          Wgmma<T>::pack(acc[4 * c + 2 * r] * mul, acc[4 * c + 2 * r + 1] * mul);
    }
  }
}

// ---------------------------------------------------------------------------
// dK / dV.

template <int D>
struct KvShared {
  uint32_t k, v, q, d_o;  // tile bases; Q and dO: stage s at + s * Tile<D, step>::kBytes
  uint32_t ds, staging;   // fused dQ: dS^T buffers (+ kDsBytes), warpgroup staging (+ kStageBytes)
  uint32_t bars;
  float* stats;  // [kStages][2][step]: lse * log2 e, delta of the step's queries
  __device__ __forceinline__ uint32_t bar(int i) const { return bar_at(bars, i); }
};

// The producer's first warp: K and V once (lane 0), then per (query head r,
// step i) the step's lse / delta (every lane) and Q / dO (lane 0) into stage
// it % kStages once the consumers emptied its previous use.
template <int D, int kStep>
__device__ __forceinline__ void dkdv_produce(const KvShared<D>& sh, const CUtensorMap* q_map,
                                             const CUtensorMap* k_map, const CUtensorMap* v_map,
                                             const CUtensorMap* do_map, const Params& p,
                                             const SeqView& sv, int kvh, int kv0, int i0,
                                             int n_steps) {
  using KT = Tile<D, kKvBlock>;
  using QT = Tile<D, kStep>;
  const int lane = threadIdx.x % 32;
  if (lane == 0) {
    mbar_arrive_expect_tx(sh.bar(kKvBarKV), 2 * KT::kBytes);
#pragma unroll
    for (int c = 0; c < KT::kChunks; ++c) {
      tma_load(k_map, sh.k + c * KT::kChunk, sh.bar(kKvBarKV), c * kChunkElems,
               sv.map_row0 + kv0, kvh, sv.map_b);
      tma_load(v_map, sh.v + c * KT::kChunk, sh.bar(kKvBarKV), c * kChunkElems,
               sv.map_row0 + kv0, kvh, sv.map_b);
    }
  }
  int it = 0;
  for (int r = 0; r < p.group; ++r) {
    const int h = kvh * p.group + r;
    const int64_t rows = sv.stats0 + h * sv.stats_head;
    for (int i = i0; i < n_steps; ++i, ++it) {
      const int s = it % kStages;
      // The stage's previous use was it - kStages: its empty barrier completed
      // phase it / kStages - 1 when every consumer warp released it.
      if (it >= kStages) mbar_wait(sh.bar(kKvBarEmpty + s), ((it / kStages) - 1) & 1);
      const int q0 = i * kStep;
      float* st = sh.stats + s * 2 * kStep;
#pragma unroll
      for (int e = lane; e < kStep; e += 32) {
        const int row = q0 + e;
        st[e] = row < sv.len ? p.lse[rows + row] * kLog2e : INFINITY;
        st[kStep + e] = row < sv.len ? p.delta[rows + row] : 0.0f;
      }
      if (lane == 0) {
        // Its arrival (with the stage's bytes) after its own stores, like the
        // other lanes' plain arrivals: release, so the stats are visible to
        // the consumers' acquiring wait.
        mbar_arrive_expect_tx(sh.bar(kKvBarFull + s), 2 * QT::kBytes);
#pragma unroll
        for (int c = 0; c < QT::kChunks; ++c) {
          tma_load(q_map, sh.q + s * QT::kBytes + c * QT::kChunk, sh.bar(kKvBarFull + s),
                   c * kChunkElems, sv.map_row0 + q0, h, sv.map_b);
          tma_load(do_map, sh.d_o + s * QT::kBytes + c * QT::kChunk, sh.bar(kKvBarFull + s),
                   c * kChunkElems, sv.map_row0 + q0, h, sv.map_b);
        }
      } else {
        mbar_arrive(sh.bar(kKvBarFull + s));
      }
    }
  }
}

// Consumer warpgroup `wg`: keys kv0 + 64 wg .. + 63. Accumulator layout (see
// attention_hopper.cu): element 4c + i is row 16 warp + g + 8 (i / 2), column
// 8c + 2t + (i % 2); rows are keys here, columns queries (S^T, dP^T) or
// head_dim (dK, dV).
template <typename T, int D, bool kFusedDq>
__device__ __forceinline__ void dkdv_consume(const KvShared<D>& sh, const Params& p, int wg,
                                             const SeqView& sv, int b, int kvh, int kv0, int i0,
                                             int n_steps) {
  constexpr int kStep = kDkdvStep<D, kFusedDq>;
  static_assert(!kFusedDq || kStep == kQStep, "the fused dQ's buffers hold 64-query steps");
  using KT = Tile<D, kKvBlock>;
  using QT = Tile<D, kStep>;
  const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32, t = lane % 4;
  const int key_base = kv0 + 64 * wg + 16 * warp + lane / 4;  // keys key_base, key_base + 8
  const uint32_t k_rows = sh.k + wg * 64 * kRowBytes;         // 1024-aligned: 8 whole atoms
  const uint32_t v_rows = sh.v + wg * 64 * kRowBytes;
  const int key_last = kv0 + 64 * wg + 63;  // the warpgroup's last key

  float dk[D / 2], dv[D / 2];
#pragma unroll
  for (int e = 0; e < D / 2; ++e) dk[e] = dv[e] = 0.0f;

  mbar_wait(sh.bar(kKvBarKV), 0);
  int it = 0;
  for (int r = 0; r < p.group; ++r) {
    for (int i = i0; i < n_steps; ++i, ++it) {
      const int s = it % kStages;
      const uint32_t parity = (it / kStages) & 1;
      const uint32_t q_t = sh.q + s * QT::kBytes, do_t = sh.d_o + s * QT::kBytes;
      const float* st = sh.stats + s * 2 * kStep;

      // S^T = K Q^T and dP^T = V dO^T over head_dim in k16 steps (chunk kk / 4,
      // 32 (kk % 4) bytes into the rows), one commit group each, so P is
      // computed while dP^T still runs, and dV's product (which needs P
      // alone) runs while dS is computed. Steps of 128 queries do not
      // overlap: P^T, its packed copy and dP^T all live at once would not fit
      // the registers; they wait for both products and issue dV with dK.
      float sc[kStep / 2], dp[kStep / 2];
      mbar_wait(sh.bar(kKvBarFull + s), parity);
      __syncwarp();
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        const uint32_t off = (kk % 4) * 32;
        Wgmma<T>::qk(sc, desc_k_major(k_rows + (kk / 4) * KT::kChunk + off),
                     desc_k_major(q_t + (kk / 4) * QT::kChunk + off), kk > 0 ? 1 : 0);
      }
      wgmma_commit();
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        const uint32_t off = (kk % 4) * 32;
        Wgmma<T>::qk(dp, desc_k_major(v_rows + (kk / 4) * KT::kChunk + off),
                     desc_k_major(do_t + (kk / 4) * QT::kChunk + off), kk > 0 ? 1 : 0);
      }
      wgmma_commit();
      constexpr bool kOverlap = kStep == 64;
      wgmma_wait<kOverlap ? 1 : 0>();  // S^T landed (and dP^T unless kOverlap)
      fence_regs(sc);
      if constexpr (!kOverlap) fence_regs(dp);

      // P^T (0 where the query is before the key: only in steps that start
      // before the warpgroup's last key), packed into register-A fragments:
      // register j = pack(x[2j], x[2j+1]).
      const int q0 = i * kStep;
      const bool mask = !p.full && q0 < key_last;
      uint32_t pa[kStep / 4], da[kStep / 4];
#pragma unroll
      for (int c = 0; c < kStep / 8; ++c) {
        const float2 l2 = *reinterpret_cast<const float2*>(st + 8 * c + 2 * t);
        const int query = q0 + 8 * c + 2 * t;
#pragma unroll
        for (int i2 = 0; i2 < 4; ++i2) {
          const int e = 4 * c + i2;
          const float lse2 = (i2 & 1) ? l2.y : l2.x;
          float pv = fast_exp2(sc[e] * p.scale_log2 - lse2);
          if (mask && query + (i2 & 1) < key_base + 8 * (i2 >> 1)) pv = 0.0f;
          sc[e] = pv;
        }
      }
      // dV += P^T dO over the step's queries in k16 steps: step kk reads rows
      // 16kk.. of dO (16 * 128 bytes further each).
      auto issue_dv = [&]() {
#pragma unroll
        for (int j = 0; j < kStep / 4; ++j) pa[j] = Wgmma<T>::pack(sc[2 * j], sc[2 * j + 1]);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kStep / 16; ++kk) {
          const uint32_t a[4] = {pa[4 * kk], pa[4 * kk + 1], pa[4 * kk + 2], pa[4 * kk + 3]};
          Wgmma<T>::pv(dv, a, desc_mn_major(do_t + kk * 16 * kRowBytes, QT::kChunk));
        }
        wgmma_commit();
      };
      if constexpr (kOverlap) {
        issue_dv();
        wgmma_wait<1>();  // dP^T landed (dV's product may still run)
        fence_regs(dp);
      }

      // dS^T = P^T (dP^T - delta) (fp32 P, as the portable kernel), packed.
#pragma unroll
      for (int c = 0; c < kStep / 8; ++c) {
        const float2 d2 = *reinterpret_cast<const float2*>(st + kStep + 8 * c + 2 * t);
#pragma unroll
        for (int i2 = 0; i2 < 4; ++i2) {
          const int e = 4 * c + i2;
          dp[e] = sc[e] * (dp[e] - ((i2 & 1) ? d2.y : d2.x));
        }
      }
      if constexpr (!kOverlap) issue_dv();
#pragma unroll
      for (int j = 0; j < kStep / 4; ++j) da[j] = Wgmma<T>::pack(dp[2 * j], dp[2 * j + 1]);
      [[maybe_unused]] const uint32_t ds = sh.ds + (it & 1) * kDsBytes;
      if constexpr (kFusedDq) {
        // dS^T rounded into the step's buffer, the layout TMA would write:
        // row = key (this warpgroup's 64 from row 64 wg), 128-byte rows of
        // the step's 64 queries, 16-byte unit c of row r at c ^ (r % 8).
        // da[2c + h] holds row half h, columns 8c + 2t and + 1.
#pragma unroll
        for (int c = 0; c < 8; ++c) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int row = 64 * wg + 16 * warp + lane / 4 + 8 * h;
            st_shared_u32(ds + row * kRowBytes + ((c ^ (row & 7)) << 4) + 4 * t, da[2 * c + h]);
          }
        }
        fence_proxy_async();  // visible to the other warpgroup's wgmma after the barrier
      }

      // dK += dS^T Q: A = dS^T from registers, B = Q MN-major.
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kStep / 16; ++kk) {
        const uint32_t a[4] = {da[4 * kk], da[4 * kk + 1], da[4 * kk + 2], da[4 * kk + 3]};
        Wgmma<T>::pv(dk, a, desc_mn_major(q_t + kk * 16 * kRowBytes, QT::kChunk));
      }
      wgmma_commit();
      [[maybe_unused]] float dqa[32];
      if constexpr (kFusedDq) {
        // This warpgroup's part of dQ(step) += dS K: D 128, both warpgroups'
        // 128 keys times head_dim columns 64 wg .. + 63 (K's column chunk
        // wg); D 64, its own 64 keys times every column (the two parts sum
        // in the convert kernel). A = dS^T rows (keys = k), queries = m
        // contiguous; B = K rows, head_dim = n contiguous: both MN-major.
        named_bar_sync(kDsBar, 256);
        wgmma_fence();
        constexpr int kSteps = D == 128 ? kKvBlock / 16 : 64 / 16;
        const int key_row0 = D == 128 ? 0 : 64 * wg;
        const uint32_t k_cols = sh.k + (D == 128 ? wg * KT::kChunk : 0);
#pragma unroll
        for (int kk = 0; kk < kSteps; ++kk) {
          const uint32_t row_off = (key_row0 + 16 * kk) * kRowBytes;
          Wgmma<T>::ss_tt(dqa, desc_mn_major(ds + row_off, kDsBytes),
                          desc_mn_major(k_cols + row_off, KT::kChunk), kk > 0 ? 1 : 0);
        }
        wgmma_commit();
      }
      wgmma_wait<0>();
      fence_regs(dv);
      fence_regs(dk);
      __syncwarp();
      if (lane == 0) mbar_arrive(sh.bar(kKvBarEmpty + s));  // this warp is done with the stage
      if constexpr (kFusedDq) {
        fence_regs(dqa);
        // Stage the part (float pair j of thread tid at dq_part_staged(j,
        // tid): conflict-free 8-byte stores; dq_parts.h, whose dq_part_pair
        // the convert kernel reads it by) once the previous reduction has
        // read the buffer, then one thread adds it to dq_accum with a bulk
        // reduction.
        const uint32_t stage = sh.staging + wg * kStageBytes;
        if (tid == 0) bulk_wait_read();
        named_bar_sync(kStageBar + wg, 128);
#pragma unroll
        for (int j = 0; j < 16; ++j) {
          st_shared_f32x2(stage + dq_part_staged(j, tid) * 8, dqa[2 * j], dqa[2 * j + 1]);
        }
        fence_proxy_async();
        named_bar_sync(kStageBar + wg, 128);
        if (tid == 0) {
          const int h = kvh * p.group + r;
          float* dst = p.dq_accum +
                       ((static_cast<int64_t>(b) * p.heads + h) * p.q_steps + i) * (2 * kDqPart) +
                       wg * kDqPart;
          bulk_reduce_add_f32(dst, stage, kStageBytes);
          bulk_commit();
        }
      }
    }
  }
  if constexpr (kFusedDq) {
    if (tid == 0) bulk_wait();
  }

  const int64_t head = sv.row0 * p.qkv_stride + static_cast<int64_t>(kvh) * p.head_dim;
  store_acc<T, D>(dk, p.scale, static_cast<T*>(p.dk) + head, p.qkv_stride, key_base, sv.len,
                  p.head_dim, t);
  store_acc<T, D>(dv, 1.0f, static_cast<T*>(p.dv) + head, p.qkv_stride, key_base, sv.len,
                  p.head_dim, t);
}

template <typename T, int D, bool kFusedDq>
__device__ __forceinline__ void dkdv_body(const CUtensorMap* q_map, const CUtensorMap* k_map,
                                          const CUtensorMap* v_map, const CUtensorMap* do_map,
                                          const Params& p) {
  __shared__ __align__(8) uint64_t bars[kKvBars];
  constexpr int kStep = kDkdvStep<D, kFusedDq>;
  __shared__ __align__(16) float stats[kStages * 2 * kStep];
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  KvShared<D> sh;
  sh.k = (smem_u32(smem_raw) + 1023u) & ~1023u;  // the swizzle needs 1024-aligned chunks
  sh.v = sh.k + Tile<D, kKvBlock>::kBytes;
  sh.q = sh.v + Tile<D, kKvBlock>::kBytes;
  sh.d_o = sh.q + kStages * Tile<D, kStep>::kBytes;
  sh.ds = sh.d_o + kStages * Tile<D, kStep>::kBytes;  // 1024-aligned: whole tiles before
  sh.staging = sh.ds + 2 * kDsBytes;
  sh.bars = smem_u32(bars);
  sh.stats = stats;

  // Low (heaviest) key tiles first (causal), a kv head's tiles together
  // (full, or causal past the L2: launch()).
  const TileSlot slot = tile_slot(static_cast<int>(blockIdx.x), p.bkv, p.kv_blocks, p.kv_section);
  const int bkv = slot.head, kb = slot.rank;
  const int b = bkv / p.kv_heads, kvh = bkv % p.kv_heads;
  const int kv0 = kb * kKvBlock;
  const SeqView sv = seq_view(p.cu_seqlens, b, p.seq, p.heads);
  if (kv0 >= sv.len) return;  // varlen: past this sequence's end (the whole CTA)
  // Causal: the first step holding a query at or after kv0; full: every step.
  const int i0 = p.full ? 0 : kv0 / kStep;
  const int n_steps = (sv.len + kStep - 1) / kStep;
  static_assert(kKvBlock % kStep == 0, "key tiles start on a query step");

  if (threadIdx.x == 0) {
    mbar_init(sh.bar(kKvBarKV), 1);
    for (int s = 0; s < kStages; ++s) {
      mbar_init(sh.bar(kKvBarFull + s), 32);  // the producer warp's lanes
      mbar_init(sh.bar(kKvBarEmpty + s), kConsumerWarps);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  }
  __syncthreads();  // the last CTA-wide barrier: roles split below

  const int warpgroup = threadIdx.x / 128;
  if (warpgroup == 0) {
    regs_decrease<kProducerRegs>();
    if (threadIdx.x < 32) {
      dkdv_produce<D, kStep>(sh, q_map, k_map, v_map, do_map, p, sv, kvh, kv0, i0, n_steps);
    }
  } else {
    regs_increase<kConsumerRegs>();
    dkdv_consume<T, D, kFusedDq>(sh, p, warpgroup - 1, sv, b, kvh, kv0, i0, n_steps);
  }
}

// ---------------------------------------------------------------------------
// dQ.

template <int D>
struct QShared {
  uint32_t q, d_o, k, v;  // K and V: stage s at + s * Tile<D, kDqStep<D>>::kBytes
  uint32_t bars;
  __device__ __forceinline__ uint32_t bar(int i) const { return bar_at(bars, i); }
};

// One thread: Q and dO once, then for it = 0 .. n_kt - 1 key tile
// j = n_kt - 1 - it of K and V into stage it % kStages.
template <int D>
__device__ __forceinline__ void dq_produce(const QShared<D>& sh, const CUtensorMap* q_map,
                                           const CUtensorMap* k_map, const CUtensorMap* v_map,
                                           const CUtensorMap* do_map, int q0, int h, int kvh,
                                           const SeqView& sv, int n_kt) {
  constexpr int kKStep = kDqStep<D>;
  using QT = Tile<D, kDqBlock>;
  using KT = Tile<D, kKStep>;
  const int b = sv.map_b, row0 = sv.map_row0;
  mbar_arrive_expect_tx(sh.bar(kDqBarQ), 2 * QT::kBytes);
#pragma unroll
  for (int c = 0; c < QT::kChunks; ++c) {
    tma_load(q_map, sh.q + c * QT::kChunk, sh.bar(kDqBarQ), c * kChunkElems, row0 + q0, h, b);
    tma_load(do_map, sh.d_o + c * QT::kChunk, sh.bar(kDqBarQ), c * kChunkElems, row0 + q0, h, b);
  }
  for (int it = 0; it < n_kt; ++it) {
    const int j = n_kt - 1 - it;
    const int s = it % kStages;
    if (it >= kStages) mbar_wait(sh.bar(kDqBarEmpty + s), ((it / kStages) - 1) & 1);
    mbar_arrive_expect_tx(sh.bar(kDqBarFull + s), 2 * KT::kBytes);
#pragma unroll
    for (int c = 0; c < KT::kChunks; ++c) {
      tma_load(k_map, sh.k + s * KT::kBytes + c * KT::kChunk, sh.bar(kDqBarFull + s),
               c * kChunkElems, row0 + j * kKStep, kvh, b);
      tma_load(v_map, sh.v + s * KT::kBytes + c * KT::kChunk, sh.bar(kDqBarFull + s),
               c * kChunkElems, row0 + j * kKStep, kvh, b);
    }
  }
}

// Consumer warpgroup `wg`: queries q0 + 64 wg .. + 63 (rows of S, dP, dQ).
template <typename T, int D>
__device__ __forceinline__ void dq_consume(const QShared<D>& sh, const Params& p, int wg, int q0,
                                           const SeqView& sv, int h, int n_kt) {
  constexpr int kKStep = kDqStep<D>;
  using QT = Tile<D, kDqBlock>;
  using KT = Tile<D, kKStep>;
  const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32, t = lane % 4;
  const int row_base = q0 + 64 * wg + 16 * warp + lane / 4;  // rows row_base, row_base + 8
  const uint32_t q_rows = sh.q + wg * 64 * kRowBytes;         // 1024-aligned
  const uint32_t do_rows = sh.d_o + wg * 64 * kRowBytes;
  const int64_t head_rows = sv.stats0 + h * sv.stats_head;
  float lse2[2], dl[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = row_base + 8 * r;
    lse2[r] = row < sv.len ? p.lse[head_rows + row] * kLog2e : INFINITY;
    dl[r] = row < sv.len ? p.delta[head_rows + row] : 0.0f;
  }
  float dq[D / 2];
#pragma unroll
  for (int e = 0; e < D / 2; ++e) dq[e] = 0.0f;
  const int first_row = q0 + 64 * wg;
  // The last key each of this thread's rows sees: the row (causal) or seq - 1.
  int limit[2] = {row_base, row_base + 8};
  if (p.full) limit[0] = limit[1] = sv.len - 1;

  mbar_wait(sh.bar(kDqBarQ), 0);
  for (int it = 0; it < n_kt; ++it) {
    const int j = n_kt - 1 - it;
    const int s = it % kStages;
    const uint32_t parity = (it / kStages) & 1;
    const uint32_t k_t = sh.k + s * KT::kBytes, v_t = sh.v + s * KT::kBytes;

    float sc[kKStep / 2], dp[kKStep / 2];
    mbar_wait(sh.bar(kDqBarFull + s), parity);
    __syncwarp();
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint32_t off = (kk % 4) * 32;
      Wgmma<T>::qk(sc, desc_k_major(q_rows + (kk / 4) * QT::kChunk + off),
                   desc_k_major(k_t + (kk / 4) * KT::kChunk + off), kk > 0 ? 1 : 0);
    }
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint32_t off = (kk % 4) * 32;
      Wgmma<T>::qk(dp, desc_k_major(do_rows + (kk / 4) * QT::kChunk + off),
                   desc_k_major(v_t + (kk / 4) * KT::kChunk + off), kk > 0 ? 1 : 0);
    }
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(sc);
    fence_regs(dp);

    // dS = P (dP - delta); P = 0 past the diagonal (causal: tiles whose last
    // key is after the warpgroup's first query), which also covers keys past
    // seq; full: past seq (only the last tile can hold such keys).
    const bool mask = p.full ? (j + 1) * kKStep > sv.len : (j + 1) * kKStep - 1 > first_row;
    const int key0 = j * kKStep + 2 * t;
    uint32_t da[kKStep / 4];
#pragma unroll
    for (int c = 0; c < kKStep / 8; ++c) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int e = 4 * c + i, r = i >> 1;
        float pv = fast_exp2(sc[e] * p.scale_log2 - lse2[r]);
        if (mask && key0 + 8 * c + (i & 1) > limit[r]) pv = 0.0f;
        dp[e] = pv * (dp[e] - dl[r]);
      }
    }
#pragma unroll
    for (int jj = 0; jj < kKStep / 4; ++jj) da[jj] = Wgmma<T>::pack(dp[2 * jj], dp[2 * jj + 1]);

    // dQ += dS K over the tile's keys: step kk reads K rows 16kk.. (MN-major).
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kKStep / 16; ++kk) {
      const uint32_t a[4] = {da[4 * kk], da[4 * kk + 1], da[4 * kk + 2], da[4 * kk + 3]};
      Wgmma<T>::pv(dq, a, desc_mn_major(k_t + kk * 16 * kRowBytes, KT::kChunk));
    }
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(dq);
    __syncwarp();
    if (lane == 0) mbar_arrive(sh.bar(kDqBarEmpty + s));  // this warp is done with K and V
  }

  const int64_t head = sv.row0 * p.qkv_stride + static_cast<int64_t>(h) * p.head_dim;
  store_acc<T, D>(dq, p.scale, static_cast<T*>(p.dq) + head, p.qkv_stride, row_base, sv.len,
                  p.head_dim, t);
}

template <typename T, int D>
__device__ __forceinline__ void dq_body(const CUtensorMap* q_map, const CUtensorMap* k_map,
                                        const CUtensorMap* v_map, const CUtensorMap* do_map,
                                        const Params& p) {
  __shared__ __align__(8) uint64_t bars[kDqBars];
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  QShared<D> sh;
  sh.q = (smem_u32(smem_raw) + 1023u) & ~1023u;
  sh.d_o = sh.q + Tile<D, kDqBlock>::kBytes;
  sh.k = sh.d_o + Tile<D, kDqBlock>::kBytes;
  constexpr int kKStep = kDqStep<D>;
  sh.v = sh.k + kStages * Tile<D, kKStep>::kBytes;
  sh.bars = smem_u32(bars);

  // Latest (heaviest) query tiles first, in L2 sections of heads.
  const TileSlot slot = tile_slot(static_cast<int>(blockIdx.x), p.bh, p.q_blocks, p.q_section);
  const int b = slot.head / p.heads, h = slot.head % p.heads;
  const int q0 = (p.q_blocks - 1 - slot.rank) * kDqBlock;
  const SeqView sv = seq_view(p.cu_seqlens, b, p.seq, p.heads);
  if (q0 >= sv.len) return;  // varlen: past this sequence's end (the whole CTA)
  // Key tiles 0 .. the last one holding a key <= the CTA's last query (full:
  // every one), and none wholly past the sequence.
  const int k_steps = (sv.len + kKStep - 1) / kKStep;
  const int n_kt = p.full ? k_steps : min((q0 + kDqBlock) / kKStep, k_steps);
  static_assert(kDqBlock % kKStep == 0, "query tiles end on a key tile");

  if (threadIdx.x == 0) {
    mbar_init(sh.bar(kDqBarQ), 1);
    for (int s = 0; s < kStages; ++s) {
      mbar_init(sh.bar(kDqBarFull + s), 1);
      mbar_init(sh.bar(kDqBarEmpty + s), kConsumerWarps);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  }
  __syncthreads();

  const int warpgroup = threadIdx.x / 128;
  if (warpgroup == 0) {
    regs_decrease<kProducerRegs>();
    if (threadIdx.x == 0) {
      dq_produce<D>(sh, q_map, k_map, v_map, do_map, q0, h, h / p.group, sv, n_kt);
    }
  } else {
    regs_increase<kConsumerRegs>();
    dq_consume<T, D>(sh, p, warpgroup - 1, q0, sv, h, n_kt);
  }
}
#endif  // __CUDA_ARCH_FEAT_SM90_ALL

template <typename T, int D, bool kFusedDq>
__global__ void __launch_bounds__(kThreads, 1)
    hopper_dkdv_kernel(const __grid_constant__ CUtensorMap q_map,
                       const __grid_constant__ CUtensorMap k_map,
                       const __grid_constant__ CUtensorMap v_map,
                       const __grid_constant__ CUtensorMap do_map, const Params p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  dkdv_body<T, D, kFusedDq>(&q_map, &k_map, &v_map, &do_map, p);
#endif
}

// Fused dQ's last step: dq = scale * (the step parts of dq_accum), rounded.
// A part is a warpgroup's 64 x 64 share in its staging order (dq_parts.h).
// D 128: part w holds columns 64 w ..; D 64: both parts hold every column
// (sum them). One block per step, each warp 8 of its rows, lane l the row's
// columns 2l and 2l + 1 (and 64 + 2l, + 1 at D 128): a warp stores whole
// 128-byte runs of a row, and its loads take 8 whole 32-byte sectors (4
// lanes each). One thread a pair, whose warps wrote 16 bytes into each of 8
// rows a store, took 102 us for the 134 MB of parts at B4 H32 T2048 D128 on
// an H200 (ncu); this, 54 us.
constexpr int kConvertThreads = 256;
constexpr int kConvertRowsPerWarp = kQStep / (kConvertThreads / 32);

template <typename T, int D>
__global__ void __launch_bounds__(kConvertThreads) hopper_dq_convert_kernel(const Params p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  static_assert(kQStep == kDqPartRows, "a step's queries are a part's rows");
  const int64_t step = blockIdx.x;  // (b * heads + h) * q_steps + i
  const int i = static_cast<int>(step % p.q_steps);
  const int bh = static_cast<int>(step / p.q_steps);
  const int b = bh / p.heads, h = bh % p.heads;
  const SeqView sv = seq_view(p.cu_seqlens, b, p.seq, p.heads);
  const int warp = threadIdx.x / 32, l = threadIdx.x % 32;
  const int r0 = warp * kConvertRowsPerWarp;
  const float2* part = reinterpret_cast<const float2*>(p.dq_accum + step * (2 * kDqPart));
  float2 a[kConvertRowsPerWarp], c[kConvertRowsPerWarp];
#pragma unroll
  for (int u = 0; u < kConvertRowsPerWarp; ++u) {
    const int idx = dq_part_pair(r0 + u, l);
    a[u] = part[idx];
    c[u] = part[idx + kDqPartPairs];
  }
  T* out = static_cast<T*>(p.dq) + sv.row0 * p.qkv_stride + static_cast<int64_t>(h) * p.head_dim +
           2 * l;
#pragma unroll
  for (int u = 0; u < kConvertRowsPerWarp; ++u) {
    const int row = i * kQStep + r0 + u;
    if (row >= sv.len) break;
    T* dst = out + static_cast<int64_t>(row) * p.qkv_stride;
    if constexpr (D == 128) {
      *reinterpret_cast<uint32_t*>(dst) = Wgmma<T>::pack(a[u].x * p.scale, a[u].y * p.scale);
      if (64 + 2 * l < p.head_dim) {
        *reinterpret_cast<uint32_t*>(dst + 64) =
            Wgmma<T>::pack(c[u].x * p.scale, c[u].y * p.scale);
      }
    } else {
      *reinterpret_cast<uint32_t*>(dst) =
          Wgmma<T>::pack((a[u].x + c[u].x) * p.scale, (a[u].y + c[u].y) * p.scale);
    }
  }
#endif
}

template <typename T, int D>
__global__ void __launch_bounds__(kThreads, 1)
    hopper_dq_kernel(const __grid_constant__ CUtensorMap q_map,
                     const __grid_constant__ CUtensorMap k_map,
                     const __grid_constant__ CUtensorMap v_map,
                     const __grid_constant__ CUtensorMap do_map, const Params p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  dq_body<T, D>(&q_map, &k_map, &v_map, &do_map, p);
#endif
}

// ---------------------------------------------------------------------------
// Host.

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

template <typename T, int D>
KernelStatus launch(void* dq, void* dk, void* dv, const void* d_o, const void* q, const void* k,
                    const void* v, const float* lse, const float* delta, float* dq_accum,
                    const Geometry& g, DType dtype, float scale, bool full,
                    const Sequences& seqs, cudaStream_t stream) {
  Params p{};
  p.dq = dq;
  p.dq_accum = dq_accum;
  p.cu_seqlens = seqs.cu_seqlens;
  p.dk = dk;
  p.dv = dv;
  p.lse = lse;
  p.delta = delta;
  p.qkv_stride = g.qkv_row_stride;
  p.seq = static_cast<int>(g.seq);
  p.heads = static_cast<int>(g.heads);
  p.kv_heads = static_cast<int>(g.kv_heads);
  p.group = static_cast<int>(g.group());
  p.head_dim = static_cast<int>(g.head_dim);
  const int64_t count = seqs.count(g), longest = seqs.longest(g);
  p.bh = static_cast<int>(count * g.heads);
  p.bkv = static_cast<int>(count * g.kv_heads);
  p.q_steps = static_cast<int>(ceil_div(longest, kQStep));
  p.q_blocks = static_cast<int>(ceil_div(longest, kDqBlock));
  p.kv_blocks = static_cast<int>(ceil_div(longest, kKvBlock));
  // Full mask: dkdv takes one kv head's key tiles together (sections of one
  // head: its CTAs walk the group's query steps side by side, so each step's
  // Q and dO and its dQ parts are read from, and added into, L2 by all of
  // them within a short time; wider sections of heads left DRAM at 30% of
  // its bandwidth against 10%, 1.12 against 1.09 ms fwd+bwd for B4 H16 T2048
  // D128); dq uses L2 sections (a query head's share of its kv head's K and
  // V). Causal: one section each (sections measured slower there: 0.87
  // against 0.77 ms for B4 H32 KV8 T2048 D64; the ranks' lengths differ, so
  // a head's tiles would not run side by side anyway) -- except dkdv where
  // one kv head's query side (its group's Q and dO, and the fused dQ's fp32
  // parts) exceeds the whole L2: heads interleaved then share nothing in L2,
  // and one head's tiles together at least share its Q / dO steps (B1 H32
  // KV8 T16384 D128, 67 MB a head: 14.5-14.7 -> 14.3-14.5 ms fwd+bwd on an
  // H200, three hosts; at T 2048-8192, where a head's fit, sections measured
  // 1-7% slower).
  const int64_t l2 = l2_bytes();
  const int64_t group_bytes = longest * D * g.group() * (2 + 2 + (dq_accum != nullptr ? 4 : 0));
  p.kv_section = full || (l2 > 0 && group_bytes > l2) ? 1 : p.bkv;
  p.q_section = full ? section_heads(l2, 2 * longest * D * 2 / g.group(), p.bh, g.group()) : p.bh;
  p.full = full ? 1 : 0;
  p.scale = scale;
  p.scale_log2 = scale * kLog2e;

  // dK / dV: Q and dO in boxes of a step's rows, K and V in 128-row boxes.
  const bool fused = dq_accum != nullptr;
  CUtensorMap maps[4];
  KernelStatus s = make_maps(maps, q, k, v, d_o, dtype, g,
                             fused ? kDkdvStep<D, true> : kDkdvStep<D, false>, kKvBlock);
  if (!s.ok()) return s;
  const unsigned dkdv_grid = static_cast<unsigned>(p.kv_blocks) * static_cast<unsigned>(p.bkv);
  if (fused) {
    // Fused dQ: zero the parts, dK / dV / dQ parts in one kernel, then dQ.
    s = cuda::to_status(cudaMemsetAsync(dq_accum, 0, hopper_dq_accum_bytes(g, seqs), stream));
    if (!s.ok()) return s;
    s = launch_kernel(hopper_dkdv_kernel<T, D, true>, dkdv_grid, kThreads,
                      dkdv_smem_bytes<D, true>(), stream, maps[0], maps[1], maps[2], maps[3], p);
    if (!s.ok()) return s;
    const int64_t steps = static_cast<int64_t>(p.bh) * p.q_steps;
    hopper_dq_convert_kernel<T, D>
        <<<static_cast<unsigned>(steps), kConvertThreads, 0, stream>>>(p);
    return cuda::last_launch_status();
  }
  s = launch_kernel(hopper_dkdv_kernel<T, D, false>, dkdv_grid, kThreads,
                    dkdv_smem_bytes<D, false>(), stream, maps[0], maps[1], maps[2], maps[3], p);
  if (!s.ok()) return s;

  // dQ: Q and dO in 128-row boxes, K and V in boxes of a step's rows.
  s = make_maps(maps, q, k, v, d_o, dtype, g, kDqBlock, kDqStep<D>);
  if (!s.ok()) return s;
  const unsigned dq_grid = static_cast<unsigned>(p.q_blocks) * static_cast<unsigned>(p.bh);
  return launch_kernel(hopper_dq_kernel<T, D>, dq_grid, kThreads, dq_smem_bytes<D>(), stream,
                       maps[0], maps[1], maps[2], maps[3], p);
}

}  // namespace

size_t hopper_dq_accum_bytes(const Geometry& g, const Sequences& seqs) {
  if (g.empty()) return 0;
  return static_cast<size_t>(seqs.count(g) * g.heads * ceil_div(seqs.longest(g), kQStep)) * 2 *
         kDqPart * sizeof(float);
}

bool hopper_backward_supports(const Geometry& g, DType dtype, const Sequences& seqs) {
  // The forward's conditions (dtype, head_dim, extents, q / k / v's maps),
  // then this backward's grids and d_o's map.
  if (!hopper_forward_supports(g, dtype, seqs)) return false;
  const int64_t count = seqs.count(g), longest = seqs.longest(g);
  if (ceil_div(longest, kKvBlock) * count * g.kv_heads > INT_MAX ||
      ceil_div(longest, kDqBlock) * count * g.heads > INT_MAX ||
      count * g.heads * ceil_div(longest, kQStep) > INT_MAX) {
    return false;
  }
  return g.seq * g.o_row_stride * 2 < kMaxMapStride;
}

KernelStatus hopper_backward(void* dq, void* dk, void* dv, const void* d_o, const void* q,
                             const void* k, const void* v, const float* lse, const float* delta,
                             float* dq_accum, const Geometry& g, DType dtype, float scale,
                             bool full, const Sequences& seqs, cudaStream_t stream) {
  if (!hopper_backward_supports(g, dtype, seqs)) {
    return KernelStatus::unsupported("attention hopper: problem outside the Hopper backward");
  }
  const bool bf16 = dtype == DType::kBF16;
  if (g.head_dim == 64) {
    return bf16 ? launch<__nv_bfloat16, 64>(dq, dk, dv, d_o, q, k, v, lse, delta, dq_accum, g,
                                            dtype, scale, full, seqs, stream)
                : launch<__half, 64>(dq, dk, dv, d_o, q, k, v, lse, delta, dq_accum, g, dtype,
                                     scale, full, seqs, stream);
  }
  return bf16 ? launch<__nv_bfloat16, 128>(dq, dk, dv, d_o, q, k, v, lse, delta, dq_accum, g,
                                           dtype, scale, full, seqs, stream)
              : launch<__half, 128>(dq, dk, dv, d_o, q, k, v, lse, delta, dq_accum, g, dtype,
                                    scale, full, seqs, stream);
}

}  // namespace colossal::kernels::attention::internal
