// Private to kernels/attention: the device code of the fused attention (causal
// or full mask; head_dim D = 64, 96 or 128: every loop tiles D by 16 and 8)
// (parameters, tile helpers and the four kernels), included textually inside
// namespace colossal::kernels::attention::{anonymous} by
//   * attention.cu, after the PTX wrappers it calls (cp_async_16,
//     cp_async_commit, cp_async_wait_all, ldsm_x4, ldsm_x4_trans, Mma<T>::run,
//     Mma<T>::pack, fast_exp2), and
//   * attention_emulation_test.cc, after host emulations of the same wrappers
//     and of threadIdx / __syncthreads / __syncwarp / __shfl_xor_sync, so CI
//     without a GPU runs this exact code on CPU threads.
// No include guard and no includes: a fragment, not a standalone header.
// COLOSSAL_UNROLL is #pragma unroll under nvcc and empty in the emulation.
// See attention.cu for the design.

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr int kThreads = 128;  // 4 warps
constexpr int kBlock = 64;     // rows per CTA tile (4 warps x 16)
constexpr int64_t kMaxSeq = int64_t{1} << 30;

struct Params {
  const void* q;
  const void* k;
  const void* v;
  const void* o;    // forward output (backward input)
  const void* d_o;  // backward
  void* out;        // forward: o
  void* dq;
  void* dk;
  void* dv;
  float* lse_out;       // forward
  const float* lse;     // backward
  float* delta;         // backward workspace
  int64_t qkv_stride;   // elements between consecutive positions of q, k, v, dq, dk, dv
  int64_t o_stride;     // ... of o, d_o
  int64_t batch;
  int seq, heads;
  int kv_heads;  // heads is a multiple of it
  int group;     // heads / kv_heads: query head h reads kv head h / group
  float scale;       // softmax scale
  float scale_log2;  // scale * log2(e)
  int full;          // 1: AttentionMask::kFull (every key); 0: causal (a zeroed Params).
                     // The launcher picks the kernels' kFull from it.
  // The varlen layout (the kernels' kVarlen; null in the batch layout): row
  // offsets of the batch = num_seqs sequences (num_seqs + 1 entries, device
  // memory), seq = max_seqlen (it sizes the grids), and total = total_tokens
  // rows (lse and delta are [heads, total]).
  const int32_t* cu_seqlens;
  int64_t total;
};

// The CTA's sequence length where the mask needs it: its own (seq) in the
// varlen layout; in the batch layout p.seq, read from the parameters there as
// the batch kernels always did (with seq, the same value, ptxas compiles the
// full-mask kernels differently).
template <bool kVarlen>
__device__ __forceinline__ int mask_seq(const Params& p, int seq) {
  return kVarlen ? seq : p.seq;
}

// Key blocks of kBlock keys that query block qb (kBlock queries) of a
// sequence of seq positions visits: 0 .. qb under the causal mask (block qb
// holds the diagonal), every block holding a key below seq under the full one.
template <bool kFull, bool kVarlen>
__device__ __forceinline__ int key_blocks(const Params& p, int seq, int qb) {
  return kFull ? (mask_seq<kVarlen>(p, seq) + kBlock - 1) / kBlock : qb + 1;
}

// The last key a query row may see in the last key block it visits (where
// diag_masked applies): the row itself (causal) or the end of the sequence
// (full: only keys at or past seq are masked there).
template <bool kFull, bool kVarlen>
__device__ __forceinline__ int mask_limit(const Params& p, int seq, int row) {
  return kFull ? mask_seq<kVarlen>(p, seq) : row;
}

// ---------------------------------------------------------------------------
// Tiles. A tile is kRows x D elements in shared memory, row pitch D + 8.

template <int D>
constexpr int pitch() {
  return D + 8;
}

// Copies rows row0 .. row0 + kRows - 1 of one head (base points at position 0
// of that head) into `tile`; rows at or past seq are zero-filled.
template <typename T, int D, int kRows>
__device__ __forceinline__ void load_tile(T* tile, const T* base, int64_t stride, int row0,
                                          int seq) {
  constexpr int kChunksPerRow = D / 8;
  constexpr int kChunks = kRows * kChunksPerRow;
  static_assert(kChunks % kThreads == 0, "tile chunks must divide among the threads");
COLOSSAL_UNROLL
  for (int i = 0; i < kChunks / kThreads; ++i) {
    const int c = i * kThreads + threadIdx.x;
    const int r = c / kChunksPerRow, col = (c % kChunksPerRow) * 8;
    const int row = row0 + r;
    const bool valid = row < seq;
    const T* src = valid ? base + static_cast<int64_t>(row) * stride + col : base;
    cp_async_16(tile + r * pitch<D>() + col, src, valid);
  }
}

