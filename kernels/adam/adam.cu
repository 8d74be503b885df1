// CUDA Adam: one pass over param/m/v/grad (+ model copy), memory bound.
//
// Design. Work is cut into chunks of kCudaChunk (16384) elements that never span two
// tensors; one 256-thread block does one chunk, so the flat path (one tensor) and
// the multi-tensor path are the same kernel. A block finds its tensor by binary
// search over the launch's descriptor table (chunk_begin is increasing), which
// lives either in kernel parameters (__grid_constant__, up to kParamDescs tensors,
// no copy to local memory) or in caller scratch filled by small upload kernels
// whose parameters carry the table (stream ordered, no host synchronisation and no
// pinned staging buffer). Inside a chunk each thread loads kUnroll vectors of 4
// elements from every buffer before any math (16-byte float32 state, 8/16-byte
// grads and copies), so ~16 loads per thread are in flight; the few elements before
// the buffers' common 16-byte boundary and after the last whole vector are done one
// by one. Tensors whose buffers are misaligned with each other run the scalar loop.
//
// The math uses __fmaf_rn / __fmul_rn / __fdiv_rn / __fsqrt_rn so nvcc cannot
// contract or approximate anything: results equal the CPU path bit for bit.
// found_inf is read by every block first; when set the block returns untouched.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/adam/adam.h"
#include "kernels/adam/adam_math.h"
#include "kernels/adam/split_master.h"
#include "kernels/common/cuda_utils.cuh"

namespace colossal::kernels::adam {
namespace {

using cuda::from_math;
using cuda::to_math;
using internal::AdamConsts;
using internal::AdamDesc;
using internal::kCudaChunk;
using internal::kCudaVec;
using internal::kParamDescs;

constexpr int kThreads = 256;
constexpr int kUnroll = 4;
static_assert(kCudaChunk % (kCudaVec * kThreads) == 0, "chunks are whole block strides");

struct ParamTable {
  AdamDesc d[kParamDescs];
  int32_t count;
};
static_assert(sizeof(ParamTable) + sizeof(AdamConsts) + sizeof(void*) <= 4096,
              "kernel parameters stay within the classic 4 KiB limit");

struct DeviceTable {
  const AdamDesc* d;
  int32_t count;
};

template <typename Table>
__device__ __forceinline__ const AdamDesc* table_descs(const Table& t);
template <>
__device__ __forceinline__ const AdamDesc* table_descs<ParamTable>(const ParamTable& t) {
  return t.d;
}
template <>
__device__ __forceinline__ const AdamDesc* table_descs<DeviceTable>(const DeviceTable& t) {
  return t.d;
}

template <typename T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

__device__ __forceinline__ void adam_element(float& p, float& m, float& v, float g,
                                             const AdamConsts& k) {
  if (k.unscale) g = __fdiv_rn(g, k.grad_scale);
  if (k.l2) g = __fmaf_rn(k.weight_decay, p, g);
  m = __fmaf_rn(k.beta1, m, __fmul_rn(k.one_minus_beta1, g));
  v = __fmaf_rn(k.beta2, v, __fmul_rn(__fmul_rn(k.one_minus_beta2, g), g));
  const float denom = __fmaf_rn(__fsqrt_rn(v), k.inv_sqrt_bc2, k.eps);
  const float update = __fdiv_rn(m, denom);
  if (k.decoupled) p = __fmul_rn(p, k.decay);
  p = __fmaf_rn(k.neg_step_size, update, p);
}

// One block's walk over elements [begin, end) of a chunk: the elements before
// the buffers' common vector boundary (`head`, -1: never aligned, all one by
// one) and after the last whole vector one by one, the vectors kUnroll at a
// time with every buffer's load issued before any math. `Access` is the
// layout of the state: one(i) updates element i, load(j) reads vector j's
// registers (an Access::Regs), update_store(j, r) runs the math on them and
// writes them back.
template <typename Access>
__device__ __forceinline__ void walk_chunk(const Access& a, int64_t begin, int64_t end, int32_t head) {
  const int tid = static_cast<int>(threadIdx.x);
  if (head < 0) {  // buffers never share vector alignment
    for (int64_t i = begin + tid; i < end; i += kThreads) a.one(i);
    return;
  }
  // Chunk starts are multiples of kCudaVec, so begin + head is vector aligned in all buffers.
  const int64_t vec_begin = begin + head < end ? begin + head : end;
  const int nvec = static_cast<int>((end - vec_begin) / kCudaVec);
  const int64_t vec_end = vec_begin + static_cast<int64_t>(nvec) * kCudaVec;
  if (begin + tid < vec_begin) a.one(begin + tid);  // < kCudaVec elements
  if (vec_end + tid < end) a.one(vec_end + tid);    // < kCudaVec elements
  const Access v = a.at(vec_begin);  // vector j of v is elements vec_begin + kCudaVec * j
  for (int base = tid; base < nvec; base += kThreads * kUnroll) {
    typename Access::Regs r[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int j = base + u * kThreads;
      if (j < nvec) r[u] = v.load(j);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int j = base + u * kThreads;
      if (j < nvec) v.update_store(j, r[u]);
    }
  }
}

// Float32 masters (AdamDesc), gradients G, an optional model copy C.
template <typename G, typename C>
struct MasterAccess {
  using FV = Vec<float, kCudaVec>;
  using GV = Vec<G, kCudaVec>;
  using CV = Vec<C, kCudaVec>;
  struct Regs {
    FV p, m, v;
    GV g;
  };
  AdamDesc d;
  AdamConsts k;

