// CUDA multi-tensor L2 norm and scale. Memory bound: one read (norm) or one read
// and one write (scale) of every element.
//
// Design. As in kernels/adam, work is cut into 16384-element chunks that never
// span two tensors, one 256-thread block per chunk; a block finds its tensor by
// binary search over the launch's descriptor table (chunk_begin increasing), held
// in kernel parameters (__grid_constant__, up to 96 tensors) or in device scratch
// filled by small upload kernels (stream ordered, no host synchronisation). Each
// thread keeps kUnroll 16-byte vector loads in flight; the elements before a
// buffer's 16-byte boundary and after the last whole vector go one by one.
//
// l2_norm is a deterministic two-stage reduction. Stage 1: each block sums its
// chunk's squares in float32 (4 interleaved accumulators per thread, then a fixed
// shuffle tree and the warp sums in order) and writes one float per chunk to
// scratch; a block that saw an inf/NaN sets found_inf (a plain store of 1.0f, the
// same value from every writer). Stage 2: one block per tensor adds that tensor's
// chunk sums in double in a fixed order; the last block to finish (an integer
// ticket, zeroed by stage 1) adds the tensor sums in order and writes the global
// norm and the clipping coefficient. No float atomics: the same inputs always give
// the same bits.
//
// scale multiplies in float32 with __fmul_rn (never contracted) and rounds once to
// the output dtype, exactly as the CPU path does.
//
// accumulate keeps the CPU's order instead, so that its norm has the CPU's bits
// (gemini sums a host chunk's gradients on either side): one block per
// 32768-element piece adds a tile of it with coalesced loads and stores,
// leaving the results' squares (double) in shared memory, and 16 of its
// threads, one per lane, add the tile's squares to their lane in element
// order; a piece's lanes are then added 0 to 15, and one thread per tensor
// adds the piece sums and the running total in order. A square of a float32
// value is exact in double, so no product rounds.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/common/cuda_utils.cuh"
#include "kernels/multi_tensor/multi_tensor.h"
#include "kernels/multi_tensor/multi_tensor_internal.h"

namespace colossal::kernels::multi_tensor {
namespace {

using cuda::from_math;
using cuda::to_math;
using internal::kCudaChunk;
using internal::kParamDescs;
using internal::NormDesc;
using internal::ScaleDesc;

constexpr int kThreads = 256;
constexpr int kUnroll = 4;
constexpr int kFinishThreads = 512;
constexpr int64_t kMaxChunks = 0x7fffffff;  // gridDim.x limit; chunk_begin is int32

template <typename Desc>
struct ParamTable {
  Desc d[kParamDescs];
  int32_t count;
  int32_t total_chunks;
};
static_assert(sizeof(ParamTable<NormDesc>) + 64 <= 4096, "classic 4 KiB parameter limit");
static_assert(sizeof(ParamTable<ScaleDesc>) + 64 <= 4096, "classic 4 KiB parameter limit");

template <typename Desc>
struct DeviceTable {
  const Desc* d;
  int32_t count;
  int32_t total_chunks;
};

template <typename Desc>
__device__ __forceinline__ const Desc* descs_of(const ParamTable<Desc>& t) {
  return t.d;
}
template <typename Desc>
__device__ __forceinline__ const Desc* descs_of(const DeviceTable<Desc>& t) {
  return t.d;
}

// Index of the last descriptor whose chunk_begin <= chunk: the tensor owning the
// chunk (an empty tensor shares its chunk_begin with the next one and is skipped).
template <typename Desc>
__device__ __forceinline__ int find_desc(const Desc* d, int count, int chunk) {
  int lo = 0, hi = count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (d[mid].chunk_begin <= chunk) lo = mid; else hi = mid - 1;
  }
  return lo;
}

template <typename T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

__device__ __forceinline__ float warp_sum(float s) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) s += __shfl_down_sync(0xffffffffu, s, off);
  return s;
}
__device__ __forceinline__ double warp_sum(double s) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) s += __shfl_down_sync(0xffffffffu, s, off);
  return s;
}