// A operand (16 rows x 16 k) from rows row0.. of a tile, k columns k0..k0+15.
template <int D, typename T>
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const T* tile, int row0, int k0,
                                       int lane) {
  ldsm_x4(a, tile + (row0 + (lane & 15)) * pitch<D>() + k0 + (lane >> 4) * 8);
}

// B operands of two n-tiles (n0..n0+7 -> b[0], b[1]; n0+8..n0+15 -> b[2], b[3])
// for B[k][n] = tile[n][k] (the tile's rows are B's columns): k0..k0+15.
template <int D, typename T>
__device__ __forceinline__ void load_b_rows(uint32_t (&b)[4], const T* tile, int n0, int k0,
                                            int lane) {
  ldsm_x4(b, tile + (n0 + ((lane >> 4) << 3) + (lane & 7)) * pitch<D>() + k0 +
                 ((lane >> 3) & 1) * 8);
}

// B operands of two n-tiles for B[k][n] = tile[k][n] (the tile's rows are B's
// rows, k0..k0+15; columns n0..n0+15): transposed ldmatrix.
template <int D, typename T>
__device__ __forceinline__ void load_b_trans(uint32_t (&b)[4], const T* tile, int k0, int n0,
                                             int lane) {
  ldsm_x4_trans(b, tile + (k0 + ((lane >> 3) & 1) * 8 + (lane & 7)) * pitch<D>() + n0 +
                       (lane >> 4) * 8);
}

// The A operand (16 x 16) made of accumulator n-tiles 2c and 2c + 1.
template <typename T>
__device__ __forceinline__ void acc_to_a(uint32_t (&a)[4], const float (&lo)[4],
                                         const float (&hi)[4]) {
  a[0] = Mma<T>::pack(lo[0], lo[1]);
  a[1] = Mma<T>::pack(lo[2], lo[3]);
  a[2] = Mma<T>::pack(hi[0], hi[1]);
  a[3] = Mma<T>::pack(hi[2], hi[3]);
}

// Writes a warp's 16 x D accumulator (rows row0.. of `stage`, scaled by mul[r]
// for row half r) into shared memory, then the 16 rows to global memory with
// 16-byte stores (rows at or past seq skipped). `global_row0` is the position
// of stage row row0.
template <typename T, int D>
__device__ __forceinline__ void store_rows(T* stage, const float (&acc)[D / 8][4],
                                           const float (&mul)[2], int row0, T* base,
                                           int64_t stride, int global_row0, int seq, int lane) {
  const int g = lane >> 2, t = lane & 3;
COLOSSAL_UNROLL
  for (int dt = 0; dt < D / 8; ++dt) {
COLOSSAL_UNROLL
    for (int r = 0; r < 2; ++r) {
      *reinterpret_cast<uint32_t*>(stage + (row0 + g + 8 * r) * pitch<D>() + dt * 8 + 2 * t) =
          Mma<T>::pack(acc[dt][2 * r] * mul[r], acc[dt][2 * r + 1] * mul[r]);
    }
  }
  __syncwarp();
  constexpr int kChunksPerRow = D / 8;
COLOSSAL_UNROLL
  for (int i = 0; i < 16 * kChunksPerRow / 32; ++i) {
    const int c = i * 32 + lane;
    const int r = c / kChunksPerRow, col = (c % kChunksPerRow) * 8;
    const int row = global_row0 + r;
    if (row < seq) {
      *reinterpret_cast<uint4*>(base + static_cast<int64_t>(row) * stride + col) =
          *reinterpret_cast<const uint4*>(stage + (row0 + r) * pitch<D>() + col);
    }
  }
}

