// CUDA rotary embedding + q/k/v packing. Memory-bound: every element is read
// once and written once, so the design is about bytes and requests in flight.
//
// * One thread owns N consecutive pairs (i0 .. i0 + N - 1 and their partners at
//   + D/2) of up to kHeadsPerThread consecutive heads of one row: it issues all
//   2 * kHeadsPerThread loads (16-byte packs when aligned) before any math, then
//   takes the N sincosf of its row's angles once and applies them to every head
//   it owns. The v heads are the last heads of the packed row and are copied by
//   the same threads, so one launch writes the whole packed buffer (forward) or
//   all of dq, dk, dv (backward).
// * Angles: a = __fmul_rn(float(t), inv_freq[i]) (the CPU's float32 product,
//   never contracted), sincosf (the accurate CUDA math-library one, <= 2 ulp
//   over the whole range; its slow path handles |a| > 105615), products in
//   float32 with FMA, one rounding on store. The backward negates sin.
// * 16-byte packs when D/2 is a multiple of 16 / sizeof(T) and every pointer
//   is 16-byte aligned (then every head and half-head offset is too); otherwise
//   the same kernel with one-element packs.
// Llama-3.2-1B (B 8, T 2048, 32 q heads, 8 kv heads, D 64) moves 201 MB in
// bfloat16 per call (rope_bench reports GB/s).
#include <cstdint>

#include "kernels/common/cuda_utils.cuh"
#include "kernels/rope/rope.h"
#include "kernels/rope/rope_args.h"

