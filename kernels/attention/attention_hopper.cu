// CUDA fused attention (causal or full mask), forward, for Hopper (compute capability 9.0,
// built for sm_90a only): the FlashAttention-2 algorithm of attention.cu on
// Hopper's warpgroup tensor-core instructions (wgmma) fed by the tensor memory
// accelerator (TMA) in FlashAttention-3's structure: warp specialization, the
// softmax overlapped with the next products inside each consumer warpgroup,
// and ping-pong turns between the two (see consume()).
//
// CTA: 384 threads = 3 warpgroups, persistent (one CTA per SM): each walks
// its share of the tiles (batch, query head, block of 128 query rows),
// heaviest (longest) query blocks first, consecutive tiles on consecutive
// heads of one block (a kv head's group shares K/V in L2), heads in sections
// whose K/V fit in L2; see next_tile() and tile_slot().
// The producer loads the next tile's Q, K and V while the consumers finish
// the current one (its last products and the output's stores).
//   warpgroup 0: producer. Gives registers back (setmaxnreg.dec 24); one
//     thread issues TMA copies: per tile its Q tile, then K and V tiles of 128
//     keys into a 2-stage ring, each stage guarded by a "full" mbarrier (the
//     TMA's transaction bytes complete it) and an "empty" one (the consumers'
//     warps arrive when their wgmma reads of the stage are done).
//   warpgroups 1, 2: consumers (setmaxnreg.inc 240), 64 query rows each. Per
//     key tile, from the diagonal tile down to tile 0:
//       S = Q K^T      wgmma m64n128k16, A = Q and B = K from shared memory
//                      (both K-major: head_dim contiguous), D/16 steps;
//       online softmax in fp32 registers (exp2 of log2e-prescaled scores, row
//                      max / sum over the quad of lanes that shares a row);
//                      the causal mask on the first (diagonal) tile only;
//       P              rounded to the input type in registers, where the S
//                      accumulator layout is already wgmma's register-A layout;
//       O += P V       wgmma m64nDk16, A = P from registers, B = V from shared
//                      memory, MN-major (V rows are keys with head_dim
//                      contiguous: the transpose flag), 128/16 steps.
//     Then O / l goes to global memory (rounded once) and lse = ln-sum-exp.
//
// Shared memory (dynamic, base aligned to 1024 bytes by hand): Q [128 x D],
// K[2] and V[2] [128 x D], each stored as D/64 column chunks of [rows x 64]
// elements: row r of a chunk is 128 bytes at r * 128, its eight 16-byte units
// permuted by the 128-byte swizzle (unit u of row r lands at u ^ (r % 8)).
// That is exactly what TMA writes with CU_TENSOR_MAP_SWIZZLE_128B for a box of
// {64 elements, rows} at a 1024-aligned address, and exactly what wgmma reads
// through a descriptor with swizzle mode 1 (128B): both apply the XOR to the
// address bits [4, 7) from bits [7, 10), so the chunk base must be 1024-aligned
// and a descriptor may start 32, 64 or 96 bytes into a row (the k16 steps
// inside one 64-element chunk) without a base offset. See desc_k_major /
// desc_mn_major for the LBO / SBO fields.
//
// Tails: the tensor maps are 4-D {head_dim, seq, heads, batch} over the
// strided rows, so a tile that runs past seq reads zeros (TMA's out-of-bounds
// fill) and never the next batch's rows; rows past seq are never written.
// Causal: only the diagonal tile holds masked keys (a key past seq is after
// every valid query), and every valid row sees its own key there, so the row
// max is finite after the first tile.
// Full mask (Params::full): the CTA visits every key tile, the sequence's last
// one first; that tile is the only one with masked keys, those at or past seq
// (zero-filled: their score 0 would otherwise enter the softmax), and its
// first key is below seq, so again the row max is finite after the first tile.
// Varlen (Params::cu_seqlens): the maps are flat (one "batch" of total_tokens
// rows) and each CTA reads its sequence's start and length (SeqView); a tile
// that runs past the sequence's end reads the next sequence's rows instead of
// zeros, which the same masks exclude (keys after every valid query, or at or
// past the length), and rows past the end are not written.
// Head dim 96 runs as 128: the maps' rows are 96 wide, so TMA fills columns
// 96..127 with zeros (adding nothing to Q K^T, giving zero O columns), and the
// stores skip them.
#include <cuda.h>  // CUtensorMap and the encoder's types only; libcuda is not linked
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/attention/attention_hopper.h"
#include "kernels/attention/attention_hopper_common.cuh"
#include "kernels/common/cuda_utils.cuh"