// Sum over the block in a fixed order; the result is valid in thread 0. Every
// thread must call it; it may be called again (it ends with a barrier).
template <typename S, int kBlock>
__device__ S block_sum(S s) {
  __shared__ S warp_sums[kBlock / 32];
  s = warp_sum(s);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) warp_sums[warp] = s;
  __syncthreads();
  S total = 0;
  if (threadIdx.x == 0) {
    for (int w = 0; w < kBlock / 32; ++w) total += warp_sums[w];
  }
  __syncthreads();
  return total;
}

// ---- l2_norm ----

template <typename T, typename Table>
__global__ void __launch_bounds__(kThreads)
    norm_partial_kernel(const __grid_constant__ Table table, float* __restrict__ partials,
                        float* found_inf, unsigned* counter) {
  if (blockIdx.x == 0 && threadIdx.x == 0) *counter = 0u;  // stage 2's ticket
  const int chunk = static_cast<int>(blockIdx.x);
  if (chunk >= table.total_chunks) return;  // only the lone block of an all-empty list
  const NormDesc* descs = descs_of(table);
  const NormDesc d = descs[find_desc(descs, table.count, chunk)];
  const T* x = static_cast<const T*>(d.data);
  const int64_t begin = static_cast<int64_t>(chunk - d.chunk_begin) * kCudaChunk;
  const int64_t end = begin + kCudaChunk < d.n ? begin + kCudaChunk : d.n;
  const int tid = static_cast<int>(threadIdx.x);
  constexpr int kVec = 16 / sizeof(T);

  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  bool bad = false;
  const auto add = [&](float v, int lane) {
    acc[lane & 3] = __fmaf_rn(v, v, acc[lane & 3]);
    bad |= !isfinite(v);
  };
  if (d.head < 0) {
    for (int64_t i = begin + tid; i < end; i += kThreads) add(to_math(x[i]), 0);
  } else {
    const int64_t vec_begin = begin + d.head < end ? begin + d.head : end;
    const int nvec = static_cast<int>((end - vec_begin) / kVec);
    const int64_t vec_end = vec_begin + static_cast<int64_t>(nvec) * kVec;
    if (begin + tid < vec_begin) add(to_math(x[begin + tid]), 0);
    if (vec_end + tid < end) add(to_math(x[vec_end + tid]), 1);
    using V = Vec<T, kVec>;
    const V* xv = reinterpret_cast<const V*>(x + vec_begin);
    for (int base = tid; base < nvec; base += kThreads * kUnroll) {
      V r[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (base + u * kThreads < nvec) r[u] = xv[base + u * kThreads];
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (base + u * kThreads < nvec) {
#pragma unroll
          for (int e = 0; e < kVec; ++e) add(to_math(r[u].v[e]), e);
        }
      }
    }
  }
  const float sum = block_sum<float, kThreads>((acc[0] + acc[1]) + (acc[2] + acc[3]));
  bad = __syncthreads_or(bad);
  if (tid == 0) {
    partials[chunk] = sum;
    if (bad && found_inf != nullptr) *found_inf = 1.0f;
  }
}