namespace colossal::kernels::rope {
namespace {

using cuda::from_math;
using cuda::to_math;
using internal::Shape;

constexpr int kThreads = 256;
constexpr int kHeadsPerThread = 4;

// N consecutive elements; one 16-byte access when N * sizeof(T) == 16.
template <typename T, int N>
struct alignas(sizeof(T) * N == 16 ? 16 : alignof(T)) Vec {
  T v[N];
};

template <typename T>
struct Buffers {
  T* packed;             // qkv (forward: written) or dqkv (backward: read)
  T* q;                  // q, k, v (forward: read) or dq, dk, dv (backward: written)
  T* k;
  T* v;
};

struct Dims {
  int64_t rows, seq;
  const int32_t* positions;  // or null: row % seq
  int q_heads, kv_heads, head_dim;
  int half_packs;  // (head_dim / 2) / N
  int groups;      // ceil(packed heads / kHeadsPerThread)
};

template <typename T, int N, bool kToPacked>
__global__ void __launch_bounds__(kThreads) rope_pack_kernel(Buffers<T> b, const float* __restrict__ inv_freq, Dims d) {
  const int64_t u = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const int per_row = d.groups * d.half_packs;
  const int64_t row = u / per_row;
  if (row >= d.rows) return;
  const int within = static_cast<int>(u - row * per_row);
  const int group = within / d.half_packs;
  const int i0 = (within - group * d.half_packs) * N;
  const int D = d.head_dim, half = D / 2;
  const int rotated = d.q_heads + d.kv_heads, R = rotated + d.kv_heads;
  const int h0 = group * kHeadsPerThread;

  Vec<T, N> lo[kHeadsPerThread], hi[kHeadsPerThread];
  T* dst[kHeadsPerThread];
#pragma unroll
  for (int j = 0; j < kHeadsPerThread; ++j) {
    const int h = h0 + j;
    if (h < R) {
      T* c;
      if (h < d.q_heads) {
        c = b.q + (row * d.q_heads + h) * D;
      } else if (h < rotated) {
        c = b.k + (row * d.kv_heads + (h - d.q_heads)) * D;
      } else {
        c = b.v + (row * d.kv_heads + (h - rotated)) * D;
      }
      T* p = b.packed + (row * R + h) * D;
      const T* src = kToPacked ? c : p;
      dst[j] = kToPacked ? p : c;
      lo[j] = *reinterpret_cast<const Vec<T, N>*>(src + i0);
      hi[j] = *reinterpret_cast<const Vec<T, N>*>(src + i0 + half);
    }
  }

  float cs[N], sn[N];
  if (h0 < rotated) {
    const float t = static_cast<float>(d.positions != nullptr ? int64_t{__ldg(d.positions + row)} : row % d.seq);
#pragma unroll
    for (int k = 0; k < N; ++k) {
      sincosf(__fmul_rn(t, __ldg(inv_freq + i0 + k)), &sn[k], &cs[k]);
      if (!kToPacked) sn[k] = -sn[k];
    }
  }

#pragma unroll
  for (int j = 0; j < kHeadsPerThread; ++j) {
    const int h = h0 + j;
    if (h >= R) break;
    if (h < rotated) {
      Vec<T, N> a, z;
#pragma unroll
      for (int k = 0; k < N; ++k) {
        const float l = to_math(lo[j].v[k]), r = to_math(hi[j].v[k]);
        a.v[k] = from_math<T>(fmaf(l, cs[k], -r * sn[k]));
        z.v[k] = from_math<T>(fmaf(r, cs[k], l * sn[k]));
      }
      lo[j] = a;
      hi[j] = z;
    }
    *reinterpret_cast<Vec<T, N>*>(dst[j] + i0) = lo[j];
    *reinterpret_cast<Vec<T, N>*>(dst[j] + i0 + half) = hi[j];
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <typename T, int N, bool kToPacked>
KernelStatus launch(const Buffers<T>& b, const float* inv_freq, const Shape& s, cudaStream_t stream) {
  Dims d;
  d.rows = s.rows();
  d.seq = s.seq;
  d.positions = s.positions;
  d.q_heads = static_cast<int>(s.q_heads);
  d.kv_heads = static_cast<int>(s.kv_heads);
  d.head_dim = static_cast<int>(s.head_dim);
  d.half_packs = static_cast<int>(s.head_dim / 2 / N);
  d.groups = static_cast<int>((s.packed_heads() + kHeadsPerThread - 1) / kHeadsPerThread);
  const int64_t units = d.rows * d.groups * d.half_packs;
  const int64_t blocks = (units + kThreads - 1) / kThreads;
  if (blocks > 0x7fffffff) return KernelStatus::invalid_argument("rope_pack: too many rows");
  rope_pack_kernel<T, N, kToPacked><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(b, inv_freq, d);
  return cuda::last_launch_status();
}

template <bool kToPacked>
KernelStatus rope_pack(void* packed, void* q, void* k, void* v, const float* inv_freq, const Shape& s,
                       DType dtype, cudaStream_t stream) {
  KernelStatus st = internal::check_pack_args(s, packed, q, k, v, inv_freq);
  if (!st.ok()) return st;
  // Element offsets inside a row are ints in the kernel.
  if (s.packed_heads() * s.head_dim > 0x7fffffff) {
    return KernelStatus::invalid_argument("rope_pack: (q_heads + 2 * kv_heads) * head_dim too large");
  }
  return cuda::dispatch_float_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int kVec = 16 / sizeof(T);
    const Buffers<T> b{static_cast<T*>(packed), static_cast<T*>(q), static_cast<T*>(k), static_cast<T*>(v)};
    if ((s.head_dim / 2) % kVec == 0 && aligned16(packed) && aligned16(q) && aligned16(k) && aligned16(v)) {
      return launch<T, kVec, kToPacked>(b, inv_freq, s, stream);
    }
    return launch<T, 1, kToPacked>(b, inv_freq, s, stream);
  });
}

}  // namespace

KernelStatus rope_pack_forward_cuda(void* qkv, const void* q, const void* k, const void* v,
                                    const float* inv_freq, const int32_t* positions, int64_t batch,
                                    int64_t seq, int64_t q_heads, int64_t kv_heads, int64_t head_dim,
                                    DType dtype, cudaStream_t stream) {
  // q, k and v are only read (kToPacked).
  return rope_pack<true>(qkv, const_cast<void*>(q), const_cast<void*>(k), const_cast<void*>(v), inv_freq,
                         Shape{batch, seq, q_heads, kv_heads, head_dim, positions}, dtype, stream);
}

KernelStatus rope_pack_backward_cuda(void* dq, void* dk, void* dv, const void* dqkv,
                                     const float* inv_freq, const int32_t* positions, int64_t batch,
                                     int64_t seq, int64_t q_heads, int64_t kv_heads, int64_t head_dim,
                                     DType dtype, cudaStream_t stream) {
  // dqkv is only read (!kToPacked).
  return rope_pack<false>(const_cast<void*>(dqkv), dq, dk, dv, inv_freq,
                          Shape{batch, seq, q_heads, kv_heads, head_dim, positions}, dtype, stream);
}

}  // namespace colossal::kernels::rope