  __device__ __forceinline__ void one(int64_t i) const {
    float p = d.param[i], m = d.m[i], v = d.v[i];
    adam_element(p, m, v, to_math(static_cast<const G*>(d.grad)[i]), k);
    d.param[i] = p;
    d.m[i] = m;
    d.v[i] = v;
    if (d.copy != nullptr) static_cast<C*>(d.copy)[i] = from_math<C>(p);
  }
  __device__ __forceinline__ MasterAccess at(int64_t i) const {
    MasterAccess a = *this;
    a.d.param += i;
    a.d.m += i;
    a.d.v += i;
    a.d.grad = static_cast<const G*>(d.grad) + i;
    if (d.copy != nullptr) a.d.copy = static_cast<C*>(d.copy) + i;
    return a;
  }
  __device__ __forceinline__ Regs load(int j) const {
    return Regs{reinterpret_cast<const FV*>(d.param)[j], reinterpret_cast<const FV*>(d.m)[j],
                reinterpret_cast<const FV*>(d.v)[j], reinterpret_cast<const GV*>(d.grad)[j]};
  }
  __device__ __forceinline__ void update_store(int j, Regs& r) const {
#pragma unroll
    for (int e = 0; e < kCudaVec; ++e) adam_element(r.p.v[e], r.m.v[e], r.v.v[e], to_math(r.g.v[e]), k);
    reinterpret_cast<FV*>(d.param)[j] = r.p;
    reinterpret_cast<FV*>(d.m)[j] = r.m;
    reinterpret_cast<FV*>(d.v)[j] = r.v;
    if (d.copy != nullptr) {
      CV c;
#pragma unroll
      for (int e = 0; e < kCudaVec; ++e) c.v[e] = from_math<C>(r.p.v[e]);
      reinterpret_cast<CV*>(d.copy)[j] = c;
    }
  }
};

template <typename G, typename C, typename Table>
__global__ void __launch_bounds__(kThreads)
    adam_kernel(const __grid_constant__ Table table, const AdamConsts k,
                const float* __restrict__ found_inf) {
  if (found_inf != nullptr && *found_inf != 0.0f) return;
  const AdamDesc* descs = table_descs(table);
  const int chunk = static_cast<int>(blockIdx.x);
  int lo = 0, hi = table.count - 1;  // last descriptor with chunk_begin <= chunk
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (descs[mid].chunk_begin <= chunk) lo = mid; else hi = mid - 1;
  }
  const MasterAccess<G, C> a{descs[lo], k};
  const int64_t begin = static_cast<int64_t>(chunk - a.d.chunk_begin) * kCudaChunk;
  walk_chunk(a, begin, begin + kCudaChunk < a.d.n ? begin + kCudaChunk : a.d.n, a.d.head);
}

// ---- split masters: one range, the chunked layout of adam_kernel ----

struct SplitArgs {
  uint16_t* hi;
  int16_t* lo;
  float* m;
  float* v;
  const void* grad;
  int64_t n;
  int32_t head;  // as AdamDesc::head
};

// Split masters (hi, lo halves), gradients G.
template <typename G>
struct SplitAccess {
  using FV = Vec<float, kCudaVec>;
  using HV = Vec<uint16_t, kCudaVec>;
  using LV = Vec<int16_t, kCudaVec>;
  using GV = Vec<G, kCudaVec>;
  struct Regs {
    HV h;
    LV l;
    FV m, v;
    GV g;
  };
  SplitArgs a;
  AdamConsts k;