template <typename Table>
__global__ void __launch_bounds__(kFinishThreads)
    norm_finish_kernel(const __grid_constant__ Table table, const float* __restrict__ partials,
                       double* tensor_sq, unsigned* counter, float* global_norm,
                       float* per_tensor_norms, float* clip_coef, float max_norm) {
  const NormDesc* descs = descs_of(table);
  const int t = static_cast<int>(blockIdx.x);
  const int first = descs[t].chunk_begin, chunks = descs[t].chunks;
  double s = 0;
  for (int i = static_cast<int>(threadIdx.x); i < chunks; i += kFinishThreads) {
    s += partials[first + i];
  }
  s = block_sum<double, kFinishThreads>(s);
  __shared__ bool last;
  if (threadIdx.x == 0) {
    tensor_sq[t] = s;
    if (per_tensor_norms != nullptr) per_tensor_norms[t] = static_cast<float>(sqrt(s));
    __threadfence();  // publish tensor_sq[t] before taking a ticket
    last = atomicAdd(counter, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  double total = 0;
  for (int i = static_cast<int>(threadIdx.x); i < static_cast<int>(gridDim.x); i += kFinishThreads) {
    total += __ldcg(&tensor_sq[i]);  // from L2: other blocks wrote them
  }
  total = block_sum<double, kFinishThreads>(total);
  if (threadIdx.x == 0) {
    const double norm = sqrt(total);
    *global_norm = static_cast<float>(norm);
    if (clip_coef != nullptr) {
      double coef = static_cast<double>(max_norm) / (norm + internal::kClipEps);
      if (coef > 1.0) coef = 1.0;  // a NaN norm leaves a NaN coefficient, as torch does
      *clip_coef = static_cast<float>(coef);
    }
    *counter = 0u;
  }
}

// ---- scale ----

template <typename In, typename Out>
constexpr int scale_vec() {
  return 16 / static_cast<int>(sizeof(In) > sizeof(Out) ? sizeof(In) : sizeof(Out));
}

template <typename In, typename Out, typename Table>
__global__ void __launch_bounds__(kThreads)
    scale_kernel(const __grid_constant__ Table table, float scale, const float* scale_factor,
                 float* found_inf) {
  constexpr int kVec = scale_vec<In, Out>();
  const float s = scale_factor != nullptr ? __fmul_rn(scale, *scale_factor) : scale;
  const ScaleDesc* descs = descs_of(table);
  const int chunk = static_cast<int>(blockIdx.x);
  const ScaleDesc d = descs[find_desc(descs, table.count, chunk)];
  const In* in = static_cast<const In*>(d.in);
  Out* out = static_cast<Out*>(d.out);  // may alias `in` (same element size): no __restrict__
  const int64_t begin = static_cast<int64_t>(chunk - d.chunk_begin) * kCudaChunk;
  const int64_t end = begin + kCudaChunk < d.n ? begin + kCudaChunk : d.n;
  const int tid = static_cast<int>(threadIdx.x);

  bool bad = false;
  const auto one = [&](In v) -> Out {
    const float x = to_math(v);
    const Out o = from_math<Out>(__fmul_rn(x, s));
    bad |= !isfinite(x) || !isfinite(static_cast<float>(to_math(o)));
    return o;
  };
  if (d.head < 0) {
    for (int64_t i = begin + tid; i < end; i += kThreads) out[i] = one(in[i]);
  } else {
    const int64_t vec_begin = begin + d.head < end ? begin + d.head : end;
    const int nvec = static_cast<int>((end - vec_begin) / kVec);
    const int64_t vec_end = vec_begin + static_cast<int64_t>(nvec) * kVec;
    if (begin + tid < vec_begin) out[begin + tid] = one(in[begin + tid]);
    if (vec_end + tid < end) out[vec_end + tid] = one(in[vec_end + tid]);
    using VI = Vec<In, kVec>;
    using VO = Vec<Out, kVec>;
    const VI* iv = reinterpret_cast<const VI*>(in + vec_begin);
    VO* ov = reinterpret_cast<VO*>(out + vec_begin);
    for (int base = tid; base < nvec; base += kThreads * kUnroll) {
      VI r[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (base + u * kThreads < nvec) r[u] = iv[base + u * kThreads];
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (base + u * kThreads < nvec) {
          VO w;
#pragma unroll
          for (int e = 0; e < kVec; ++e) w.v[e] = one(r[u].v[e]);
          ov[base + u * kThreads] = w;
        }
      }
    }
  }
  if (__syncthreads_or(bad) && tid == 0 && found_inf != nullptr) *found_inf = 1.0f;
}

// ---- tables ----

template <typename Desc>
__global__ void upload_kernel(const __grid_constant__ ParamTable<Desc> batch, Desc* dst) {
  const int i = static_cast<int>(threadIdx.x);
  if (i < batch.count) dst[i] = batch.d[i];
}

// Copies descs into scratch at `dst` in batches of kParamDescs (stream ordered).
template <typename Desc>
KernelStatus upload(const std::vector<Desc>& descs, Desc* dst, cudaStream_t stream) {
  for (size_t first = 0; first < descs.size(); first += kParamDescs) {
    ParamTable<Desc> batch;
    batch.count = static_cast<int32_t>(std::min<size_t>(kParamDescs, descs.size() - first));
    batch.total_chunks = 0;
    std::copy(descs.begin() + first, descs.begin() + first + batch.count, batch.d);
    upload_kernel<Desc><<<1, kParamDescs, 0, stream>>>(batch, dst + first);
    const KernelStatus s = cuda::last_launch_status();
    if (!s.ok()) return s;
  }
  return KernelStatus();
}

// Fills a parameter table with descs[first, first + count), chunk_begin from 0.
template <typename Desc>
int64_t fill(const std::vector<Desc>& descs, size_t first, size_t count, ParamTable<Desc>* t) {
  int64_t chunks = 0;
  t->count = static_cast<int32_t>(count);
  for (size_t i = 0; i < count; ++i) {
    t->d[i] = descs[first + i];
    t->d[i].chunk_begin = static_cast<int32_t>(std::min(chunks, kMaxChunks));
    chunks += internal::chunks_of(t->d[i].n);
  }
  t->total_chunks = static_cast<int32_t>(std::min(chunks, kMaxChunks));
  return chunks;
}

KernelStatus check_scratch(void* scratch, int64_t scratch_bytes, int64_t needed) {
  if (scratch == nullptr) return KernelStatus::invalid_argument("multi_tensor: null scratch");
  if (scratch_bytes < needed) {
    return KernelStatus::invalid_argument("multi_tensor: scratch smaller than *_scratch_bytes");
  }
  if (!internal::aligned_to(scratch, 16)) {
    return KernelStatus::invalid_argument("multi_tensor: scratch is not 16-byte aligned");
  }
  return KernelStatus();
}

constexpr int kAccThreads = 256;
constexpr int kAccTile = 4096;  // elements a block sums and squares before its lanes add them

// acc += part over piece blockIdx.x of one tensor, and the piece's sum of the
// results' squares into piece_sums[blockIdx.x]. The block adds a tile of
// 4096 elements with coalesced (16-byte, when both buffers allow) loads and
// stores, leaving each result's square in shared memory; then 16 threads,
// one per lane, add the tile's squares to their lane in element order (an
// element past the end leaves +0.0, which adds nothing to a sum of squares).
template <typename T, bool kVector>
__global__ void __launch_bounds__(kAccThreads)
    accumulate_piece_kernel(T* __restrict__ acc, const T* __restrict__ part, int64_t n,
                            double* __restrict__ piece_sums) {
  constexpr int kLanes = internal::kCpuLanes;
  constexpr int kVec = kVector ? 16 / sizeof(T) : 1;
  constexpr int kPerThread = kAccTile / kAccThreads;  // 16 elements
  __shared__ double squares[kAccTile];
  __shared__ double lanes[kLanes];
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * internal::kCpuPiece;
  const int64_t end = min(n, begin + internal::kCpuPiece);
  double lane_sum = 0.0;  // threads 0..15: lane threadIdx.x
  for (int64_t tile = begin; tile < end; tile += kAccTile) {
#pragma unroll
    for (int j = 0; j < kPerThread / kVec; ++j) {
      const int at = (j * kAccThreads + threadIdx.x) * kVec;  // first element in the tile
      const int64_t k = tile + at;
      if (kVector && k + kVec <= end) {
        Vec<T, kVec> x = *reinterpret_cast<const Vec<T, kVec>*>(acc + k);
        const Vec<T, kVec> y = *reinterpret_cast<const Vec<T, kVec>*>(part + k);
#pragma unroll
        for (int e = 0; e < kVec; ++e) {
          x.v[e] = from_math<T>(__fadd_rn(static_cast<float>(to_math(x.v[e])),
                                          static_cast<float>(to_math(y.v[e]))));
          const double d = static_cast<double>(to_math(x.v[e]));
          squares[at + e] = __dmul_rn(d, d);
        }
        *reinterpret_cast<Vec<T, kVec>*>(acc + k) = x;
      } else {
#pragma unroll
        for (int e = 0; e < kVec; ++e) {
          double sq = 0.0;
          if (k + e < end) {
            const T r = from_math<T>(__fadd_rn(static_cast<float>(to_math(acc[k + e])),
                                               static_cast<float>(to_math(part[k + e]))));
            acc[k + e] = r;
            const double d = static_cast<double>(to_math(r));
            sq = __dmul_rn(d, d);
          }
          squares[at + e] = sq;
        }
      }
    }
    __syncthreads();
    if (threadIdx.x < kLanes) {
#pragma unroll 8
      for (int r = 0; r < kAccTile / kLanes; ++r) {
        lane_sum = __dadd_rn(lane_sum, squares[r * kLanes + threadIdx.x]);
      }
    }
    __syncthreads();
  }
  if (threadIdx.x < kLanes) lanes[threadIdx.x] = lane_sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    double sum = 0.0;
    for (int l = 0; l < kLanes; ++l) sum = __dadd_rn(sum, lanes[l]);
    piece_sums[blockIdx.x] = sum;
  }
}

// One tensor's piece sums added in order, then into the running total (the
// first tensor starts it); the last tensor writes the norm and the flag.
__global__ void accumulate_finish_kernel(const double* __restrict__ piece_sums, int64_t pieces,
                                         double* total, bool first, float* global_norm,
                                         float* found_inf) {
  double t = 0.0;
  for (int64_t p = 0; p < pieces; ++p) t = __dadd_rn(t, piece_sums[p]);
  const double all = __dadd_rn(first ? 0.0 : *total, t);
  *total = all;
  if (global_norm != nullptr) *global_norm = static_cast<float>(sqrt(all));
  if (found_inf != nullptr && !isfinite(all)) *found_inf = 1.0f;
}

template <typename T>
KernelStatus l2_norm_launch(std::vector<NormDesc>& descs, char* scratch, float* global_norm,
                            float* per_tensor_norms, float* found_inf, float* clip_coef,
                            float max_norm, cudaStream_t stream) {
  int64_t chunks = 0;
  for (NormDesc& d : descs) {
    d.chunk_begin = static_cast<int32_t>(std::min(chunks, kMaxChunks));
    chunks += d.chunks;
  }
  if (chunks > kMaxChunks) return KernelStatus::invalid_argument("l2_norm: too many elements");
  const int64_t count = static_cast<int64_t>(descs.size());
  const internal::NormScratch layout = internal::norm_scratch_layout(count, chunks);
  float* partials = reinterpret_cast<float*>(scratch + layout.partials_at);
  double* tensor_sq = reinterpret_cast<double*>(scratch + layout.tensor_sq_at);
  unsigned* counter = reinterpret_cast<unsigned*>(scratch + layout.counter_at);
  const unsigned grid1 = static_cast<unsigned>(std::max<int64_t>(chunks, 1));
  const unsigned grid2 = static_cast<unsigned>(count);
  if (count <= kParamDescs) {
    ParamTable<NormDesc> table;
    table.count = static_cast<int32_t>(count);
    table.total_chunks = static_cast<int32_t>(chunks);
    std::copy(descs.begin(), descs.end(), table.d);
    norm_partial_kernel<T, ParamTable<NormDesc>>
        <<<grid1, kThreads, 0, stream>>>(table, partials, found_inf, counter);
    KernelStatus s = cuda::last_launch_status();
    if (!s.ok()) return s;
    norm_finish_kernel<ParamTable<NormDesc>><<<grid2, kFinishThreads, 0, stream>>>(
        table, partials, tensor_sq, counter, global_norm, per_tensor_norms, clip_coef, max_norm);
    return cuda::last_launch_status();
  }
  NormDesc* dev = reinterpret_cast<NormDesc*>(scratch + layout.descs_at);
  KernelStatus s = upload(descs, dev, stream);
  if (!s.ok()) return s;
  const DeviceTable<NormDesc> table{dev, static_cast<int32_t>(count), static_cast<int32_t>(chunks)};
  norm_partial_kernel<T, DeviceTable<NormDesc>>
      <<<grid1, kThreads, 0, stream>>>(table, partials, found_inf, counter);
  s = cuda::last_launch_status();
  if (!s.ok()) return s;
  norm_finish_kernel<DeviceTable<NormDesc>><<<grid2, kFinishThreads, 0, stream>>>(
      table, partials, tensor_sq, counter, global_norm, per_tensor_norms, clip_coef, max_norm);
  return cuda::last_launch_status();
}

template <typename In, typename Out>
KernelStatus scale_launch(const std::vector<ScaleDesc>& descs, void* scratch, float scale,
                          const float* scale_factor, float* found_inf, cudaStream_t stream) {
  const size_t count = descs.size();
  if (count <= static_cast<size_t>(kParamDescs) || scratch == nullptr) {
    for (size_t first = 0; first < count; first += kParamDescs) {
      ParamTable<ScaleDesc> table;
      const int64_t chunks = fill(descs, first, std::min<size_t>(kParamDescs, count - first), &table);
      if (chunks > kMaxChunks) return KernelStatus::invalid_argument("scale: too many elements");
      scale_kernel<In, Out, ParamTable<ScaleDesc>><<<static_cast<unsigned>(chunks), kThreads, 0,
                                                      stream>>>(table, scale, scale_factor,
                                                                found_inf);
      const KernelStatus s = cuda::last_launch_status();
      if (!s.ok()) return s;
    }
    return KernelStatus();
  }
  std::vector<ScaleDesc> all = descs;
  int64_t chunks = 0;
  for (ScaleDesc& d : all) {
    d.chunk_begin = static_cast<int32_t>(std::min(chunks, kMaxChunks));
    chunks += internal::chunks_of(d.n);
  }
  if (chunks > kMaxChunks) return KernelStatus::invalid_argument("scale: too many elements");
  ScaleDesc* dev = static_cast<ScaleDesc*>(scratch);
  KernelStatus s = upload(all, dev, stream);
  if (!s.ok()) return s;
  const DeviceTable<ScaleDesc> table{dev, static_cast<int32_t>(count), static_cast<int32_t>(chunks)};
  scale_kernel<In, Out, DeviceTable<ScaleDesc>>
      <<<static_cast<unsigned>(chunks), kThreads, 0, stream>>>(table, scale, scale_factor,
                                                                found_inf);
  return cuda::last_launch_status();
}

}  // namespace

