// The CUDA kernels' own source (attention_kernels.h) run on the CPU: each
// CTA is 128 host threads, and the few warp-level primitives the kernels use
// are emulated from their PTX definitions (ldmatrix .x4 / .x4.trans fragment
// layouts, mma.sync.m16n8k16 row.col with fp32 accumulation, shfl.xor,
// bar.sync / bar.warp.sync, cp.async with zero-fill). Results are compared
// with the CPU float64 reference, so the kernels' tiling, masking, online
// softmax, fragment bookkeeping and strided I/O are checked in CI without a
// GPU. cp.async copies run once at issue time and once deferred to the next
// wait_group (the two extremes a real GPU can show), shared memory starts as
// garbage, outputs as NaN. What this cannot check: the hardware's own
// instruction semantics, timing, and register/shared-memory limits — the GPU
// test (attention_test) covers those.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "kernels/attention/attention.h"
#include "kernels/common/half.h"

// ---- CUDA vocabulary on the host. ----
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__
#define __align__(n) __attribute__((aligned(n)))

struct uint3 {
  unsigned x = 0, y = 0, z = 0;
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
struct __nv_bfloat16 {
  uint16_t bits;
};
struct __half {
  uint16_t bits;
};

thread_local uint3 threadIdx, blockIdx, gridDim, blockDim;

inline float __log2f(float x) { return std::log2(x); }

namespace colossal::kernels::attention {
namespace {

constexpr int kEmuThreads = 128;

// One CTA's barriers and a per-lane exchange area for warp collectives.
struct BlockState {
  std::barrier<> block{kEmuThreads};
  std::unique_ptr<std::barrier<>> warp[kEmuThreads / 32];
  alignas(16) unsigned char slots[kEmuThreads / 32][32][64];
  BlockState() {
    for (auto& w : warp) w = std::make_unique<std::barrier<>>(32);
  }
};

thread_local BlockState* tl_block = nullptr;
struct PendingCopy {
  void* dst;
  const void* src;
  bool valid;
};
thread_local std::vector<PendingCopy> tl_pending;
bool g_defer_copies = false;

}  // namespace
}  // namespace colossal::kernels::attention

using colossal::kernels::attention::tl_block;

inline void __syncthreads() { tl_block->block.arrive_and_wait(); }
inline void __syncwarp() { tl_block->warp[threadIdx.x / 32]->arrive_and_wait(); }

// Every lane posts `in`; once the warp has posted, each computes its result
// from all lanes' inputs (get(lane)); a second barrier frees the slots.
template <typename In, typename F>
auto collective(const In& in, F compute) {
  static_assert(sizeof(In) <= 64, "collective input too large");
  const int w = threadIdx.x / 32, l = threadIdx.x % 32;
  std::memcpy(tl_block->slots[w][l], &in, sizeof(In));
  tl_block->warp[w]->arrive_and_wait();
  auto get = [&](int lane) {
    In v;
    std::memcpy(&v, tl_block->slots[w][lane], sizeof(In));
    return v;
  };
  auto out = compute(get, l);
  tl_block->warp[w]->arrive_and_wait();
  return out;
}

inline float __shfl_xor_sync(unsigned, float v, int lane_mask) {
  return collective(v, [&](auto get, int l) { return get(l ^ lane_mask); });
}

namespace colossal::kernels::attention {
namespace cuda {
inline float to_math(__nv_bfloat16 v) { return bfloat16_to_float(BFloat16{v.bits}); }
inline float to_math(__half v) { return half_to_float(Half{v.bits}); }
}  // namespace cuda

namespace {

alignas(16) unsigned char smem_raw[256 * 1024];

// ---- The PTX wrappers attention.cu defines, emulated. ----

inline void cp_async_16(void* smem, const void* gmem, bool valid) {
  if (g_defer_copies) {
    tl_pending.push_back({smem, gmem, valid});
  } else if (valid) {
    std::memcpy(smem, gmem, 16);
  } else {
    std::memset(smem, 0, 16);
  }
}
inline void cp_async_commit() {}
inline void cp_async_wait_all() {
  for (const PendingCopy& c : tl_pending) {
    if (c.valid) {
      std::memcpy(c.dst, c.src, 16);
    } else {
      std::memset(c.dst, 0, 16);
    }
  }
  tl_pending.clear();
}

// ldmatrix.x4: register i of lane l = row l / 4, columns 2 (l % 4) .. +1 of
// matrix i, whose row r is at the address lane 8 i + r gave.
inline void ldsm_x4(uint32_t (&r)[4], const void* p) {
  const auto out = collective(p, [](auto get, int l) {
    std::array<uint32_t, 4> o;
    for (int i = 0; i < 4; ++i) {
      const uint16_t* row = static_cast<const uint16_t*>(get(8 * i + l / 4));
      o[i] = uint32_t{row[2 * (l % 4)]} | (uint32_t{row[2 * (l % 4) + 1]} << 16);
    }
    return o;
  });
  for (int i = 0; i < 4; ++i) r[i] = out[i];
}
// .trans: the same of each matrix transposed.
inline void ldsm_x4_trans(uint32_t (&r)[4], const void* p) {
  const auto out = collective(p, [](auto get, int l) {
    std::array<uint32_t, 4> o;
    for (int i = 0; i < 4; ++i) {
      const uint16_t* r0 = static_cast<const uint16_t*>(get(8 * i + 2 * (l % 4)));
      const uint16_t* r1 = static_cast<const uint16_t*>(get(8 * i + 2 * (l % 4) + 1));
      o[i] = uint32_t{r0[l / 4]} | (uint32_t{r1[l / 4]} << 16);
    }
    return o;
  });
  for (int i = 0; i < 4; ++i) r[i] = out[i];
}

template <typename T>
float element(uint32_t reg, int e) {
  const uint16_t bits = static_cast<uint16_t>(e ? reg >> 16 : reg & 0xffffu);
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return bfloat16_to_float(BFloat16{bits});
  } else {
    return half_to_float(Half{bits});
  }
}

struct MmaIn {
  uint32_t a[4], b[2];
  float c[4];
};

// mma.sync.m16n8k16.row.col, fp32 accumulate (g = lane / 4, t = lane % 4):
//   a0: A[g][2t..], a1: A[g+8][2t..], a2: A[g][2t+8..], a3: A[g+8][2t+8..]
//   b0: B[2t..][g], b1: B[2t+8..][g];  c/d: C[g][2t..], C[g+8][2t..]
template <typename T>
struct Mma {
  static void run(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    MmaIn in;
    for (int i = 0; i < 4; ++i) {
      in.a[i] = a[i];
      in.c[i] = d[i];
    }
    in.b[0] = b0;
    in.b[1] = b1;
    const auto out = collective(in, [&](auto get, int l) {
      float A[16][16], B[16][8];
      for (int j = 0; j < 32; ++j) {
        const MmaIn v = get(j);
        const int g = j / 4, t = j % 4;
        for (int e = 0; e < 2; ++e) {
          A[g][2 * t + e] = element<T>(v.a[0], e);
          A[g + 8][2 * t + e] = element<T>(v.a[1], e);
          A[g][2 * t + 8 + e] = element<T>(v.a[2], e);
          A[g + 8][2 * t + 8 + e] = element<T>(v.a[3], e);
          B[2 * t + e][g] = element<T>(v.b[0], e);
          B[2 * t + 8 + e][g] = element<T>(v.b[1], e);
        }
      }
      const int g = l / 4, t = l % 4;
      std::array<float, 4> o;
      for (int i = 0; i < 4; ++i) {
        const int row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
        double acc = in.c[i];
        for (int k = 0; k < 16; ++k) acc += double{A[row][k]} * B[k][col];
        o[i] = static_cast<float>(acc);
      }
      return o;
    });
    for (int i = 0; i < 4; ++i) d[i] = out[i];
  }
  static uint32_t pack(float lo, float hi) {
    uint16_t a, b;
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      a = from_float<BFloat16>(lo).bits;
      b = from_float<BFloat16>(hi).bits;
    } else {
      a = from_float<Half>(lo).bits;
      b = from_float<Half>(hi).bits;
    }
    return uint32_t{a} | (uint32_t{b} << 16);
  }
};

inline float fast_exp2(float x) { return std::exp2(x); }

#define COLOSSAL_UNROLL
#include "kernels/attention/attention_kernels.h"

// Runs `kernel` over a gx x gy grid of 128-thread CTAs, one CTA at a time.
template <typename K>
void run_grid(K kernel, unsigned gx, unsigned gy, const Params& p) {
  for (unsigned by = 0; by < gy; ++by) {
    for (unsigned bx = 0; bx < gx; ++bx) {
      BlockState state;
      std::memset(smem_raw, 0xFF, sizeof(smem_raw));  // garbage (NaN as half types)
      std::vector<std::thread> threads;
      for (unsigned t = 0; t < kEmuThreads; ++t) {
        threads.emplace_back([&, t]() {
          threadIdx.x = t;
          blockIdx.x = bx;
          blockIdx.y = by;
          gridDim.x = gx;
          gridDim.y = gy;
          blockDim.x = kEmuThreads;
          tl_block = &state;
          tl_pending.clear();
          kernel(p);
          cp_async_wait_all();
        });
      }
      for (std::thread& th : threads) th.join();
    }
  }
}

// The launches of attention.cu, with its choice of each kernel's kFull (from
// p.full) and kVarlen (from p.cu_seqlens).
template <typename T, int D, bool kVarlen>
void emulate_forward(const Params& p) {
  static_assert(forward_smem_bytes<T, D>() <= static_cast<int>(sizeof(smem_raw)));
  run_grid(p.full ? forward_kernel<T, D, true, kVarlen> : forward_kernel<T, D, false, kVarlen>,
           (p.seq + kBlock - 1) / kBlock, p.batch * p.heads, p);
}

template <typename T, int D, bool kVarlen>
void emulate_backward(const Params& p) {
  constexpr int BQ = dkdv_block_q<D>();
  static_assert(dkdv_smem_bytes<T, D, BQ>() <= static_cast<int>(sizeof(smem_raw)));
  static_assert(dq_smem_bytes<T, D>() <= static_cast<int>(sizeof(smem_raw)));
  const int64_t rows = (kVarlen ? p.total : p.batch * p.seq) * p.heads;
  blockDim.x = 256;
  for (int64_t i = 0; i < rows; ++i) {  // no collectives: one host thread suffices
    blockIdx.x = static_cast<unsigned>(i / 256);
    threadIdx.x = static_cast<unsigned>(i % 256);
    delta_kernel<T, D, kVarlen>(p);
  }
  run_grid(p.full ? dkdv_kernel<T, D, BQ, true, kVarlen> : dkdv_kernel<T, D, BQ, false, kVarlen>,
           (p.seq + kBlock - 1) / kBlock, p.batch * p.kv_heads, p);
  run_grid(p.full ? dq_kernel<T, D, true, kVarlen> : dq_kernel<T, D, false, kVarlen>,
           (p.seq + kBlock - 1) / kBlock, p.batch * p.heads, p);
}

template <typename T, int D>
void emulate(const Params& p) {
  if (p.cu_seqlens != nullptr) {
    emulate_forward<T, D, true>(p);
    emulate_backward<T, D, true>(p);
  } else {
    emulate_forward<T, D, false>(p);
    emulate_backward<T, D, false>(p);
  }
}

// |got - want| <= tol * (|want| + max |want|) over columns [col0, col0 + width)
// of a [rows, stride] tensor; every other column must still be NaN.
void expect_close(const std::vector<double>& got, const std::vector<double>& want, int64_t stride,
                  int64_t col0, int64_t width, int64_t owned, double tol, const std::string& what) {
  double scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const int64_t c = static_cast<int64_t>(i) % stride;
    if (c >= col0 && c < col0 + width) scale = std::max(scale, std::fabs(want[i]));
  }
  for (size_t i = 0; i < want.size(); ++i) {
    const int64_t c = static_cast<int64_t>(i) % stride;
    if (c >= owned) {
      ASSERT_TRUE(std::isnan(got[i])) << what << ": stride gap element " << i << " was written";
      continue;
    }
    if (c < col0 || c >= col0 + width) continue;
    const double bound = tol * (std::fabs(want[i]) + scale) + 1e-30;
    ASSERT_LE(std::fabs(got[i] - want[i]), bound)
        << what << " element " << i << ": got " << got[i] << " want " << want[i];
  }
}