namespace colossal::kernels::attention::internal {
namespace {

using namespace hopper;  // NOLINT: the shared Hopper pieces (attention_hopper_common.cuh)

constexpr int kBlockM = 128;   // query rows per CTA: 2 consumer warpgroups x 64
constexpr int kBlockN = 128;   // keys per K / V tile
constexpr int kStages = 2;     // K / V ring depth
constexpr int kConsumers = 2;  // consumer warpgroups
constexpr int kThreads = 128 * (1 + kConsumers);
constexpr int kProducerRegs = 24;  // setmaxnreg targets (multiples of 8)
constexpr int kConsumerRegs = 240;
static_assert(kProducerRegs * 128 + kConsumerRegs * 128 * kConsumers <=
                  launch_regs(kThreads) * kThreads,
              "setmaxnreg: the warpgroups' registers must fit what the CTA is launched with");

// Byte sizes of the shared tiles for head_dim D.
template <int D>
struct Tiles {
  static constexpr int kChunks = D / kChunkElems;       // 64-column chunks per row
  static constexpr int kQChunk = kBlockM * kRowBytes;   // bytes of one Q chunk
  static constexpr int kKvChunk = kBlockN * kRowBytes;  // ... of one K or V chunk
  static constexpr int kQ = kChunks * kQChunk;
  static constexpr int kKv = kChunks * kKvChunk;
  static constexpr int kBytes = kQ + 2 * kStages * kKv;  // Q, K ring, V ring
  static constexpr int kAlloc = kBytes + 1024;           // slack to align to 1024
};

// mbarriers, in one static shared array.
constexpr int kBarQ = 0;                         // Q landed
constexpr int kBarQEmpty = 1;                    // Q read by every consumer warp
constexpr int kBarKFull = 2;                     // + stage: K tile landed
constexpr int kBarVFull = kBarKFull + kStages;   // + stage: V tile landed
constexpr int kBarKEmpty = kBarVFull + kStages;  // + stage: K tile read by every consumer warp
constexpr int kBarVEmpty = kBarKEmpty + kStages;
constexpr int kBars = kBarVEmpty + kStages;
constexpr int kConsumerWarps = 4 * kConsumers;  // arrivals that empty a stage

struct Params {
  void* o;
  float* lse;
  const int* cu_seqlens;  // null: the batch layout; else varlen (seq = total_tokens)
  int64_t o_stride;
  int seq, heads, group;
  int head_dim;  // the tensors' (96 runs as 128: columns 96.. arrive as zeros, are not written)
  int bh;        // sequences * heads
  int q_blocks;  // ceil(longest sequence / kBlockM)
  int tiles;     // q_blocks * bh
  int section;   // sequence-heads per L2 section (tile_slot)
  int full;      // 1: no causal mask (every key tile; keys past seq masked)
  float scale_log2;
};

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
// Shared-memory addresses of one CTA's tiles and barriers.
template <int D>
struct Shared {
  uint32_t q, k, v;  // tile bases (1024-aligned); K and V: stage s at + s * Tiles<D>::kKv
  uint32_t bars;     // kBars consecutive 8-byte mbarriers
  __device__ __forceinline__ uint32_t bar(int i) const { return bars + 8 * i; }
};

// ---------------------------------------------------------------------------
// The persistent schedule. Tiles (a block of 128 query rows of one sequence
// and query head) are numbered by tile_slot() (heaviest first, in L2
// sections of sequence-heads; rank r is query block q_blocks - 1 - r). The
// grid has at most one CTA per SM, and round r deals tiles r G .. r G + G - 1
// to the G CTAs in a snake order (CTA c takes r G + c in even rounds and
// r G + G - 1 - c in odd ones), so the CTAs' total work differs by about a
// tile. The producer and the consumers walk the same list.
struct Tile {
  int n;   // the CTA's count of tiles before this one (Q's barrier phase)
  int q0;  // first query row
  int b, h;
  int n_kb;  // key tiles to visit
  SeqView sv;
};

// The CTA's first tile at or after its round k with rows to compute; false
// past the last (varlen skips query blocks past a sequence's end).
__device__ __forceinline__ bool next_tile(const Params& p, int& k, Tile& w) {
  const int g = static_cast<int>(gridDim.x), c = static_cast<int>(blockIdx.x);
  for (;; ++k) {
    const int64_t tau64 = snake_tile(k, c, g);
    if (tau64 >= p.tiles) return false;
    const int tau = static_cast<int>(tau64);
    const TileSlot slot = tile_slot(tau, p.bh, p.q_blocks, p.section);
    w.b = slot.head / p.heads;
    w.h = slot.head % p.heads;
    w.q0 = (p.q_blocks - 1 - slot.rank) * kBlockM;
    w.sv = seq_view(p.cu_seqlens, w.b, p.seq, p.heads);
    if (w.q0 < w.sv.len) break;
  }
  // Causal: key tiles 0 .. the query block (kBlockN == kBlockM: its last one
  // is the diagonal); full: every key tile of the sequence.
  static_assert(kBlockN == kBlockM, "the diagonal must be exactly one key tile");
  w.n_kb = p.full ? (w.sv.len + kBlockN - 1) / kBlockN : w.q0 / kBlockM + 1;
  return true;
}

// Producer: one thread. Per tile, its Q once the consumers have read the
// previous tile's (Q's empty barrier), then for it = 0 .. n_kb - 1 the key tile
// j = n_kb - 1 - it (the consumers' order) of K and of V into the ring; `ring`
// counts the CTA's K / V loads over all its tiles (stage ring % kStages),
// each after the consumers emptied that stage's previous use (ring - kStages).
template <int D>
__device__ __forceinline__ void produce(const Shared<D>& sh, const CUtensorMap* q_map,
                                        const CUtensorMap* k_map, const CUtensorMap* v_map,
                                        const Tile& w, int kvh, int& ring) {
  using L = Tiles<D>;
  const int b = w.sv.map_b, row0 = w.sv.map_row0;
  if (w.n > 0) mbar_wait(sh.bar(kBarQEmpty), (w.n - 1) & 1);
  mbar_arrive_expect_tx(sh.bar(kBarQ), L::kQ);
#pragma unroll
  for (int c = 0; c < L::kChunks; ++c) {
    tma_load(q_map, sh.q + c * L::kQChunk, sh.bar(kBarQ), c * kChunkElems, row0 + w.q0, w.h, b);
  }
  for (int it = 0; it < w.n_kb; ++it, ++ring) {
    const int j = w.n_kb - 1 - it;
    const int s = ring % kStages;
    // The stage's previous use was load ring - kStages: its empty barrier
    // completes phase (ring / kStages - 1) when all consumer warps released it.
    const uint32_t parity = ((ring / kStages) - 1) & 1;
    if (ring >= kStages) mbar_wait(sh.bar(kBarKEmpty + s), parity);
    mbar_arrive_expect_tx(sh.bar(kBarKFull + s), L::kKv);
#pragma unroll
    for (int c = 0; c < L::kChunks; ++c) {
      tma_load(k_map, sh.k + s * L::kKv + c * L::kKvChunk, sh.bar(kBarKFull + s), c * kChunkElems,
               row0 + j * kBlockN, kvh, b);
    }
    if (ring >= kStages) mbar_wait(sh.bar(kBarVEmpty + s), parity);
    mbar_arrive_expect_tx(sh.bar(kBarVFull + s), L::kKv);
#pragma unroll
    for (int c = 0; c < L::kChunks; ++c) {
      tma_load(v_map, sh.v + s * L::kKv + c * L::kKvChunk, sh.bar(kBarVFull + s), c * kChunkElems,
               row0 + j * kBlockN, kvh, b);
    }
  }
}

// ---------------------------------------------------------------------------
// Consumer warpgroup `wg` (0 or 1): query rows q0 + 64 wg .. + 63.
//
// Accumulator layout of wgmma m64nNk16 (fp32 D), thread = 32 * warp + lane of
// the warpgroup, g = lane / 4, t = lane % 4: element 4c + i (c = 0 .. N/8 - 1)
// is row 16 warp + g + 8 (i / 2), column 8c + 2t + (i % 2) -- per 8 columns the
// mma.sync m16n8 accumulator layout. The register A fragment of m64nNk16
// (16-bit) is per warp the m16n8k16 A fragment: a[0] = A[g][2t..2t+1],
// a[1] = A[g+8][2t..], a[2] = A[g][2t+8..], a[3] = A[g+8][2t+8..]. So keys
// 16kk .. 16kk + 15 of S (accumulators 8kk .. 8kk + 7) are k-step kk's A of
// P V, packed pairwise in order: P register i = pack(s[2i], s[2i + 1]).
template <typename T, int D>
struct Consumer {
  using L = Tiles<D>;
  const Shared<D>& sh;
  const Params& p;
  const SeqView& sv;  // the CTA's sequence
  uint32_t q_rows;  // this warpgroup's 64 rows of Q: 64 * 128 bytes into each chunk
  int row_base;     // this thread's rows: row_base and row_base + 8
  int lane, t;
  float o[D / 2];  // O accumulators (unnormalised)
  float m[2];      // running row max, log2 units
  float l[2];      // this thread's part of the running row sum

