// CUDA token + position embedding. Design:
//
// * Forward: one warp per position. The warp reads the token id once, then
//   its lanes stream the wte row and the wpe row in 16-byte packs (up to 4
//   packs per lane in flight; C = 768 bf16 is 96 packs, so 3 per lane) and
//   write the sum. wpe rows are shared by the batch and stay in L2. One pass:
//   every byte of the gathered rows is read once and the output written once.
// * dwpe (both modes): a 32 x 8 block owns 32 column packs x 8 time steps; each
//   thread sums dout over the batch (b ascending) in float32 and adds the sum
//   to dwpe with one rounding: deterministic, no atomics. In kAtomic mode the
//   same pass also adds each dout pack to dwte[token] with float32 atomics
//   (red.global.add.v4.f32 on sm_90), so the whole backward reads dout once.
// * dwte, deterministic mode, four small launches:
//   1. keys[i] = token << 32 | i (invalid ids and the power-of-two padding get
//      ~0, which sorts last and is skipped);
//   2. bitonic sort of the keys: 4096-key tiles in shared memory, then global
//      compare-exchange steps for strides >= 4096 with a shared-memory merge
//      for the smaller strides. The keys are unique, so the sorted sequence —
//      and everything computed from it — does not depend on scheduling;
//   3. one block per 32 sorted rows ("tile"): per channel pack, a running
//      float32 sum over the tile's rows in order; a token that starts and ends
//      inside the tile is added to dwte right there (the old dwte values are
//      loaded in the same batch as the dout rows, 8 rows per batch, so a
//      flush costs no extra round trip); a run crossing a tile boundary
//      leaves its partial in the scratch (head slot: continued from the
//      previous tile; tail slot: started here, continues);
//   4. fix-up: the tile where a crossing run starts counts (one
//      __syncthreads_count per 256 tiles) how many following tiles begin with
//      the same token and adds tail + heads in tile order to dwte.
//   For 8 x 1024 positions that is 8192 keys (64 KiB) and 256 tiles; the
//   scratch is ~1.6 MiB at C = 768.
// * Scalar (1-element pack) instantiations of every kernel handle channels not
//   divisible by the pack and unaligned pointers.
// * Vocabulary shards run the same kernels with a row offset: a token's table
//   row is id - vocab_start, and ids outside the table's rows are another
//   shard's (zeros in the forward, skipped by the backward, no flag). The
//   sort keys hold the row, so steps 3 and 4 are unchanged.
//
// Measured on an H100 (B=8, T=1024, C=768, V=50257, uniform ids), against
// PyTorch 2.11 (tools/bench/torch_embedding.py): forward 24 us float32 / 13 us
// bfloat16 (PyTorch 54 / 38); backward float32 grads 37 us atomic / 110 us
// deterministic, bfloat16 dout + grads 85 us deterministic (PyTorch's autograd
// 330 / 291, most of it zero-filling and writing the dense [V, C] gradient).
#include <cstdint>
#include <type_traits>

#include "kernels/common/cuda_utils.cuh"
#include "kernels/embedding/embedding.h"
#include "kernels/embedding/embedding_layout.h"

namespace colossal::kernels::embedding {
namespace {

using cuda::from_math;
using cuda::to_math;
using internal::kTileRows;

constexpr uint64_t kPadKey = ~uint64_t{0};
constexpr uint32_t kNoToken = 0xffffffffu;  // the token field of kPadKey; valid ids are < 2^31

__device__ __forceinline__ uint32_t key_token(uint64_t key) { return static_cast<uint32_t>(key >> 32); }
__device__ __forceinline__ uint32_t key_position(uint64_t key) { return static_cast<uint32_t>(key); }

// N consecutive elements, moved as 16-byte accesses when N * sizeof(T) is a
// multiple of 16 (the caller guarantees the alignment), else element by element.
template <typename T, int N>
struct alignas((sizeof(T) * N) % 16 == 0 ? 16 : alignof(T)) Pack {
  T v[N];
};

template <typename T, int N>
__device__ __forceinline__ Pack<T, N> load_pack(const T* p) {
  Pack<T, N> r;
  if constexpr ((sizeof(T) * N) % 16 == 0) {
#pragma unroll
    for (int q = 0; q < static_cast<int>(sizeof(T) * N / 16); ++q) {
      reinterpret_cast<uint4*>(r.v)[q] = reinterpret_cast<const uint4*>(p)[q];
    }
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) r.v[k] = p[k];
  }
  return r;
}

template <typename T, int N>
__device__ __forceinline__ void store_pack(T* p, const Pack<T, N>& r) {
  if constexpr ((sizeof(T) * N) % 16 == 0) {
#pragma unroll
    for (int q = 0; q < static_cast<int>(sizeof(T) * N / 16); ++q) {
      reinterpret_cast<uint4*>(p)[q] = reinterpret_cast<const uint4*>(r.v)[q];
    }
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) p[k] = r.v[k];
  }
}