  __device__ __forceinline__ void one(int64_t i) const {
    float p = __uint_as_float(join_master_bits(a.hi[i], a.lo[i]));
    adam_element(p, a.m[i], a.v[i], to_math(static_cast<const G*>(a.grad)[i]), k);
    split_master_bits(__float_as_uint(p), a.hi + i, a.lo + i);
  }
  __device__ __forceinline__ SplitAccess at(int64_t i) const {
    SplitAccess s = *this;
    s.a.hi += i;
    s.a.lo += i;
    s.a.m += i;
    s.a.v += i;
    s.a.grad = static_cast<const G*>(a.grad) + i;
    return s;
  }
  __device__ __forceinline__ Regs load(int j) const {
    return Regs{reinterpret_cast<const HV*>(a.hi)[j], reinterpret_cast<const LV*>(a.lo)[j],
                reinterpret_cast<const FV*>(a.m)[j], reinterpret_cast<const FV*>(a.v)[j],
                reinterpret_cast<const GV*>(a.grad)[j]};
  }
  __device__ __forceinline__ void update_store(int j, Regs& r) const {
#pragma unroll
    for (int e = 0; e < kCudaVec; ++e) {
      float p = __uint_as_float(join_master_bits(r.h.v[e], r.l.v[e]));
      adam_element(p, r.m.v[e], r.v.v[e], to_math(r.g.v[e]), k);
      split_master_bits(__float_as_uint(p), &r.h.v[e], &r.l.v[e]);
    }
    reinterpret_cast<HV*>(a.hi)[j] = r.h;
    reinterpret_cast<LV*>(a.lo)[j] = r.l;
    reinterpret_cast<FV*>(a.m)[j] = r.m;
    reinterpret_cast<FV*>(a.v)[j] = r.v;
  }
};

template <typename G>
__global__ void __launch_bounds__(kThreads)
    adam_split_kernel(const SplitArgs a, const AdamConsts k, const float* __restrict__ found_inf) {
  if (found_inf != nullptr && *found_inf != 0.0f) return;
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * kCudaChunk;
  walk_chunk(SplitAccess<G>{a, k}, begin, begin + kCudaChunk < a.n ? begin + kCudaChunk : a.n, a.head);
}

template <bool kSplit>
__global__ void split_join_kernel(float* master, uint16_t* hi, int16_t* lo, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if constexpr (kSplit) {
      split_master_bits(__float_as_uint(master[i]), hi + i, lo + i);
    } else {
      master[i] = __uint_as_float(join_master_bits(hi[i], lo[i]));
    }
  }
}

// Copies one batch of descriptors from kernel parameters into device scratch.
__global__ void upload_kernel(const __grid_constant__ ParamTable batch, AdamDesc* dst) {
  const int i = static_cast<int>(threadIdx.x);
  if (i < batch.count) dst[i] = batch.d[i];
}

int64_t chunks_of(int64_t n) { return (n + kCudaChunk - 1) / kCudaChunk; }

// Fills `table` with descs[first, first + count) and their chunk offsets from 0;
// returns the launch's chunk count.
int64_t fill_param_table(const std::vector<AdamDesc>& descs, size_t first, int count,
                         ParamTable* table) {
  int64_t chunks = 0;
  table->count = count;
  for (int i = 0; i < count; ++i) {
    table->d[i] = descs[first + i];
    table->d[i].chunk_begin = static_cast<int32_t>(chunks);
    chunks += chunks_of(table->d[i].n);
  }
  return chunks;
}