  __device__ __forceinline__ Consumer(const Shared<D>& shared, const Params& params,
                                      const SeqView& seq, int wg, int q0)
      : sh(shared), p(params), sv(seq) {
    const int tid = threadIdx.x % 128, warp = tid / 32;
    lane = tid % 32;
    t = lane % 4;
    row_base = q0 + 64 * wg + 16 * warp + lane / 4;
    q_rows = sh.q + wg * 64 * kRowBytes;  // 1024-aligned: 8 whole swizzle atoms per chunk
#pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] = 0.0f;
    m[0] = m[1] = -INFINITY;
    l[0] = l[1] = 0.0f;
  }

  // Issues S = Q K^T for the ring's n-th K tile (stage n % kStages) as one
  // commit group, once it landed: D/16 k16 steps, step kk reads columns 16kk..
  // of chunk kk / 4, 32 (kk % 4) bytes into its rows; the first step ignores
  // the accumulators' old values (scale-d = 0).
  __device__ __forceinline__ void issue_qk(float (&sc)[64], int n) {
    const int s = n % kStages;
    const uint32_t k_tile = sh.k + s * L::kKv;
    mbar_wait(sh.bar(kBarKFull + s), (n / kStages) & 1);
    __syncwarp();
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint32_t off = (kk % 4) * 32;
      Wgmma<T>::qk(sc, desc_k_major(q_rows + (kk / 4) * L::kQChunk + off),
                   desc_k_major(k_tile + (kk / 4) * L::kKvChunk + off), kk > 0 ? 1 : 0);
    }
    wgmma_commit();
  }