// dst[k] = round(dst[k] + sum[k]) for the N gradient elements at `p`.
template <typename G, int N>
__device__ __forceinline__ void add_to_grad(G* p, const Pack<G, N>& old, const float (&sum)[N]) {
  Pack<G, N> r;
#pragma unroll
  for (int k = 0; k < N; ++k) r.v[k] = from_math<G>(to_math(old.v[k]) + sum[k]);
  store_pack<G, N>(p, r);
}

template <int N>
__device__ __forceinline__ void atomic_add_pack(float* p, const float (&v)[N]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr bool kVector = N % 4 == 0;  // 16-byte vector atomics (sm_90+)
#else
  constexpr bool kVector = false;
#endif
  if constexpr (kVector) {
#pragma unroll
    for (int q = 0; q < N / 4; ++q) {
      atomicAdd(reinterpret_cast<float4*>(p) + q,
                make_float4(v[4 * q], v[4 * q + 1], v[4 * q + 2], v[4 * q + 3]));
    }
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) atomicAdd(p + k, v[k]);
  }
}

// The table row of a token id, or -1 when the id is not one of the rows
// [vocab_start, vocab_start + vocab_size) this table holds.
__device__ __forceinline__ int64_t table_row(int32_t token, int64_t vocab_start,
                                             int64_t vocab_size) {
  const int64_t row = static_cast<int64_t>(token) - vocab_start;
  return row >= 0 && row < vocab_size ? row : -1;
}

// ------------------------------------------------------------- forward ----

constexpr int kFwdWarps = 8;
constexpr int kFwdUnroll = 4;

// Ids outside the table's rows give NaN rows (the whole table: an invalid id)
// or, with zero_outside (a shard), zero rows.
template <typename T, int N>
__global__ void embedding_forward_kernel(T* __restrict__ out, int32_t* invalid_token_flag,
                                         const int32_t* __restrict__ tokens,
                                         const T* __restrict__ wte, const T* __restrict__ wpe,
                                         int64_t positions, int64_t seq_len, int64_t c_packs,
                                         int64_t vocab_size, int64_t vocab_start,
                                         bool zero_outside) {
  const int64_t p = static_cast<int64_t>(blockIdx.x) * kFwdWarps + threadIdx.x / 32;
  if (p >= positions) return;
  const int lane = threadIdx.x % 32;
  const int64_t channels = c_packs * N;
  const int64_t row = table_row(tokens[p], vocab_start, vocab_size);
  T* o = out + p * channels;
  if (row < 0) {
    if (lane == 0 && invalid_token_flag != nullptr) *invalid_token_flag = 1;
    Pack<T, N> fill;
#pragma unroll
    for (int k = 0; k < N; ++k) fill.v[k] = from_math<T>(zero_outside ? 0.0f : __int_as_float(0x7fffffff));
    for (int64_t cp = lane; cp < c_packs; cp += 32) store_pack<T, N>(o + cp * N, fill);
    return;
  }
  const T* e = wte + row * channels;
  // No position table (token-only embedding, e.g. Llama): the row is copied.
  const T* q = wpe == nullptr ? nullptr : wpe + (p % seq_len) * channels;
  for (int64_t base = lane; base < c_packs; base += 32 * kFwdUnroll) {
    Pack<T, N> a[kFwdUnroll], b[kFwdUnroll];
#pragma unroll
    for (int u = 0; u < kFwdUnroll; ++u) {
      const int64_t cp = base + u * 32;
      if (cp < c_packs) {
        a[u] = load_pack<T, N>(e + cp * N);
        if (q != nullptr) b[u] = load_pack<T, N>(q + cp * N);
      }
    }
#pragma unroll
    for (int u = 0; u < kFwdUnroll; ++u) {
      const int64_t cp = base + u * 32;
      if (cp < c_packs) {
        Pack<T, N> r;
        if (q == nullptr) {
          store_pack<T, N>(o + cp * N, a[u]);
          continue;
        }
#pragma unroll
        for (int k = 0; k < N; ++k) r.v[k] = from_math<T>(to_math(a[u].v[k]) + to_math(b[u].v[k]));
        store_pack<T, N>(o + cp * N, r);
      }
    }
  }
}