// What the attention kernels (4 warps) know of their CTA: its sequence's
// length seq and first row start (the batch layout: p.seq and b * p.seq,
// start kept 0; kVarlen: from cu_seqlens[b], cu_seqlens[b + 1]), its query
// head's row block bh of lse and delta (b * heads + h; kVarlen: h, lse and
// delta being [heads, total]), the offsets of position 0 of query head h in q
// (and dq), of its kv head h / (heads / kv_heads) in k and v (and dk, dv), and
// of head h in o / d_o, the q/k/v pointers there; and this thread's warp, lane
// and m16n8 fragment coordinates g = lane / 4, t = lane % 4. Head(p): a CTA of
// a grid.y = batch * heads launch (forward, dQ); Head(p, b, h): query head h
// of sequence b named explicitly (dK/dV, whose CTAs are per kv head).
template <typename T, int D, bool kVarlen>
struct Head {
  int bh, warp, lane, g, t;
  int seq, start;
  int64_t q_head, kv_head, o_head;
  const T *Q, *K, *V;

  __device__ __forceinline__ explicit Head(const Params& p)
      : Head(p, static_cast<int>(blockIdx.y) / p.heads, static_cast<int>(blockIdx.y) % p.heads) {}

  __device__ __forceinline__ Head(const Params& p, int b, int h) {
    if constexpr (kVarlen) {
      start = p.cu_seqlens[b];
      seq = p.cu_seqlens[b + 1] - start;
      bh = h;
    } else {
      start = 0;
      seq = p.seq;
      bh = b * p.heads + h;
    }
    warp = threadIdx.x / 32;
    lane = threadIdx.x % 32;
    g = lane >> 2;
    t = lane & 3;
    const int64_t row0 =
        kVarlen ? static_cast<int64_t>(start) : static_cast<int64_t>(b) * p.seq;
    q_head = row0 * p.qkv_stride + static_cast<int64_t>(h) * D;
    kv_head = row0 * p.qkv_stride + static_cast<int64_t>(h / p.group) * D;
    o_head = row0 * p.o_stride + static_cast<int64_t>(h) * D;
    Q = static_cast<const T*>(p.q) + q_head;
    K = static_cast<const T*>(p.k) + kv_head;
    V = static_cast<const T*>(p.v) + kv_head;
  }

  // Where lse and delta hold position 0 of query head h + r (r: a later head
  // of dK/dV's group); position t is t further. The batch layout's
  // (bh + r) * n takes n = seq = p.seq in the form each kernel passes
  // (hd.seq, or p.seq read again): the forms with which ptxas emits the
  // batch kernels instruction for instruction as before the varlen layout.
  __device__ __forceinline__ int64_t lse_row0(const Params& p, int n, int r) const {
    if constexpr (kVarlen) {
      return static_cast<int64_t>(bh + r) * p.total + start;
    } else {
      return static_cast<int64_t>(bh + r) * n;
    }
  }
};