  // Issues O += P V for the ring's n-th V tile as one commit group, once it
  // landed: 128/16 k16 steps over the tile's keys, step kk reads V rows
  // 16kk.. (16 * 128 bytes further each: two 8-row swizzle atoms, SBO apart).
  __device__ __forceinline__ void issue_pv(const uint32_t (&pr)[32], int n) {
    const int s = n % kStages;
    const uint32_t v_tile = sh.v + s * L::kKv;
    mbar_wait(sh.bar(kBarVFull + s), (n / kStages) & 1);
    __syncwarp();
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      const uint32_t a[4] = {pr[4 * kk], pr[4 * kk + 1], pr[4 * kk + 2], pr[4 * kk + 3]};
      Wgmma<T>::pv(o, a, desc_mn_major(v_tile + kk * 16 * kRowBytes, L::kKvChunk));
    }
    wgmma_commit();
  }

  // This warp is done reading the ring's n-th K (or V) tile: one arrival on
  // the stage's empty barrier.
  __device__ __forceinline__ void release(int bar, int n) {
    __syncwarp();
    if (lane == 0) mbar_arrive(sh.bar(bar + n % kStages));
  }
  // ... done reading Q (the tile's last S landed).
  __device__ __forceinline__ void release_q() {
    __syncwarp();
    if (lane == 0) mbar_arrive(sh.bar(kBarQEmpty));
  }