// NH query heads over KV kv heads, packed [rows, (NH + 2 KV) D + pad]: q at
// column 0, k at C = NH * D, v at C + KV * D. The batch layout (cu empty):
// rows = B * seq; the varlen one: cu = cu_seqlens of B sequences, seq =
// max_seqlen, rows = cu[B].
// mask: causal (what the tests below default to) or full.
template <typename T, typename H>
void check_layout(int64_t B, int64_t NH, int64_t KV, int64_t seq, const std::vector<int32_t>& cu,
                  int64_t pad, int D, uint32_t seed, AttentionMask mask) {
  constexpr DType dtype = std::is_same_v<H, BFloat16> ? DType::kBF16 : DType::kF16;
  std::string lens;
  for (size_t i = 0; i + 1 < cu.size(); ++i) {
    lens += (i ? "," : " varlen {") + std::to_string(cu[i + 1] - cu[i]);
  }
  const std::string what = std::string(dtype_name(dtype)) + " B=" + std::to_string(B) +
                           " H=" + std::to_string(NH) + " KV=" + std::to_string(KV) +
                           " T=" + std::to_string(seq) + " D=" + std::to_string(D) +
                           " pad=" + std::to_string(pad) + (cu.empty() ? "" : lens + "}") +
                           (mask == AttentionMask::kFull ? " full" : " causal") +
                           (g_defer_copies ? " deferred copies" : " eager copies");
  SCOPED_TRACE(what);
  const int64_t C = NH * D, CKV = KV * D, W = C + 2 * CKV, qs = W + pad, os = C + pad;
  const int64_t n_rows = cu.empty() ? B * seq : cu.back();
  const int64_t qn = n_rows * qs, on = n_rows * os;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> wide(-2, 2), unit(-1, 1);
  const H nan{0xFFFF};
  std::vector<H> qkv(qn), d_o(on), o(on, nan), dqkv(qn, nan);
  std::vector<double> qkv_d(qn), do_d(on);
  for (int64_t i = 0; i < qn; ++i) {
    qkv[i] = from_float<H>(wide(rng));
    qkv_d[i] = to_float(qkv[i]);
  }
  for (int64_t i = 0; i < on; ++i) {
    d_o[i] = from_float<H>(unit(rng));
    do_d[i] = to_float(d_o[i]);
  }
  const int64_t rows = n_rows * NH;
  std::vector<float> lse(rows, NAN), delta(rows, NAN), lse_ref(rows);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  std::vector<double> o_ref(on), dqkv_ref(qn);
  const double *q_d = qkv_d.data(), *k_d = q_d + C, *v_d = k_d + CKV;
  double *dq_r = dqkv_ref.data(), *dk_r = dq_r + C, *dv_r = dk_r + CKV;
  if (cu.empty()) {
    ASSERT_TRUE(attention_forward_cpu(o_ref.data(), lse_ref.data(), q_d, k_d, v_d, B, NH, KV, seq,
                                      D, qs, os, DType::kF64, scale, mask)
                    .ok());
    ASSERT_TRUE(attention_backward_cpu(dq_r, dk_r, dv_r, do_d.data(), q_d, k_d, v_d, nullptr,
                                       nullptr, B, NH, KV, seq, D, qs, os, DType::kF64, scale,
                                       mask)
                    .ok());
  } else {
    ASSERT_TRUE(attention_varlen_forward_cpu(o_ref.data(), lse_ref.data(), q_d, k_d, v_d,
                                             cu.data(), B, n_rows, NH, KV, D, qs, os,
                                             DType::kF64, scale, mask)
                    .ok());
    ASSERT_TRUE(attention_varlen_backward_cpu(dq_r, dk_r, dv_r, do_d.data(), q_d, k_d, v_d,
                                              nullptr, nullptr, cu.data(), B, n_rows, NH, KV, D,
                                              qs, os, DType::kF64, scale, mask)
                    .ok());
  }
  Params p{};
  p.q = qkv.data();
  p.k = qkv.data() + C;
  p.v = qkv.data() + C + CKV;
  p.out = o.data();
  p.o = o.data();
  p.d_o = d_o.data();
  p.dq = dqkv.data();
  p.dk = dqkv.data() + C;
  p.dv = dqkv.data() + C + CKV;
  p.lse_out = lse.data();
  p.lse = lse.data();
  p.delta = delta.data();
  p.qkv_stride = qs;
  p.o_stride = os;
  p.batch = B;
  p.seq = static_cast<int>(seq);
  p.heads = static_cast<int>(NH);
  p.kv_heads = static_cast<int>(KV);
  p.group = static_cast<int>(NH / KV);
  p.scale = scale;
  p.scale_log2 = scale * kLog2e;
  p.full = mask == AttentionMask::kFull ? 1 : 0;
  p.cu_seqlens = cu.empty() ? nullptr : cu.data();
  p.total = n_rows;
  if (D == 64) {
    emulate<T, 64>(p);
  } else if (D == 96) {
    emulate<T, 96>(p);
  } else {
    emulate<T, 128>(p);
  }
  auto doubles = [](const std::vector<H>& v) {
    std::vector<double> d(v.size());
    for (size_t i = 0; i < v.size(); ++i) d[i] = to_float(v[i]);
    return d;
  };
  // The CUDA test's tolerances (attention_test.cc).
  const double tol_o = dtype == DType::kBF16 ? 1e-2 : 2e-3;
  const double tol_g = dtype == DType::kBF16 ? 2e-2 : 4e-3;
  expect_close(doubles(o), o_ref, os, 0, C, C, tol_o, what + " o");
  for (int64_t i = 0; i < rows; ++i) {
    ASSERT_NEAR(lse[i], lse_ref[i], 1e-4 * (1 + std::fabs(lse_ref[i]))) << what << " lse " << i;
  }
  const std::vector<double> grads = doubles(dqkv);
  expect_close(grads, dqkv_ref, qs, 0, C, W, tol_g, what + " dq");
  expect_close(grads, dqkv_ref, qs, C, CKV, W, tol_g, what + " dk");
  expect_close(grads, dqkv_ref, qs, C + CKV, CKV, W, tol_g, what + " dv");
}