// Zeroes NT accumulator n-tiles.
template <int NT>
__device__ __forceinline__ void zero_acc(float (&acc)[NT][4]) {
COLOSSAL_UNROLL
  for (int nt = 0; nt < NT; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;
}

// d0 += a B (n-tile n0..n0+7), d1 += a B (n0+8..n0+15) for B[k][n] = tile[n][k],
// k = k0..k0+15.
template <int D, typename T>
__device__ __forceinline__ void mma_b_rows(float (&d0)[4], float (&d1)[4], const uint32_t (&a)[4],
                                           const T* tile, int n0, int k0, int lane) {
  uint32_t b[4];
  load_b_rows<D>(b, tile, n0, k0, lane);
  Mma<T>::run(d0, a, b[0], b[1]);
  Mma<T>::run(d1, a, b[2], b[3]);
}

// acc (16 x NT * 8) += a (16 x 16, k = k0..k0+15) times rows 0 .. NT * 8 - 1 of
// `tile` transposed.
template <int D, int NT, typename T>
__device__ __forceinline__ void mma_a_rows(float (&acc)[NT][4], const uint32_t (&a)[4],
                                           const T* tile, int k0, int lane) {
COLOSSAL_UNROLL
  for (int nb = 0; nb < NT / 2; ++nb) {
    mma_b_rows<D>(acc[2 * nb], acc[2 * nb + 1], a, tile, nb * 16, k0, lane);
  }
}

// acc (16 x NT * 8) += rows row0..row0+15 of `a_tile` times rows 0 .. NT * 8 - 1
// of `b_tile` transposed, over all D columns.
template <int D, int NT, typename T>
__device__ __forceinline__ void mma_rows_rows(float (&acc)[NT][4], const T* a_tile, int row0,
                                              const T* b_tile, int lane) {
COLOSSAL_UNROLL
  for (int kk = 0; kk < D / 16; ++kk) {
    uint32_t a[4];
    load_a<D>(a, a_tile, row0, kk * 16, lane);
    mma_a_rows<D>(acc, a, b_tile, kk * 16, lane);
  }
}

// acc (16 x D) += pm (16 x NT * 8, accumulator layout, as the A operand) times
// rows 0 .. NT * 8 - 1 of `tile`.
template <typename T, int D, int NT>
__device__ __forceinline__ void mma_acc_tile(float (&acc)[D / 8][4], const float (&pm)[NT][4],
                                             const T* tile, int lane) {
COLOSSAL_UNROLL
  for (int c = 0; c < NT / 2; ++c) {
    uint32_t a[4];
    acc_to_a<T>(a, pm[2 * c], pm[2 * c + 1]);
COLOSSAL_UNROLL
    for (int dp = 0; dp < D / 16; ++dp) {
      uint32_t f[4];
      load_b_trans<D>(f, tile, c * 16, dp * 16, lane);
      Mma<T>::run(acc[2 * dp], a, f[0], f[1]);
      Mma<T>::run(acc[2 * dp + 1], a, f[2], f[3]);
    }
  }
}

// On the last key block j a query block visits (keys from j * kBlock: the
// diagonal block under the causal mask, the sequence's last block under the
// full one): whether the score of query limit `row` (mask_limit) and the key of
// element i of this thread's n-tile nt is masked (the key is after the query,
// or at or past seq).
__device__ __forceinline__ bool diag_masked(int j, int nt, int i, int t, int row, int seq) {
  const int col = j * kBlock + nt * 8 + 2 * t + (i & 1);
  return col > row || col >= seq;
}

// Key-block loop step j of n_kb (forward, dQ): starts the copy of block j + 1
// of K and V into the other halves of the double-buffered sK / sV, and commits.
template <typename T, int D>
__device__ __forceinline__ void prefetch_kv(T* sK, T* sV, const T* K, const T* V, int64_t stride,
                                            int j, int n_kb, int seq) {
  constexpr int kTile = kBlock * pitch<D>();
  if (j + 1 < n_kb) {
    const int nb = (j + 1) & 1;
    load_tile<T, D, kBlock>(sK + nb * kTile, K, stride, (j + 1) * kBlock, seq);
    load_tile<T, D, kBlock>(sV + nb * kTile, V, stride, (j + 1) * kBlock, seq);
  }
  cp_async_commit();
}

// ---------------------------------------------------------------------------
// Forward.

template <typename T, int D>
constexpr int forward_smem_bytes() {
  return 5 * kBlock * pitch<D>() * static_cast<int>(sizeof(T));  // Q, 2 x K, 2 x V
}

// kFull: the full mask; kVarlen: the varlen layout (Params::cu_seqlens), the
// grid over max_seqlen's query blocks, so a CTA past its sequence's end
// returns at once. (Template parameters, so the batch-layout causal kernels
// compile exactly as they would without either: sm_90 machine code checked
// identical for every batch-layout kernel of this file.)
template <typename T, int D, bool kFull, bool kVarlen>
__global__ void __launch_bounds__(kThreads) forward_kernel(Params p) {
  constexpr int kTile = kBlock * pitch<D>();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);
  T* sK = sQ + kTile;      // 2 tiles
  T* sV = sK + 2 * kTile;  // 2 tiles
  const int qb = gridDim.x - 1 - blockIdx.x;  // heaviest (longest) query blocks first
  const int q0 = qb * kBlock;
  const Head<T, D, kVarlen> hd(p);
  // (p.seq read again in the batch layout, hd.seq's value: see lse_row0.)
  const int seq = kVarlen ? hd.seq : p.seq;
  if (kVarlen && q0 >= seq) return;
  const int warp = hd.warp, lane = hd.lane, g = hd.g, t = hd.t;
  const T *Q = hd.Q, *K = hd.K, *V = hd.V;

  load_tile<T, D, kBlock>(sQ, Q, p.qkv_stride, q0, seq);
  load_tile<T, D, kBlock>(sK, K, p.qkv_stride, 0, seq);
  load_tile<T, D, kBlock>(sV, V, p.qkv_stride, 0, seq);
  cp_async_commit();

  uint32_t qf[D / 16][4];
  float acc[D / 8][4];
  zero_acc(acc);
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const int row_base = q0 + warp * 16 + g;  // this thread's rows: row_base, row_base + 8
  const int lim[2] = {mask_limit<kFull, kVarlen>(p, seq, row_base),
                      mask_limit<kFull, kVarlen>(p, seq, row_base + 8)};
  const int n_kb = key_blocks<kFull, kVarlen>(p, seq, qb);

  for (int j = 0; j < n_kb; ++j) {
    cp_async_wait_all();
    __syncthreads();
    if (j == 0) {
COLOSSAL_UNROLL
      for (int kk = 0; kk < D / 16; ++kk) load_a<D>(qf[kk], sQ, warp * 16, kk * 16, lane);
    }
    prefetch_kv<T, D>(sK, sV, K, V, p.qkv_stride, j, n_kb, seq);
    const T* kt = sK + (j & 1) * kTile;
    const T* vt = sV + (j & 1) * kTile;

    // S = Q K^T: 16 rows x 64 keys per warp.
    float s[8][4];
    zero_acc(s);
COLOSSAL_UNROLL
    for (int kk = 0; kk < D / 16; ++kk) mma_a_rows<D>(s, qf[kk], kt, kk * 16, lane);
    // Scale into log2 units; on the last block (the diagonal one, causal) mask
    // keys past the query and keys past seq.
    const bool diag = j == n_kb - 1;
COLOSSAL_UNROLL
    for (int nt = 0; nt < 8; ++nt) {
COLOSSAL_UNROLL
      for (int i = 0; i < 4; ++i) {
        float x = s[nt][i] * p.scale_log2;
        if (diag && diag_masked(j, nt, i, t, lim[i >> 1], seq)) x = -INFINITY;
        s[nt][i] = x;
      }
    }
    // Online softmax, per row half r (the 4 lanes of a quad share a row).
COLOSSAL_UNROLL
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
COLOSSAL_UNROLL
      for (int nt = 0; nt < 8; ++nt) mx = fmaxf(mx, fmaxf(s[nt][2 * r], s[nt][2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[r], mx);
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;
      const float alpha = fast_exp2(m[r] - m_use);
      m[r] = m_new;
      float sum = 0.0f;
COLOSSAL_UNROLL
      for (int nt = 0; nt < 8; ++nt) {
COLOSSAL_UNROLL
        for (int e = 0; e < 2; ++e) {
          const float pv = fast_exp2(s[nt][2 * r + e] - m_use);
          s[nt][2 * r + e] = pv;
          sum += pv;
        }
      }
      l[r] = l[r] * alpha + sum;
COLOSSAL_UNROLL
      for (int dt = 0; dt < D / 8; ++dt) {
        acc[dt][2 * r] *= alpha;
        acc[dt][2 * r + 1] *= alpha;
      }
    }
    // O += P V.
    mma_acc_tile<T, D>(acc, s, vt, lane);
  }

  float inv[2];
COLOSSAL_UNROLL
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    inv[r] = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
    const int row = row_base + 8 * r;
    if (t == 0 && row < seq) {
      p.lse_out[hd.lse_row0(p, hd.seq, 0) + row] = (m[r] + __log2f(l[r])) * kLn2;
    }
  }
  __syncthreads();  // every warp is done with the shared tiles; each stages into its own Q rows
  T* O = static_cast<T*>(p.out) + hd.o_head;
  store_rows<T, D>(sQ, acc, inv, warp * 16, O, p.o_stride, q0 + warp * 16, seq, lane);
}