  // Online softmax of key tile j's scores in place (sc becomes P in fp32),
  // updating m and l; returns each row half's rescale factor alpha for O.
  // kDiag: the diagonal tile (causal) or the sequence's last tile (full),
  // always the first one, the only one with masked keys (after the query,
  // which covers keys at or past seq for every valid row; full: after seq - 1).
  // l stays this thread's partial sum (the quad's lanes share m, so their
  // partial sums scale alike) until finish().
  template <bool kDiag>
  __device__ __forceinline__ void softmax(float (&sc)[64], int j, float (&alpha)[2]) {
    const int key0 = j * kBlockN + 2 * t;
    int limit[2] = {row_base, row_base + 8};
    if (kDiag && p.full) limit[0] = limit[1] = sv.len - 1;
#pragma unroll
    for (int c = 0; c < 16; ++c) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float x = sc[4 * c + i] * p.scale_log2;
        if (kDiag && key0 + 8 * c + (i & 1) > limit[i >> 1]) x = -INFINITY;
        sc[4 * c + i] = x;
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
#pragma unroll
      for (int c = 0; c < 16; ++c) mx = fmaxf(mx, fmaxf(sc[4 * c + 2 * r], sc[4 * c + 2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[r], mx);
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;
      alpha[r] = fast_exp2(m[r] - m_use);
      m[r] = m_new;
      float sum = 0.0f;
#pragma unroll
      for (int c = 0; c < 16; ++c) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float pv = fast_exp2(sc[4 * c + 2 * r + e] - m_use);
          sc[4 * c + 2 * r + e] = pv;
          sum += pv;
        }
      }
      l[r] = l[r] * alpha[r] + sum;
    }
  }

  __device__ __forceinline__ void rescale(const float (&alpha)[2]) {
#pragma unroll
    for (int c = 0; c < D / 8; ++c) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        o[4 * c + 2 * r] *= alpha[r];
        o[4 * c + 2 * r + 1] *= alpha[r];
      }
    }
  }

  // P rounded to the input type, packed as wgmma's register-A fragments.
  static __device__ __forceinline__ void pack(const float (&sc)[64], uint32_t (&pr)[32]) {
#pragma unroll
    for (int i = 0; i < 32; ++i) pr[i] = Wgmma<T>::pack(sc[2 * i], sc[2 * i + 1]);
  }

  // Full row sums over the quad, lse (natural log) and O / l rounded once,
  // straight from the accumulators (a quad writes 16 contiguous bytes of a
  // row per 8 columns); rows past seq are not written.
  __device__ __forceinline__ void finish(int h) {
    float inv[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
      l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
      inv[r] = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
      const int row = row_base + 8 * r;
      if (t == 0 && row < sv.len) {
        p.lse[sv.stats0 + h * sv.stats_head + row] = (m[r] + __log2f(l[r])) * kLn2;
      }
    }
    T* out = static_cast<T*>(p.o) + sv.row0 * p.o_stride +
             static_cast<int64_t>(h) * p.head_dim + 2 * t;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = row_base + 8 * r;
      if (row >= sv.len) continue;
      T* dst = out + static_cast<int64_t>(row) * p.o_stride;
#pragma unroll
      for (int c = 0; c < D / 8; ++c) {
        if (8 * c >= p.head_dim) break;
        *reinterpret_cast<uint32_t*>(dst + 8 * c) =
            Wgmma<T>::pack(o[4 * c + 2 * r] * inv[r], o[4 * c + 2 * r + 1] * inv[r]);
      }
    }
  }
};