constexpr int64_t kMaxChunks = 0x7fffffff;  // gridDim.x limit; chunk_begin is int32

template <typename G, typename C>
KernelStatus launch(const std::vector<AdamDesc>& descs, const AdamConsts& k,
                    const float* found_inf, void* scratch, cudaStream_t stream) {
  const size_t count = descs.size();
  if (count <= static_cast<size_t>(kParamDescs) || scratch == nullptr) {
    // Table in kernel parameters, kParamDescs tensors per launch.
    for (size_t first = 0; first < count; first += kParamDescs) {
      ParamTable table;
      const int batch = static_cast<int>(std::min<size_t>(kParamDescs, count - first));
      const int64_t chunks = fill_param_table(descs, first, batch, &table);
      if (chunks > kMaxChunks) return KernelStatus::invalid_argument("adam: too many elements");
      adam_kernel<G, C, ParamTable>
          <<<static_cast<unsigned>(chunks), kThreads, 0, stream>>>(table, k, found_inf);
      KernelStatus s = cuda::last_launch_status();
      if (!s.ok()) return s;
    }
    return KernelStatus();
  }
  // Table in scratch (checked by run()): upload it in batches, then one launch for all.
  AdamDesc* dev = static_cast<AdamDesc*>(scratch);
  int64_t chunks = 0;
  for (size_t first = 0; first < count; first += kParamDescs) {
    ParamTable batch;
    const int n = static_cast<int>(std::min<size_t>(kParamDescs, count - first));
    batch.count = n;
    for (int i = 0; i < n; ++i) {
      batch.d[i] = descs[first + i];
      batch.d[i].chunk_begin = static_cast<int32_t>(std::min(chunks, kMaxChunks));
      chunks += chunks_of(batch.d[i].n);
    }
    if (chunks > kMaxChunks) return KernelStatus::invalid_argument("adam: too many elements");
    upload_kernel<<<1, kParamDescs, 0, stream>>>(batch, dev + first);
    KernelStatus s = cuda::last_launch_status();
    if (!s.ok()) return s;
  }
  const DeviceTable table{dev, static_cast<int32_t>(count)};
  adam_kernel<G, C, DeviceTable>
      <<<static_cast<unsigned>(chunks), kThreads, 0, stream>>>(table, k, found_inf);
  return cuda::last_launch_status();
}

KernelStatus run(const AdamTensor* tensors, int64_t num_tensors, const float* found_inf,
                 void* scratch, int64_t scratch_bytes, DType grad_dtype, DType copy_dtype,
                 const AdamOptions& options, cudaStream_t stream) {
  AdamConsts k;
  KernelStatus s = internal::make_consts(options, &k);
  if (!s.ok()) return s;
  s = internal::check_dtypes(grad_dtype, copy_dtype);
  if (!s.ok()) return s;
  if (num_tensors < 0) return KernelStatus::invalid_argument("adam: num_tensors < 0");
  if (num_tensors > 0 && tensors == nullptr) {
    return KernelStatus::invalid_argument("adam: null tensor list with num_tensors > 0");
  }
  if (scratch != nullptr) {
    if (scratch_bytes < adam_cuda_scratch_bytes(num_tensors)) {
      return KernelStatus::invalid_argument("adam: scratch smaller than adam_cuda_scratch_bytes");
    }
    if (!internal::aligned_to(scratch, 16)) {
      return KernelStatus::invalid_argument("adam: scratch is not 16-byte aligned");
    }
  }
  const size_t gs = dtype_size(grad_dtype), cs = dtype_size(copy_dtype);
  std::vector<AdamDesc> descs;
  descs.reserve(static_cast<size_t>(num_tensors));
  for (int64_t t = 0; t < num_tensors; ++t) {
    const AdamTensor& x = tensors[t];
    s = internal::check_tensor(x.param, x.m, x.v, x.grad, x.model_copy, x.n, grad_dtype,
                               copy_dtype);
    if (!s.ok()) return s;
    if (x.n == 0) continue;
    descs.push_back(AdamDesc{x.param, x.m, x.v, x.grad, x.model_copy, x.n, 0,
                             internal::common_head(x.param, x.m, x.v, x.grad, x.model_copy, gs,
                                                   cs)});
  }
  if (descs.empty()) return KernelStatus();
  return cuda::dispatch_float_types(grad_dtype, [&](auto gtag) {
    using G = decltype(gtag);
    return cuda::dispatch_float_types(copy_dtype, [&](auto ctag) {
      using C = decltype(ctag);
      return launch<G, C>(descs, k, found_inf, scratch, stream);
    });
  });
}

}  // namespace