// ---------------------------------------------- dwpe (+ atomic dwte) ----

constexpr int kTileX = 32;  // column packs per block
constexpr int kTileY = 8;   // time steps per block
constexpr int kBatchUnroll = 4;

// grid: x = ceil(seq_len / kTileY), y = ceil(c_packs / kTileX).
template <typename T, typename G, int N, bool kAtomic>
__global__ void position_grad_kernel(float* dwte, G* __restrict__ dwpe, int32_t* invalid_token_flag,
                                     const T* __restrict__ dout, const int32_t* __restrict__ tokens,
                                     int64_t batch, int64_t seq_len, int64_t c_packs,
                                     int64_t vocab_size, int64_t vocab_start) {
  const int64_t cp = static_cast<int64_t>(blockIdx.y) * kTileX + threadIdx.x;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kTileY + threadIdx.y;
  if (cp >= c_packs || t >= seq_len) return;
  const int64_t channels = c_packs * N;
  float acc[N];
#pragma unroll
  for (int k = 0; k < N; ++k) acc[k] = 0.0f;
  // Batches of kBatchUnroll rows: all their loads are issued before any math.
  for (int64_t b0 = 0; b0 < batch; b0 += kBatchUnroll) {
    int64_t row[kBatchUnroll];
    Pack<T, N> d[kBatchUnroll];
#pragma unroll
    for (int u = 0; u < kBatchUnroll; ++u) {
      const int64_t p = (b0 + u) * seq_len + t;
      if (b0 + u < batch) {
        row[u] = table_row(tokens[p], vocab_start, vocab_size);
        d[u] = load_pack<T, N>(dout + p * channels + cp * N);
      }
    }
#pragma unroll
    for (int u = 0; u < kBatchUnroll; ++u) {
      if (b0 + u >= batch) continue;
      if (row[u] < 0) {
        if (cp == 0 && invalid_token_flag != nullptr) *invalid_token_flag = 1;
        continue;
      }
      float v[N];
#pragma unroll
      for (int k = 0; k < N; ++k) {
        v[k] = to_math(d[u].v[k]);
        acc[k] += v[k];
      }
      if constexpr (kAtomic) {
        atomic_add_pack<N>(dwte + row[u] * channels + cp * N, v);
      }
    }
  }
  if (dwpe == nullptr) return;  // no position table (kAtomic mode still ran for dwte)
  G* g = dwpe + t * channels + cp * N;
  add_to_grad<G, N>(g, load_pack<G, N>(g), acc);
}

// ------------------------------------------ dwte, deterministic mode ----

// The key's high half is the table row (id - vocab_start), < 2^31.
__global__ void build_keys_kernel(uint64_t* __restrict__ keys, int32_t* invalid_token_flag,
                                  const int32_t* __restrict__ tokens, int64_t positions,
                                  int64_t padded, int64_t vocab_size, int64_t vocab_start) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= padded) return;
  uint64_t key = kPadKey;
  if (i < positions) {
    const int64_t row = table_row(tokens[i], vocab_start, vocab_size);
    if (row >= 0) {
      key = (static_cast<uint64_t>(row) << 32) | static_cast<uint64_t>(i);
    } else if (invalid_token_flag != nullptr) {
      *invalid_token_flag = 1;
    }
  }
  keys[i] = key;
}