KernelStatus l2_norm_cuda(float* global_norm, float* per_tensor_norms, float* found_inf,
                          float* clip_coef, const TensorRef* tensors, void* scratch,
                          int64_t scratch_bytes, int64_t num_tensors, DType dtype, float max_norm,
                          cudaStream_t stream) {
  KernelStatus s =
      internal::check_norm_args(global_norm, clip_coef, tensors, num_tensors, max_norm);
  if (!s.ok()) return s;
  return cuda::dispatch_float_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int kVec = 16 / sizeof(T);
    std::vector<NormDesc> descs;
    for (int64_t t = 0; t < num_tensors; ++t) {
      const KernelStatus c = internal::check_norm_tensor(tensors[t], sizeof(T));
      if (!c.ok()) return c;
      const int64_t chunks = internal::chunks_of(tensors[t].n);
      if (chunks > kMaxChunks) return KernelStatus::invalid_argument("l2_norm: tensor too large");
      descs.push_back(NormDesc{tensors[t].data, tensors[t].n, 0, static_cast<int32_t>(chunks),
                               internal::vector_head(tensors[t].data, sizeof(T), kVec), 0});
    }
    // An empty list is reduced as one empty tensor, so the outputs are still written.
    if (descs.empty()) descs.push_back(NormDesc{nullptr, 0, 0, 0, -1, 0});
    const KernelStatus c =
        check_scratch(scratch, scratch_bytes, l2_norm_cuda_scratch_bytes(tensors, num_tensors));
    if (!c.ok()) return c;
    return l2_norm_launch<T>(descs, static_cast<char*>(scratch), global_norm,
                             num_tensors > 0 ? per_tensor_norms : nullptr, found_inf, clip_coef,
                             max_norm, stream);
  });
}