// The consumers' order: the diagonal (causal) or last (full) tile n_kb - 1
// first (masked), then n_kb - 2 .. 0 (the producer loads in the same order).
//
// Two overlaps keep the tensor cores busy through the softmax
// (FlashAttention-3's):
//   inside a warpgroup, iteration it issues S(it) = Q K^T and then
//     O += P(it - 1) V(it - 1) before computing softmax(S(it)), which runs
//     while the P V product is still in flight; O is rescaled by the new
//     alpha once that product landed, and P(it) packed after it (the product
//     reads the P registers asynchronously).
//   between the two warpgroups ("ping-pong"), each issue block runs under a
//     named barrier turn: warpgroup w waits for turn w, issues, and hands the
//     turn to the other, so one warpgroup's products run while the other
//     computes its softmax, instead of both multiplying at once and then
//     both idling the tensor cores.
// Each warpgroup has n_kb + 1 issue blocks a tile (S(0); S(it) + P V(it - 1);
// the last P V), the same count for both, so the turns alternate across the
// CTA's tiles too. Turns: barrier kTurnBar + w, 256 threads (the waiting
// warpgroup's 128 syncing, the other's 128 arriving). Warpgroup 1 first hands
// warpgroup 0 its first turn; warpgroup 0 takes one more turn after its last
// tile (warpgroup 1's last hand-over), so every arrival meets a sync.
constexpr int kTurnBar = 1;

struct Turns {
  int wg;
  __device__ __forceinline__ void mine() const { named_bar_sync(kTurnBar + wg, 256); }
  __device__ __forceinline__ void hand_over() const {
    named_bar_arrive(kTurnBar + 1 - wg, 256);
  }
};

// One tile of consumer warpgroup `wg`; `ring` counts the CTA's K / V tiles
// (the producer's order) and advances by the tile's n_kb.
template <typename T, int D>
__device__ __forceinline__ void consume(const Shared<D>& sh, const Params& p, const Tile& w,
                                        const Turns& turns, int& ring) {
  Consumer<T, D> c(sh, p, w.sv, turns.wg, w.q0);
  const int n_kb = w.n_kb, r0 = ring;
  float sc[64];
  uint32_t pr[32];
  float alpha[2];
  mbar_wait(sh.bar(kBarQ), w.n & 1);

  turns.mine();
  c.issue_qk(sc, r0);
  turns.hand_over();
  wgmma_wait<0>();
  fence_regs(sc);
  c.release(kBarKEmpty, r0);
  if (n_kb == 1) c.release_q();
  c.template softmax<true>(sc, n_kb - 1, alpha);  // O is still 0: no rescale
  Consumer<T, D>::pack(sc, pr);

  for (int it = 1; it < n_kb; ++it) {
    turns.mine();
    c.issue_qk(sc, r0 + it);
    c.issue_pv(pr, r0 + it - 1);
    turns.hand_over();
    wgmma_wait<1>();  // S(it) landed; P V(it - 1) may still run
    fence_regs(sc);
    c.release(kBarKEmpty, r0 + it);
    if (it == n_kb - 1) c.release_q();  // the producer may load the next tile's Q
    c.template softmax<false>(sc, n_kb - 1 - it, alpha);
    wgmma_wait<0>();
    fence_regs(c.o);
    c.release(kBarVEmpty, r0 + it - 1);
    c.rescale(alpha);
    Consumer<T, D>::pack(sc, pr);
  }

  turns.mine();
  c.issue_pv(pr, r0 + n_kb - 1);
  turns.hand_over();
  wgmma_wait<0>();
  fence_regs(c.o);
  c.release(kBarVEmpty, r0 + n_kb - 1);
  ring = r0 + n_kb;
  c.finish(w.h);  // meanwhile the producer loads the next tile's Q, K and V
}