constexpr int kSortTile = 4096;  // keys per shared-memory tile (32 KiB)
constexpr int kSortThreads = 1024;

// Compare-exchange of pair q (of tile/2) at stride j within stage k: element i
// (bit j clear) and i + j, ascending where (global index & k) == 0.
__device__ __forceinline__ void bitonic_pair(uint64_t* s, int64_t base, int q, int j, int64_t k) {
  const int i = 2 * q - (q & (j - 1));
  const uint64_t a = s[i], b = s[i + j];
  const bool ascending = ((base + i) & k) == 0;
  if ((a > b) == ascending) {
    s[i] = b;
    s[i + j] = a;
  }
}

// kFullSort: all stages k = 2..tile (each tile sorted, alternate directions by
// global index). Otherwise: the strides j < tile of stage k > tile.
template <bool kFullSort>
__global__ void __launch_bounds__(kSortThreads) bitonic_tile_kernel(uint64_t* keys, int tile, int64_t k_merge) {
  __shared__ uint64_t s[kSortTile];
  const int64_t base = static_cast<int64_t>(blockIdx.x) * tile;
  for (int i = threadIdx.x; i < tile; i += blockDim.x) s[i] = keys[base + i];
  __syncthreads();
  if constexpr (kFullSort) {
    for (int k = 2; k <= tile; k <<= 1) {
      for (int j = k >> 1; j > 0; j >>= 1) {
        for (int q = threadIdx.x; q < tile / 2; q += blockDim.x) bitonic_pair(s, base, q, j, k);
        __syncthreads();
      }
    }
  } else {
    for (int j = tile >> 1; j > 0; j >>= 1) {
      for (int q = threadIdx.x; q < tile / 2; q += blockDim.x) bitonic_pair(s, base, q, j, k_merge);
      __syncthreads();
    }
  }
  for (int i = threadIdx.x; i < tile; i += blockDim.x) keys[base + i] = s[i];
}

// One compare-exchange step in global memory (stride j >= the tile size).
__global__ void bitonic_global_step_kernel(uint64_t* keys, int64_t padded, int64_t k, int64_t j) {
  const int64_t q = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (q >= padded / 2) return;
  const int64_t i = 2 * q - (q & (j - 1));
  const uint64_t a = keys[i], b = keys[i + j];
  const bool ascending = (i & k) == 0;
  if ((a > b) == ascending) {
    keys[i] = b;
    keys[i + j] = a;
  }
}

KernelStatus sort_keys(uint64_t* keys, int64_t padded, cudaStream_t stream) {
  const int tile = static_cast<int>(padded < kSortTile ? padded : kSortTile);
  const int64_t tiles = padded / tile;
  const int threads = tile / 2 < 32 ? 32 : (tile / 2 > kSortThreads ? kSortThreads : tile / 2);
  bitonic_tile_kernel<true><<<static_cast<unsigned>(tiles), threads, 0, stream>>>(keys, tile, 0);
  KernelStatus s = cuda::last_launch_status();
  for (int64_t k = int64_t{2} * tile; s.ok() && k <= padded; k <<= 1) {
    for (int64_t j = k >> 1; s.ok() && j >= tile; j >>= 1) {
      const int64_t pairs = padded / 2;
      bitonic_global_step_kernel<<<static_cast<unsigned>((pairs + 255) / 256), 256, 0, stream>>>(
          keys, padded, k, j);
      s = cuda::last_launch_status();
    }
    if (!s.ok()) break;
    bitonic_tile_kernel<false><<<static_cast<unsigned>(tiles), threads, 0, stream>>>(keys, tile, k);
    s = cuda::last_launch_status();
  }
  return s;
}

enum PieceEnd : uint8_t { kNotEnd = 0, kDirect = 1, kHead = 2, kTail = 3 };
constexpr int kRowBatch = 8;
static_assert(kTileRows % kRowBatch == 0, "tile rows must split into batches");