// ---------------------------------------------------------------------------
// Backward.

// delta[(b * heads + h) * seq + t] = sum_c dO[b, t, h, c] * O[b, t, h, c]; one
// thread per (b, t, h), consecutive threads on consecutive heads. kVarlen:
// delta[h * total + r] for row r (sequence boundaries play no part).
template <typename T, int D, bool kVarlen>
__global__ void __launch_bounds__(256) delta_kernel(Params p) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t total = (kVarlen ? p.total : p.batch * p.seq) * p.heads;
  if (idx >= total) return;
  const int64_t h = idx % p.heads, bt = idx / p.heads;
  // kVarlen: row bt of one "batch" of total rows (delta is [heads, total]).
  const int64_t b = kVarlen ? 0 : bt / p.seq, pos = kVarlen ? bt : bt % p.seq;
  const T* o = static_cast<const T*>(p.o) + bt * p.o_stride + h * D;
  const T* go = static_cast<const T*>(p.d_o) + bt * p.o_stride + h * D;
  uint4 ov[D / 8], gv[D / 8];
COLOSSAL_UNROLL
  for (int c = 0; c < D / 8; ++c) {
    ov[c] = *reinterpret_cast<const uint4*>(o + 8 * c);
    gv[c] = *reinterpret_cast<const uint4*>(go + 8 * c);
  }
  float sum = 0.0f;