template <typename T, int D>
__device__ __forceinline__ void forward_body(const CUtensorMap* q_map, const CUtensorMap* k_map,
                                             const CUtensorMap* v_map, const Params& p) {
  __shared__ __align__(8) uint64_t bars[kBars];
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  Shared<D> sh;
  sh.q = (smem_u32(smem_raw) + 1023u) & ~1023u;  // the swizzle needs 1024-aligned chunks
  sh.k = sh.q + Tiles<D>::kQ;
  sh.v = sh.k + kStages * Tiles<D>::kKv;
  sh.bars = smem_u32(bars);

  if (threadIdx.x == 0) {
    mbar_init(sh.bar(kBarQ), 1);
    mbar_init(sh.bar(kBarQEmpty), kConsumerWarps);
    for (int s = 0; s < kStages; ++s) {
      mbar_init(sh.bar(kBarKFull + s), 1);
      mbar_init(sh.bar(kBarVFull + s), 1);
      mbar_init(sh.bar(kBarKEmpty + s), kConsumerWarps);
      mbar_init(sh.bar(kBarVEmpty + s), kConsumerWarps);
    }
    // Make the initialised barriers visible to the other threads and to the
    // async proxy (TMA's complete_tx) before anyone uses them.
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  }
  __syncthreads();  // the last CTA-wide barrier: roles split below

  const int warpgroup = threadIdx.x / 128;
  int ring = 0;
  Tile w;
  w.n = 0;
  if (warpgroup == 0) {
    regs_decrease<kProducerRegs>();
    if (threadIdx.x != 0) return;
    for (int k = 0; next_tile(p, k, w); ++k, ++w.n) {
      produce<D>(sh, q_map, k_map, v_map, w, w.h / p.group, ring);
    }
  } else {
    regs_increase<kConsumerRegs>();
    const Turns turns{warpgroup - 1};
    if (turns.wg == 1) named_bar_arrive(kTurnBar + 0, 256);
    for (int k = 0; next_tile(p, k, w); ++k, ++w.n) consume<T, D>(sh, p, w, turns, ring);
    if (turns.wg == 0) turns.mine();  // warpgroup 1's last hand-over
  }
}
#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// The maps are kernel parameters (__grid_constant__): TMA reads them from the
// parameter space by address.
template <typename T, int D>
__global__ void __launch_bounds__(kThreads, 1)
    hopper_forward_kernel(const __grid_constant__ CUtensorMap q_map,
                          const __grid_constant__ CUtensorMap k_map,
                          const __grid_constant__ CUtensorMap v_map, const Params p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  forward_body<T, D>(&q_map, &k_map, &v_map, p);
#endif
}