// Step 3: one block per tile of kTileRows sorted rows; threads loop over column packs.
template <typename T, typename G, int N>
__global__ void dwte_tile_kernel(G* dwte, float* __restrict__ head, float* __restrict__ tail,
                                 const T* __restrict__ dout, const uint64_t* __restrict__ keys,
                                 int64_t padded, int64_t c_packs) {
  __shared__ uint32_t s_token[kTileRows];
  __shared__ uint32_t s_pos[kTileRows];
  __shared__ uint8_t s_end[kTileRows];
  const int64_t tile = blockIdx.x;
  const int64_t base = tile * kTileRows;
  if (threadIdx.x < kTileRows) {
    const int64_t g = base + threadIdx.x;
    const uint64_t key = g < padded ? keys[g] : kPadKey;
    s_token[threadIdx.x] = key_token(key);
    s_pos[threadIdx.x] = key_position(key);
  }
  __syncthreads();
  if (threadIdx.x < kTileRows) {
    const int i = threadIdx.x;
    const uint32_t token = s_token[i];
    uint8_t end = kNotEnd;
    if (token != kNoToken) {
      const bool last_row = i == kTileRows - 1;
      if (last_row || s_token[i + 1] != token) {
        const bool from_prev = s_token[0] == token && base > 0 && key_token(keys[base - 1]) == token;
        const bool to_next = last_row && base + kTileRows < padded &&
                             key_token(keys[base + kTileRows]) == token;
        end = from_prev ? kHead : (to_next ? kTail : kDirect);
      }
    }
    s_end[i] = end;
  }
  __syncthreads();
  if (s_token[0] == kNoToken) return;  // only padding here (uniform across the block)
  const int64_t channels = c_packs * N;
  for (int64_t cp = threadIdx.x; cp < c_packs; cp += blockDim.x) {
    float acc[N];
#pragma unroll
    for (int k = 0; k < N; ++k) acc[k] = 0.0f;
    for (int i0 = 0; i0 < kTileRows; i0 += kRowBatch) {
      Pack<T, N> v[kRowBatch];
      Pack<G, N> old[kRowBatch];
#pragma unroll
      for (int u = 0; u < kRowBatch; ++u) {
        const int i = i0 + u;
        if (s_token[i] != kNoToken) {
          v[u] = load_pack<T, N>(dout + static_cast<int64_t>(s_pos[i]) * channels + cp * N);
          if (s_end[i] == kDirect) {
            old[u] = load_pack<G, N>(dwte + static_cast<int64_t>(s_token[i]) * channels + cp * N);
          }
        }
      }
#pragma unroll
      for (int u = 0; u < kRowBatch; ++u) {
        const int i = i0 + u;
        if (s_token[i] == kNoToken) continue;
#pragma unroll
        for (int k = 0; k < N; ++k) acc[k] += to_math(v[u].v[k]);
        const uint8_t end = s_end[i];
        if (end == kNotEnd) continue;
        if (end == kDirect) {
          add_to_grad<G, N>(dwte + static_cast<int64_t>(s_token[i]) * channels + cp * N, old[u], acc);
        } else {
          Pack<float, N> r;
#pragma unroll
          for (int k = 0; k < N; ++k) r.v[k] = acc[k];
          store_pack<float, N>((end == kHead ? head : tail) + tile * channels + cp * N, r);
        }
#pragma unroll
        for (int k = 0; k < N; ++k) acc[k] = 0.0f;
      }
    }
  }
}