KernelStatus accumulate_cuda(float* global_norm, float* found_inf, const AccumulateTensor* tensors,
                             void* scratch, int64_t scratch_bytes, int64_t num_tensors, DType dtype,
                             cudaStream_t stream) {
  KernelStatus s = internal::check_accumulate_args(tensors, num_tensors);
  if (!s.ok()) return s;
  s = check_scratch(scratch, scratch_bytes, accumulate_cuda_scratch_bytes(tensors, num_tensors));
  if (!s.ok()) return s;
  return cuda::dispatch_float_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    for (int64_t t = 0; t < num_tensors; ++t) {
      const KernelStatus c = internal::check_accumulate_tensor(tensors[t], sizeof(T));
      if (!c.ok()) return c;
    }
    const bool norm = global_norm != nullptr || found_inf != nullptr;
    double* piece_sums = static_cast<double*>(scratch);
    int64_t all_pieces = 0;
    for (int64_t t = 0; t < num_tensors; ++t) all_pieces += internal::cpu_pieces_of(tensors[t].n);
    double* total = reinterpret_cast<double*>(static_cast<char*>(scratch) +
                                              internal::accumulate_scratch_layout(all_pieces).total_at);
    int64_t at = 0;  // this tensor's first piece sum
    // With no tensors (or only empty ones) the finish still writes norm 0.
    for (int64_t t = 0; t < std::max<int64_t>(num_tensors, 1); ++t) {
      const int64_t n = t < num_tensors ? tensors[t].n : 0;
      const int64_t pieces = internal::cpu_pieces_of(n);
      if (pieces > 0) {
        if (pieces > kMaxChunks) return KernelStatus::invalid_argument("accumulate: tensor too large");
        T* a = static_cast<T*>(tensors[t].acc);
        const T* b = static_cast<const T*>(tensors[t].part);
        // Pieces start 32768 elements apart, so aligned buffers stay aligned.
        const bool vector = internal::aligned_to(a, 16) && internal::aligned_to(b, 16);
        const unsigned grid = static_cast<unsigned>(pieces);
        if (vector) {
          accumulate_piece_kernel<T, true><<<grid, kAccThreads, 0, stream>>>(a, b, n, piece_sums + at);
        } else {
          accumulate_piece_kernel<T, false><<<grid, kAccThreads, 0, stream>>>(a, b, n, piece_sums + at);
        }
        const KernelStatus l = cuda::last_launch_status();
        if (!l.ok()) return l;
      }
      if (norm) {
        const bool last = t + 1 >= num_tensors;
        accumulate_finish_kernel<<<1, 1, 0, stream>>>(piece_sums + at, pieces, total, t == 0,
                                                      last ? global_norm : nullptr,
                                                      last ? found_inf : nullptr);
        const KernelStatus f = cuda::last_launch_status();
        if (!f.ok()) return f;
      }
      at += pieces;
    }
    return KernelStatus();
  });
}