KernelStatus adam_step_cuda(float* param, float* exp_avg, float* exp_avg_sq, void* model_copy,
                            const void* grad, const float* found_inf, int64_t n, DType grad_dtype,
                            DType copy_dtype, const AdamOptions& options, cudaStream_t stream) {
  const AdamTensor one{param, exp_avg, exp_avg_sq, grad, model_copy, n};
  return run(&one, 1, found_inf, nullptr, 0, grad_dtype, copy_dtype, options, stream);
}

KernelStatus adam_step_tensors_cuda(const AdamTensor* tensors, const float* found_inf,
                                    void* scratch, int64_t scratch_bytes, int64_t num_tensors,
                                    DType grad_dtype, DType copy_dtype,
                                    const AdamOptions& options, cudaStream_t stream) {
  return run(tensors, num_tensors, found_inf, scratch, scratch_bytes, grad_dtype, copy_dtype,
             options, stream);
}

KernelStatus adam_step_split_cuda(uint16_t* hi, int16_t* lo, float* exp_avg, float* exp_avg_sq,
                                  const void* grad, const float* found_inf, int64_t n,
                                  DType grad_dtype, const AdamOptions& options,
                                  cudaStream_t stream) {
  AdamConsts k;
  KernelStatus s = internal::make_consts(options, &k);
  if (!s.ok()) return s;
  s = internal::check_dtypes(grad_dtype, DType::kF32);
  if (!s.ok()) return s;
  s = internal::check_split(hi, lo, exp_avg, exp_avg_sq, grad, n, grad_dtype);
  if (!s.ok()) return s;
  if (n == 0) return KernelStatus();
  if (chunks_of(n) > kMaxChunks) return KernelStatus::invalid_argument("adam: too many elements");
  const size_t gs = dtype_size(grad_dtype);
  using internal::vector_head;
  int32_t head = vector_head(exp_avg, 4);
  if (vector_head(exp_avg_sq, 4) != head || vector_head(hi, 2) != head ||
      vector_head(lo, 2) != head || vector_head(grad, gs) != head) {
    head = -1;
  }
  const SplitArgs a{hi, lo, exp_avg, exp_avg_sq, grad, n, head};
  return cuda::dispatch_float_types(grad_dtype, [&](auto gtag) {
    using G = decltype(gtag);
    adam_split_kernel<G><<<static_cast<unsigned>(chunks_of(n)), kThreads, 0, stream>>>(a, k, found_inf);
    return cuda::last_launch_status();
  });
}

namespace {

template <bool kSplit>
KernelStatus split_join(float* master, uint16_t* hi, int16_t* lo, int64_t n, cudaStream_t stream) {
  if (n < 0) return KernelStatus::invalid_argument("split_master: n < 0");
  if (n == 0) return KernelStatus();
  if (master == nullptr || hi == nullptr || lo == nullptr || !internal::aligned_to(master, 4) ||
      !internal::aligned_to(hi, 2) || !internal::aligned_to(lo, 2)) {
    return KernelStatus::invalid_argument("split_master: null or misaligned buffer with n > 0");
  }
  const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, 4096);
  split_join_kernel<kSplit><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(master, hi, lo, n);
  return cuda::last_launch_status();
}

}  // namespace

KernelStatus split_master_cuda(const float* master, uint16_t* hi, int16_t* lo, int64_t n,
                               cudaStream_t stream) {
  return split_join<true>(const_cast<float*>(master), hi, lo, n, stream);
}

KernelStatus join_master_cuda(const uint16_t* hi, const int16_t* lo, float* master, int64_t n,
                              cudaStream_t stream) {
  return split_join<false>(master, const_cast<uint16_t*>(hi), const_cast<int16_t*>(lo), n, stream);
}

}  // namespace colossal::kernels::adam