// Step 4: the tile where a crossing run starts adds its tail and the following
// tiles' heads, in tile order, to dwte.
template <typename G, int N>
__global__ void dwte_fixup_kernel(G* dwte, const float* __restrict__ head,
                                  const float* __restrict__ tail, const uint64_t* __restrict__ keys,
                                  int64_t padded, int64_t tiles, int64_t c_packs) {
  const int64_t tile = blockIdx.x;
  const int64_t last = (tile + 1) * kTileRows - 1;  // the tile's last row
  if (last + 1 >= padded) return;                  // no next tile, so no tail
  const uint32_t token = key_token(keys[last]);
  if (token == kNoToken || key_token(keys[last + 1]) != token) return;  // no tail piece
  if (tile > 0 && key_token(keys[tile * kTileRows - 1]) == token) return;  // a middle piece: not the start
  // Tiles tile+1 .. tile+count begin with `token` (they form a contiguous range).
  int64_t count = 0;
  for (int64_t j0 = tile + 1; j0 < tiles; j0 += blockDim.x) {
    const int64_t j = j0 + threadIdx.x;
    const bool same = j < tiles && key_token(keys[j * kTileRows]) == token;
    const int n = __syncthreads_count(same);
    count += n;
    if (n < static_cast<int>(blockDim.x)) break;
  }
  const int64_t channels = c_packs * N;
  for (int64_t cp = threadIdx.x; cp < c_packs; cp += blockDim.x) {
    const Pack<float, N> t = load_pack<float, N>(tail + tile * channels + cp * N);
    float acc[N];
#pragma unroll
    for (int k = 0; k < N; ++k) acc[k] = t.v[k];
#pragma unroll 4
    for (int64_t j = tile + 1; j <= tile + count; ++j) {
      const Pack<float, N> h = load_pack<float, N>(head + j * channels + cp * N);
#pragma unroll
      for (int k = 0; k < N; ++k) acc[k] += h.v[k];
    }
    G* g = dwte + static_cast<int64_t>(token) * channels + cp * N;
    add_to_grad<G, N>(g, load_pack<G, N>(g), acc);
  }
}

// ------------------------------------------------------------ launchers ----

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

int threads_for(int64_t c_packs) {
  const int64_t rounded = (c_packs + 31) / 32 * 32;
  return static_cast<int>(rounded < 256 ? rounded : 256);
}

template <typename T, typename G, int N>
KernelStatus backward_typed(G* dwte, G* dwpe, int32_t* flag, const T* dout, const int32_t* tokens,
                            void* scratch, int64_t batch, int64_t seq_len, int64_t channels,
                            int64_t vocab_size, int64_t vocab_start, GradMode mode,
                            cudaStream_t stream) {
  const int64_t c_packs = channels / N;
  const dim3 pos_grid(static_cast<unsigned>((seq_len + kTileY - 1) / kTileY),
                      static_cast<unsigned>((c_packs + kTileX - 1) / kTileX));
  if (mode == GradMode::kAtomic) {
    if constexpr (std::is_same_v<G, float>) {
      position_grad_kernel<T, G, N, true><<<pos_grid, dim3(kTileX, kTileY), 0, stream>>>(
          dwte, dwpe, flag, dout, tokens, batch, seq_len, c_packs, vocab_size, vocab_start);
      return cuda::last_launch_status();
    } else {
      return KernelStatus::unsupported("embedding_backward_cuda: kAtomic needs float32 gradients");
    }
  }
  if (dwpe != nullptr) {
    position_grad_kernel<T, G, N, false><<<pos_grid, dim3(kTileX, kTileY), 0, stream>>>(
        nullptr, dwpe, flag, dout, tokens, batch, seq_len, c_packs, vocab_size, vocab_start);
    KernelStatus s = cuda::last_launch_status();
    if (!s.ok()) return s;
  }
  KernelStatus s;

  const internal::DeterministicLayout layout = internal::deterministic_layout(batch * seq_len, channels);
  uint8_t* bytes = static_cast<uint8_t*>(scratch);
  uint64_t* keys = reinterpret_cast<uint64_t*>(bytes);
  float* head = reinterpret_cast<float*>(bytes + layout.head_offset);
  float* tail = reinterpret_cast<float*>(bytes + layout.tail_offset);
  build_keys_kernel<<<static_cast<unsigned>((layout.padded + 255) / 256), 256, 0, stream>>>(
      keys, flag, tokens, layout.positions, layout.padded, vocab_size, vocab_start);
  s = cuda::last_launch_status();
  if (!s.ok()) return s;
  s = sort_keys(keys, layout.padded, stream);
  if (!s.ok()) return s;
  const int threads = threads_for(c_packs);
  dwte_tile_kernel<T, G, N><<<static_cast<unsigned>(layout.tiles), threads, 0, stream>>>(
      dwte, head, tail, dout, keys, layout.padded, c_packs);
  s = cuda::last_launch_status();
  if (!s.ok()) return s;
  dwte_fixup_kernel<G, N><<<static_cast<unsigned>(layout.tiles), threads, 0, stream>>>(
      dwte, head, tail, keys, layout.padded, layout.tiles, c_packs);
  return cuda::last_launch_status();
}