COLOSSAL_UNROLL
  for (int c = 0; c < D / 8; ++c) {
    const T* oe = reinterpret_cast<const T*>(&ov[c]);
    const T* ge = reinterpret_cast<const T*>(&gv[c]);
COLOSSAL_UNROLL
    for (int e = 0; e < 8; ++e) sum += cuda::to_math(oe[e]) * cuda::to_math(ge[e]);
  }
  p.delta[(b * p.heads + h) * (kVarlen ? p.total : p.seq) + pos] = sum;
}

template <typename T, int D, int BQ>
constexpr int dkdv_smem_bytes() {
  return (2 * kBlock + 4 * BQ) * pitch<D>() * static_cast<int>(sizeof(T)) +
         4 * BQ * static_cast<int>(sizeof(float));
}

// Query-block rows per dK/dV step: 64 for D = 64; 32 for D = 96 and 128 (keeps
// the accumulators of two 16 x D tiles plus S^T and dP^T in registers).
template <int D>
constexpr int dkdv_block_q() {
  return D <= 64 ? 64 : 32;
}

template <typename T, int D, int BQ, bool kFull, bool kVarlen>
__global__ void __launch_bounds__(kThreads) dkdv_kernel(Params p) {
  constexpr int kKV = kBlock * pitch<D>();
  constexpr int kQT = BQ * pitch<D>();
  constexpr int NT = BQ / 8;  // query n-tiles of S^T
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sK = reinterpret_cast<T*>(smem_raw);
  T* sV = sK + kKV;
  T* sQ = sV + kKV;       // 2 tiles
  T* sdO = sQ + 2 * kQT;  // 2 tiles
  float* sL = reinterpret_cast<float*>(sdO + 2 * kQT);  // 2 x BQ: lse * log2(e)
  float* sD = sL + 2 * BQ;                              // 2 x BQ: delta
  const int kb = blockIdx.x;  // low key blocks see the most queries: launched first
  const int kv0 = kb * kBlock;
  // CTA = (batch, kv head, key block), grid.y = batch * kv_heads; it owns dK/dV
  // of its keys and sums the group's query heads kvh * group .. + group - 1 in
  // order. Query head r of the group is the first one's Q, dO plus r * D, and
  // row block bh + r of lse and delta (indexed off the kernel parameters: no
  // extra pointers live across the loop).
  // (group divided out here rather than read from p.group: at 255 registers
  // for D = 128, this is the form ptxas keeps free of spills.)
  const int group = p.heads / p.kv_heads;
  const int b = static_cast<int>(blockIdx.y) / p.kv_heads;
  const int kvh = static_cast<int>(blockIdx.y) % p.kv_heads;
  const Head<T, D, kVarlen> hd(p, b, kvh * group);
  const int seq = hd.seq;
  if (kVarlen && kv0 >= seq) return;
  const int warp = hd.warp, lane = hd.lane, g = hd.g, t = hd.t;
  const T *Q = hd.Q, *K = hd.K, *V = hd.V;
  const T* dO = static_cast<const T*>(p.d_o) + hd.o_head;

  // Query block i of the group's query head r.
  auto load_q_block = [&](int r, int i, int into) {
    load_tile<T, D, BQ>(sQ + into * kQT, Q + r * D, p.qkv_stride, i * BQ, seq);
    load_tile<T, D, BQ>(sdO + into * kQT, dO + r * D, p.o_stride, i * BQ, seq);
    const int64_t head_rows = hd.lse_row0(p, seq, r);
    const int tid = threadIdx.x;
    if (tid < BQ) {
      const int row = i * BQ + tid;
      sL[into * BQ + tid] = row < seq ? p.lse[head_rows + row] * kLog2e : 0.0f;
    } else if (tid < 2 * BQ) {
      const int row = i * BQ + tid - BQ;
      sD[into * BQ + tid - BQ] = row < seq ? p.delta[head_rows + row] : 0.0f;
    }
  };

  // Causal: from the query block holding the tile's first key; full: all.
  const int i0 = kFull ? 0 : kv0 / BQ;
  const int n_qb = (seq + BQ - 1) / BQ;
  load_tile<T, D, kBlock>(sK, K, p.qkv_stride, kv0, seq);
  load_tile<T, D, kBlock>(sV, V, p.qkv_stride, kv0, seq);
  load_q_block(0, i0, 0);
  cp_async_commit();

  float dk[D / 8][4], dv[D / 8][4];
  zero_acc(dk);
  zero_acc(dv);
  const int kv_row_base = kv0 + warp * 16 + g;  // this thread's keys: kv_row_base, +8

  // One pipeline over (r, i): query blocks i0 .. n_qb - 1 of head 0, then of
  // head 1, ...; the copy of the next step overlaps this step's math.
  int buf = 0;
  for (int r = 0; r < group; ++r) {
    for (int i = i0; i < n_qb; ++i, buf ^= 1) {
      cp_async_wait_all();
      __syncthreads();
      if (i + 1 < n_qb) {
        load_q_block(r, i + 1, buf ^ 1);
      } else if (r + 1 < group) {
        load_q_block(r + 1, i0, buf ^ 1);
      }
      cp_async_commit();
      const T* qt = sQ + buf * kQT;
      const T* dot = sdO + buf * kQT;
      const float* lt = sL + buf * BQ;
      const float* dlt = sD + buf * BQ;
      const int q0 = i * BQ;

      // S^T = K Q^T: 16 keys x BQ queries per warp.
      float s[NT][4];
      zero_acc(s);
      mma_rows_rows<D>(s, sK, warp * 16, qt, lane);
      // P^T = exp2(S^T * scale log2 e - lse log2 e); 0 where the key is after the
      // query (causal) or the query is past seq. (Keys past seq only reach
      // their own dK / dV rows, which are never written.)
      const bool need_mask = (!kFull && q0 < kv0 + kBlock) || q0 + BQ > seq;
COLOSSAL_UNROLL
      for (int nt = 0; nt < NT; ++nt) {
COLOSSAL_UNROLL
        for (int e = 0; e < 4; ++e) {
          const int ql = nt * 8 + 2 * t + (e & 1);
          float pv = fast_exp2(s[nt][e] * p.scale_log2 - lt[ql]);
          if (need_mask) {
            const int qrow = q0 + ql, krow = kv_row_base + 8 * (e >> 1);
            if ((!kFull && qrow < krow) || qrow >= seq) pv = 0.0f;
          }
          s[nt][e] = pv;
        }
      }
      // dV += P^T dO.
      mma_acc_tile<T, D>(dv, s, dot, lane);
      // dP^T = V dO^T.
      float dpt[NT][4];
      zero_acc(dpt);
      mma_rows_rows<D>(dpt, sV, warp * 16, dot, lane);
      // dS^T = P^T (dP^T - delta[query]).
COLOSSAL_UNROLL
      for (int nt = 0; nt < NT; ++nt) {
COLOSSAL_UNROLL
        for (int e = 0; e < 4; ++e) {
          const int ql = nt * 8 + 2 * t + (e & 1);
          s[nt][e] = s[nt][e] * (dpt[nt][e] - dlt[ql]);
        }
      }
      // dK += dS^T Q (times scale at the end).
      mma_acc_tile<T, D>(dk, s, qt, lane);
    }
  }

  __syncthreads();  // each warp stages into its own rows of sK / sV
  const float scale2[2] = {p.scale, p.scale}, one2[2] = {1.0f, 1.0f};
  store_rows<T, D>(sK, dk, scale2, warp * 16, static_cast<T*>(p.dk) + hd.kv_head, p.qkv_stride,
                   kv0 + warp * 16, seq, lane);
  store_rows<T, D>(sV, dv, one2, warp * 16, static_cast<T*>(p.dv) + hd.kv_head, p.qkv_stride,
                   kv0 + warp * 16, seq, lane);
}