// The batch layout: B sequences of seq positions.
template <typename T, typename H>
void check(int64_t B, int64_t NH, int64_t KV, int64_t seq, int64_t pad, int D, uint32_t seed,
           AttentionMask mask = AttentionMask::kCausal) {
  check_layout<T, H>(B, NH, KV, seq, {}, pad, D, seed, mask);
}

// The varlen layout: sequences of `lens` positions, max_seqlen their longest.
template <typename T, typename H>
void check_varlen(const std::vector<int32_t>& lens, int64_t NH, int64_t KV, int64_t pad, int D,
                  uint32_t seed, AttentionMask mask) {
  std::vector<int32_t> cu(lens.size() + 1, 0);
  for (size_t i = 0; i < lens.size(); ++i) cu[i + 1] = cu[i] + lens[i];
  const int32_t max_seqlen = *std::max_element(lens.begin(), lens.end());
  check_layout<T, H>(static_cast<int64_t>(lens.size()), NH, KV, max_seqlen, cu, pad, D, seed,
                     mask);
}

TEST(AttentionEmulationTest, KernelsMatchFloat64Reference) {
  for (bool defer : {false, true}) {
    g_defer_copies = defer;
    check<__nv_bfloat16, BFloat16>(1, 1, 1, 1, 0, 64, 1);
    check<__nv_bfloat16, BFloat16>(2, 3, 3, 17, 0, 64, 2);
    check<__half, Half>(1, 2, 2, 129, 8, 64, 3);
    check<__nv_bfloat16, BFloat16>(1, 1, 1, 100, 0, 128, 4);
    check<__half, Half>(1, 2, 2, 65, 8, 128, 5);
    check<__nv_bfloat16, BFloat16>(1, 1, 1, 128, 0, 64, 6);  // whole tiles only
    check<__half, Half>(1, 1, 1, 96, 0, 128, 7);             // whole 32-row query blocks
  }
  g_defer_copies = false;
}