KernelStatus check_sizes(int64_t batch, int64_t seq_len, int64_t channels, int64_t vocab_size,
                         int64_t max_seq_len, int64_t vocab_start) {
  if (batch < 0 || seq_len < 0 || channels < 0 || vocab_size < 0 || max_seq_len < 0 ||
      vocab_start < 0) {
    return KernelStatus::invalid_argument("embedding: negative size");
  }
  if (seq_len > max_seq_len) return KernelStatus::invalid_argument("embedding: seq_len > max_seq_len");
  if (batch * seq_len >= (int64_t{1} << 31)) {
    return KernelStatus::invalid_argument("embedding: batch * seq_len must be below 2^31 on CUDA");
  }
  // Grid limits: blockIdx.y covers channel packs of 32 (scalar path: up to 2M channels).
  if ((channels + kTileX - 1) / kTileX > 65535) {
    return KernelStatus::invalid_argument("embedding: channels too large");
  }
  return KernelStatus();
}

// The whole table is rows [0, vocab_size) with NaN rows and the flag for
// other ids; a shard (`shard`) its rows, zero rows for other ids, no flag, no
// position table, batch 1.
KernelStatus forward(void* out, int32_t* invalid_token_flag, const int32_t* tokens,
                     const void* wte, const void* wpe, int64_t batch, int64_t seq_len,
                     int64_t channels, int64_t vocab_size, int64_t max_seq_len,
                     int64_t vocab_start, bool shard, DType dtype, cudaStream_t stream) {
  KernelStatus s = check_sizes(batch, seq_len, channels, vocab_size, max_seq_len, vocab_start);
  if (!s.ok()) return s;
  const int64_t positions = batch * seq_len;
  if (positions == 0 || channels == 0) return KernelStatus();
  if (out == nullptr || tokens == nullptr || wte == nullptr) {
    return KernelStatus::invalid_argument("embedding_forward_cuda: null buffer");
  }
  return cuda::dispatch_float_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int kVec = 16 / sizeof(T);
    T* o = static_cast<T*>(out);
    const T* e = static_cast<const T*>(wte);
    const T* q = static_cast<const T*>(wpe);
    const unsigned blocks = static_cast<unsigned>((positions + kFwdWarps - 1) / kFwdWarps);
    if (channels % kVec == 0 && aligned16(o) && aligned16(e) && aligned16(q)) {
      embedding_forward_kernel<T, kVec><<<blocks, kFwdWarps * 32, 0, stream>>>(
          o, invalid_token_flag, tokens, e, q, positions, seq_len, channels / kVec, vocab_size,
          vocab_start, shard);
    } else {
      embedding_forward_kernel<T, 1><<<blocks, kFwdWarps * 32, 0, stream>>>(
          o, invalid_token_flag, tokens, e, q, positions, seq_len, channels, vocab_size,
          vocab_start, shard);
    }
    return cuda::last_launch_status();
  });
}