template <typename T, int D>
constexpr int dq_smem_bytes() {
  return 6 * kBlock * pitch<D>() * static_cast<int>(sizeof(T));  // Q, dO, 2 x K, 2 x V
}

template <typename T, int D, bool kFull, bool kVarlen>
__global__ void __launch_bounds__(kThreads) dq_kernel(Params p) {
  constexpr int kTile = kBlock * pitch<D>();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);
  T* sdO = sQ + kTile;
  T* sK = sdO + kTile;     // 2 tiles
  T* sV = sK + 2 * kTile;  // 2 tiles
  const int qb = gridDim.x - 1 - blockIdx.x;
  const int q0 = qb * kBlock;
  const Head<T, D, kVarlen> hd(p);
  const int seq = hd.seq;
  if (kVarlen && q0 >= seq) return;
  const int warp = hd.warp, lane = hd.lane, g = hd.g, t = hd.t;
  const T *Q = hd.Q, *K = hd.K, *V = hd.V;
  const T* dO = static_cast<const T*>(p.d_o) + hd.o_head;

  load_tile<T, D, kBlock>(sQ, Q, p.qkv_stride, q0, seq);
  load_tile<T, D, kBlock>(sdO, dO, p.o_stride, q0, seq);
  load_tile<T, D, kBlock>(sK, K, p.qkv_stride, 0, seq);
  load_tile<T, D, kBlock>(sV, V, p.qkv_stride, 0, seq);
  cp_async_commit();

  const int row_base = q0 + warp * 16 + g;
  float lse2[2], dl[2];