// Grouped-query heads: K, V (and dK, dV) of kv head h / group, dK and dV summed
// over the group inside one CTA; several key blocks so the dK/dV pipeline runs
// across the boundary between two query heads of the group.
TEST(AttentionEmulationTest, GroupedQueryKernelsMatchFloat64Reference) {
  for (bool defer : {false, true}) {
    g_defer_copies = defer;
    check<__nv_bfloat16, BFloat16>(1, 4, 2, 81, 0, 64, 11);   // group 2
    check<__half, Half>(2, 3, 1, 70, 8, 64, 12);              // multi-query, group 3
    check<__nv_bfloat16, BFloat16>(1, 4, 1, 67, 8, 128, 13);  // group 4, BQ 32
    check<__half, Half>(1, 6, 3, 33, 0, 128, 14);             // one key block
  }
  g_defer_copies = false;
}

// The full (non-causal) mask: every query block visits every key block and the
// last key block masks only keys at or past seq; the dK/dV kernel visits every
// query block. Tails inside the first block (17, 33), across blocks (81, 129,
// 100), whole blocks (128), one row; grouped heads (the dK/dV pipeline crossing
// query heads from query block 0 each time).
TEST(AttentionEmulationTest, FullMaskKernelsMatchFloat64Reference) {
  constexpr AttentionMask kFull = AttentionMask::kFull;
  for (bool defer : {false, true}) {
    g_defer_copies = defer;
    check<__nv_bfloat16, BFloat16>(1, 1, 1, 1, 0, 64, 21, kFull);
    check<__nv_bfloat16, BFloat16>(2, 2, 2, 17, 0, 64, 22, kFull);
    check<__half, Half>(1, 2, 2, 129, 8, 64, 23, kFull);
    check<__nv_bfloat16, BFloat16>(1, 1, 1, 128, 0, 64, 24, kFull);
    check<__half, Half>(1, 4, 2, 81, 8, 128, 25, kFull);
    check<__nv_bfloat16, BFloat16>(1, 3, 1, 100, 0, 128, 26, kFull);
  }
  g_defer_copies = false;
}