KernelStatus backward(void* dwte, void* dwpe, int32_t* invalid_token_flag, const void* dout,
                      const int32_t* tokens, void* scratch, size_t scratch_bytes, int64_t batch,
                      int64_t seq_len, int64_t channels, int64_t vocab_size, int64_t max_seq_len,
                      int64_t vocab_start, DType dtype, DType grad_dtype, GradMode mode,
                      cudaStream_t stream) {
  KernelStatus s = check_sizes(batch, seq_len, channels, vocab_size, max_seq_len, vocab_start);
  if (!s.ok()) return s;
  if (mode != GradMode::kDeterministic && mode != GradMode::kAtomic) {
    return KernelStatus::invalid_argument("embedding_backward_cuda: unknown GradMode");
  }
  if (grad_dtype != dtype && grad_dtype != DType::kF32) {
    return KernelStatus::unsupported("embedding_backward_cuda: grad_dtype must be dtype or float32");
  }
  if (mode == GradMode::kAtomic && grad_dtype != DType::kF32) {
    return KernelStatus::unsupported("embedding_backward_cuda: kAtomic needs float32 gradients");
  }
  if (batch * seq_len == 0 || channels == 0) return KernelStatus();
  if (dwte == nullptr || dout == nullptr || tokens == nullptr) {
    return KernelStatus::invalid_argument("embedding_backward_cuda: null buffer");
  }
  // The layout header, not embedding_backward_scratch_bytes(): this library
  // must not depend on the CPU library's objects.
  const size_t need = mode == GradMode::kDeterministic
                          ? internal::deterministic_layout(batch * seq_len, channels).total
                          : 0;
  if (need > 0 && (scratch == nullptr || scratch_bytes < need)) {
    return KernelStatus::invalid_argument(
        "embedding_backward_cuda: scratch smaller than embedding_backward_scratch_bytes()");
  }
  if (need > 0 && !aligned16(scratch)) {
    return KernelStatus::invalid_argument("embedding_backward_cuda: scratch not 16-byte aligned");
  }
  return cuda::dispatch_float_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int kVec = 16 / sizeof(T);
    const T* dy = static_cast<const T*>(dout);
    auto run = [&](auto grad_tag) {
      using G = decltype(grad_tag);
      G* gte = static_cast<G*>(dwte);
      G* gpe = static_cast<G*>(dwpe);
      if (channels % kVec == 0 && aligned16(dy) && aligned16(gte) && aligned16(gpe)) {
        return backward_typed<T, G, kVec>(gte, gpe, invalid_token_flag, dy, tokens, scratch, batch,
                                          seq_len, channels, vocab_size, vocab_start, mode, stream);
      }
      return backward_typed<T, G, 1>(gte, gpe, invalid_token_flag, dy, tokens, scratch, batch,
                                     seq_len, channels, vocab_size, vocab_start, mode, stream);
    };
    if (grad_dtype == DType::kF32) return run(float{});
    return run(T{});
  });
}

}  // namespace

KernelStatus embedding_forward_cuda(void* out, int32_t* invalid_token_flag, const int32_t* tokens,
                                    const void* wte, const void* wpe, int64_t batch, int64_t seq_len,
                                    int64_t channels, int64_t vocab_size, int64_t max_seq_len,
                                    DType dtype, cudaStream_t stream) {
  return forward(out, invalid_token_flag, tokens, wte, wpe, batch, seq_len, channels, vocab_size,
                 max_seq_len, /*vocab_start=*/0, /*shard=*/false, dtype, stream);
}

KernelStatus embedding_backward_cuda(void* dwte, void* dwpe, int32_t* invalid_token_flag,
                                     const void* dout, const int32_t* tokens, void* scratch,
                                     size_t scratch_bytes, int64_t batch, int64_t seq_len,
                                     int64_t channels, int64_t vocab_size, int64_t max_seq_len,
                                     DType dtype, DType grad_dtype, GradMode mode,
                                     cudaStream_t stream) {
  return backward(dwte, dwpe, invalid_token_flag, dout, tokens, scratch, scratch_bytes, batch,
                  seq_len, channels, vocab_size, max_seq_len, /*vocab_start=*/0, dtype,
                  grad_dtype, mode, stream);
}

KernelStatus embedding_shard_forward_cuda(void* out, const int32_t* tokens, const void* wte,
                                          int64_t n, int64_t channels, int64_t vocab_size,
                                          int64_t vocab_start, DType dtype, cudaStream_t stream) {
  return forward(out, nullptr, tokens, wte, nullptr, 1, n, channels, vocab_size, n, vocab_start,
                 /*shard=*/true, dtype, stream);
}

KernelStatus embedding_shard_backward_cuda(void* dwte, const void* dout, const int32_t* tokens,
                                           void* scratch, size_t scratch_bytes, int64_t n,
                                           int64_t channels, int64_t vocab_size,
                                           int64_t vocab_start, DType dtype, DType grad_dtype,
                                           GradMode mode, cudaStream_t stream) {
  return backward(dwte, nullptr, nullptr, dout, tokens, scratch, scratch_bytes, 1, n, channels,
                  vocab_size, n, vocab_start, dtype, grad_dtype, mode, stream);
}

}  // namespace colossal::kernels::embedding