COLOSSAL_UNROLL
  for (int r = 0; r < 2; ++r) {
    const int row = row_base + 8 * r;
    lse2[r] = row < seq ? p.lse[hd.lse_row0(p, p.seq, 0) + row] * kLog2e : 0.0f;
    dl[r] = row < seq ? p.delta[hd.lse_row0(p, p.seq, 0) + row] : 0.0f;
  }
  const int lim[2] = {mask_limit<kFull, kVarlen>(p, seq, row_base),
                      mask_limit<kFull, kVarlen>(p, seq, row_base + 8)};
  float dq[D / 8][4];
  zero_acc(dq);
  const int n_kb = key_blocks<kFull, kVarlen>(p, seq, qb);

  for (int j = 0; j < n_kb; ++j) {
    cp_async_wait_all();
    __syncthreads();
    prefetch_kv<T, D>(sK, sV, K, V, p.qkv_stride, j, n_kb, seq);
    const T* kt = sK + (j & 1) * kTile;
    const T* vt = sV + (j & 1) * kTile;

    // S = Q K^T and dP = dO V^T: 16 queries x 64 keys per warp.
    float s[8][4], dp[8][4];
    zero_acc(s);
    zero_acc(dp);
COLOSSAL_UNROLL
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t qf[4], of[4];
      load_a<D>(qf, sQ, warp * 16, kk * 16, lane);
      load_a<D>(of, sdO, warp * 16, kk * 16, lane);
COLOSSAL_UNROLL
      for (int nb = 0; nb < 4; ++nb) {
        mma_b_rows<D>(s[2 * nb], s[2 * nb + 1], qf, kt, nb * 16, kk * 16, lane);
        mma_b_rows<D>(dp[2 * nb], dp[2 * nb + 1], of, vt, nb * 16, kk * 16, lane);
      }
    }
    // dS = P (dP - delta), P = exp2(S * scale log2 e - lse log2 e), 0 past the
    // diagonal (causal) and past seq, on the last block.
    const bool diag = j == n_kb - 1;
COLOSSAL_UNROLL
    for (int nt = 0; nt < 8; ++nt) {
COLOSSAL_UNROLL
      for (int i = 0; i < 4; ++i) {
        const int r = i >> 1;
        float pv = fast_exp2(s[nt][i] * p.scale_log2 - lse2[r]);
        if (diag && diag_masked(j, nt, i, t, lim[r], seq)) pv = 0.0f;
        s[nt][i] = pv * (dp[nt][i] - dl[r]);
      }
    }
    // dQ += dS K (times scale at the end).
    mma_acc_tile<T, D>(dq, s, kt, lane);
  }

  __syncthreads();
  const float scale2[2] = {p.scale, p.scale};
  store_rows<T, D>(sQ, dq, scale2, warp * 16, static_cast<T*>(p.dq) + hd.q_head, p.qkv_stride,
                   q0 + warp * 16, seq, lane);
}