template <typename T, int D>
KernelStatus launch(void* o, float* lse, const void* q, const void* k, const void* v,
                    const Geometry& g, DType dtype, float scale, bool full, const Sequences& seqs,
                    cudaStream_t stream) {
  static_assert(kBlockM == kBlockN, "make_map uses one box for Q, K and V");
  CUtensorMap maps[3];
  const KernelStatus s = make_maps(maps, q, k, v, nullptr, dtype, g, kBlockM, kBlockN);
  if (!s.ok()) return s;
  Params p{};
  p.o = o;
  p.lse = lse;
  p.cu_seqlens = seqs.cu_seqlens;
  p.o_stride = g.o_row_stride;
  p.seq = static_cast<int>(g.seq);
  p.heads = static_cast<int>(g.heads);
  p.group = static_cast<int>(g.group());
  p.head_dim = static_cast<int>(g.head_dim);
  p.bh = static_cast<int>(seqs.count(g) * g.heads);
  p.q_blocks = static_cast<int>((seqs.longest(g) + kBlockM - 1) / kBlockM);
  p.tiles = p.q_blocks * p.bh;
  // Full mask: L2 sections (reused per query head: its share of the kv
  // head's K and V). Causal: one section, the plain heaviest-first order
  // (there sections measured slower: 3.70 against 3.55 ms at T 16384).
  p.section = full ? l2_section(2 * seqs.longest(g) * D * 2 / g.group(), p.bh, g.group()) : p.bh;
  p.full = full ? 1 : 0;
  p.scale_log2 = scale * kLog2e;
  // Persistent: one CTA per SM (the shared memory allows no second), each
  // walking its share of the tiles (next_tile). Varlen: one CTA per tile
  // (next_tile's first round), which the hardware hands out as SMs free up:
  // the tiles' work follows each sequence's length, not the tile order, so a
  // static share measured slower (1.16 against 0.77 ms for 8 sequences of
  // 512 .. 4096 tokens).
  const int sms = cuda::multiprocessor_count();
  const bool persistent = seqs.cu_seqlens == nullptr && sms > 0;
  const unsigned grid = static_cast<unsigned>(persistent ? std::min(p.tiles, sms) : p.tiles);
  return launch_kernel(hopper_forward_kernel<T, D>, grid, kThreads, Tiles<D>::kAlloc, stream,
                       maps[0], maps[1], maps[2], p);
}

}  // namespace

bool hopper_forward_supports(const Geometry& g, DType dtype, const Sequences& seqs) {
  if (dtype != DType::kBF16 && dtype != DType::kF16) return false;
  if (g.head_dim != 64 && g.head_dim != 96 && g.head_dim != 128) return false;
  if (g.empty() || g.seq > (int64_t{1} << 30)) return false;
  const int64_t q_blocks = (seqs.longest(g) + kBlockM - 1) / kBlockM;
  if (seqs.count(g) * g.heads > INT_MAX || q_blocks * seqs.count(g) * g.heads > INT_MAX) {
    return false;
  }
  if (g.seq * g.qkv_row_stride * 2 >= kMaxMapStride) return false;
  return encode_tiled() != nullptr;
}

KernelStatus hopper_forward(void* o, float* lse, const void* q, const void* k, const void* v,
                            const Geometry& g, DType dtype, float scale, bool full,
                            const Sequences& seqs, cudaStream_t stream) {
  if (!hopper_forward_supports(g, dtype, seqs)) {
    return KernelStatus::unsupported("attention hopper: problem outside the Hopper kernel");
  }
  const bool bf16 = dtype == DType::kBF16;
  if (g.head_dim == 64) {
    return bf16 ? launch<__nv_bfloat16, 64>(o, lse, q, k, v, g, dtype, scale, full, seqs, stream)
                : launch<__half, 64>(o, lse, q, k, v, g, dtype, scale, full, seqs, stream);
  }
  return bf16 ? launch<__nv_bfloat16, 128>(o, lse, q, k, v, g, dtype, scale, full, seqs, stream)
              : launch<__half, 128>(o, lse, q, k, v, g, dtype, scale, full, seqs, stream);
}

}  // namespace colossal::kernels::attention::internal