// head_dim 96 (six k16 steps, a 104-element shared row pitch, 32-query dK/dV
// steps), both masks, multi-head and grouped.
TEST(AttentionEmulationTest, HeadDim96KernelsMatchFloat64Reference) {
  for (bool defer : {false, true}) {
    g_defer_copies = defer;
    for (AttentionMask mask : {AttentionMask::kCausal, AttentionMask::kFull}) {
      check<__nv_bfloat16, BFloat16>(1, 1, 1, 1, 0, 96, 31, mask);
      check<__half, Half>(2, 2, 2, 33, 8, 96, 32, mask);
      check<__nv_bfloat16, BFloat16>(1, 4, 2, 129, 0, 96, 33, mask);
      check<__half, Half>(1, 3, 1, 64, 8, 96, 34, mask);
    }
  }
  g_defer_copies = false;
}

// The varlen layout (the kernels' kVarlen): each CTA takes its sequence's
// rows from cu_seqlens, CTAs past their sequence's end return at once, lse
// and delta are [heads, total]. Sequences of 5 (inside one block), 0, 70
// (across two) and 33 tokens, max_seqlen 70; grouped heads, padded rows; the
// causal mask with eager copies, the full one with deferred copies (kept to
// two runs: this test is the suite's slowest).
TEST(AttentionEmulationTest, VarlenKernelsMatchFloat64Reference) {
  check_varlen<__nv_bfloat16, BFloat16>({5, 0, 70, 33}, 2, 1, 8, 64, 41, AttentionMask::kCausal);
  g_defer_copies = true;
  check_varlen<__nv_bfloat16, BFloat16>({5, 0, 70, 33}, 2, 1, 8, 64, 42, AttentionMask::kFull);
  g_defer_copies = false;
}

}  // namespace
}  // namespace colossal::kernels::attention