KernelStatus scale_cuda(float* found_inf, const ScaleTensor* tensors, const float* scale_factor,
                        void* scratch, int64_t scratch_bytes, int64_t num_tensors,
                        DType in_dtype, DType out_dtype, float scale, cudaStream_t stream) {
  KernelStatus s = internal::check_scale_args(tensors, num_tensors);
  if (!s.ok()) return s;
  if (scratch != nullptr) {
    s = check_scratch(scratch, scratch_bytes, scale_cuda_scratch_bytes(num_tensors));
    if (!s.ok()) return s;
  }
  return cuda::dispatch_float_types(in_dtype, [&](auto in_tag) {
    using In = decltype(in_tag);
    return cuda::dispatch_float_types(out_dtype, [&](auto out_tag) {
      using Out = decltype(out_tag);
      constexpr int kVec = scale_vec<In, Out>();
      std::vector<ScaleDesc> descs;
      for (int64_t t = 0; t < num_tensors; ++t) {
        const ScaleTensor& x = tensors[t];
        const KernelStatus c = internal::check_scale_tensor(x, sizeof(In), sizeof(Out));
        if (!c.ok()) return c;
        if (x.n == 0) continue;
        const int32_t hi = internal::vector_head(x.in, sizeof(In), kVec);
        const int32_t ho = internal::vector_head(x.out, sizeof(Out), kVec);
        descs.push_back(ScaleDesc{x.in, x.out, x.n, 0, hi == ho ? hi : -1});
      }
      if (descs.empty()) return KernelStatus();
      return scale_launch<In, Out>(descs, scratch, scale, scale_factor, found_inf, stream);
    });
  });
}

}  // namespace colossal::kernels::multi_tensor
