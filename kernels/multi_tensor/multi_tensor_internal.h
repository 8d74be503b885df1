// Private to kernels/multi_tensor: argument checks shared by the CPU and CUDA paths
// and the CUDA launch tables and scratch layout (host-includable, no CUDA headers).
#ifndef COLOSSAL_KERNELS_MULTI_TENSOR_MULTI_TENSOR_INTERNAL_H_
#define COLOSSAL_KERNELS_MULTI_TENSOR_MULTI_TENSOR_INTERNAL_H_

#include <cmath>
#include <cstdint>

#include "kernels/common/dtype.h"
#include "kernels/common/status.h"
#include "kernels/multi_tensor/multi_tensor.h"

namespace colossal::kernels::multi_tensor::internal {

// The clipping coefficient's denominator guard, as torch and Colossal-AI use it.
constexpr double kClipEps = 1e-6;

// The CPU norms' order (multi_tensor_cpu.cc, lane_sums.h), which accumulate_cuda
// keeps too: a tensor is cut into pieces of kCpuPiece elements; element k of a
// piece adds its square to lane k % kCpuLanes.
constexpr int64_t kCpuPiece = 1 << 15;
constexpr int kCpuLanes = 16;
inline int64_t cpu_pieces_of(int64_t n) { return (n + kCpuPiece - 1) / kCpuPiece; }

inline bool aligned_to(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

inline KernelStatus check_norm_args(const float* global_norm, const float* clip_coef,
                                    const TensorRef* tensors, int64_t num_tensors,
                                    float max_norm) {
  if (global_norm == nullptr) return KernelStatus::invalid_argument("l2_norm: null global_norm");
  if (num_tensors < 0) return KernelStatus::invalid_argument("l2_norm: num_tensors < 0");
  if (num_tensors > 0 && tensors == nullptr) {
    return KernelStatus::invalid_argument("l2_norm: null tensor list with num_tensors > 0");
  }
  if (clip_coef != nullptr && !(std::isfinite(max_norm) && max_norm > 0)) {
    return KernelStatus::invalid_argument("l2_norm: clip_coef needs a positive finite max_norm");
  }
  return KernelStatus();
}

inline KernelStatus check_norm_tensor(const TensorRef& t, size_t es) {
  if (t.n < 0) return KernelStatus::invalid_argument("l2_norm: a tensor has n < 0");
  if (t.n > 0 && t.data == nullptr) {
    return KernelStatus::invalid_argument("l2_norm: a tensor has null data with n > 0");
  }
  if (t.n > 0 && !aligned_to(t.data, es)) {
    return KernelStatus::invalid_argument("l2_norm: data not aligned to its element size");
  }
  return KernelStatus();
}

// Any float scale is valid: inf or NaN results are flagged, not refused.
inline KernelStatus check_scale_args(const ScaleTensor* tensors, int64_t num_tensors) {
  if (num_tensors < 0) return KernelStatus::invalid_argument("scale: num_tensors < 0");
  if (num_tensors > 0 && tensors == nullptr) {
    return KernelStatus::invalid_argument("scale: null tensor list with num_tensors > 0");
  }
  return KernelStatus();
}

inline KernelStatus check_scale_tensor(const ScaleTensor& t, size_t in_es, size_t out_es) {
  if (t.n < 0) return KernelStatus::invalid_argument("scale: a tensor has n < 0");
  if (t.n == 0) return KernelStatus();
  if (t.in == nullptr || t.out == nullptr) {
    return KernelStatus::invalid_argument("scale: a tensor has a null buffer with n > 0");
  }
  if (!aligned_to(t.in, in_es) || !aligned_to(t.out, out_es)) {
    return KernelStatus::invalid_argument("scale: a buffer is not aligned to its element size");
  }
  if (t.in == t.out && in_es != out_es) {
    return KernelStatus::invalid_argument("scale: in place needs equal input and output sizes");
  }
  return KernelStatus();
}

// accumulate_cpu / accumulate_cuda's argument checks.
inline KernelStatus check_accumulate_args(const AccumulateTensor* tensors, int64_t num_tensors) {
  if (num_tensors < 0) return KernelStatus::invalid_argument("accumulate: num_tensors < 0");
  if (num_tensors > 0 && tensors == nullptr) {
    return KernelStatus::invalid_argument("accumulate: null tensor list with num_tensors > 0");
  }
  return KernelStatus();
}

inline KernelStatus check_accumulate_tensor(const AccumulateTensor& x, size_t es) {
  if (x.n < 0) return KernelStatus::invalid_argument("accumulate: a tensor has n < 0");
  if (x.n == 0) return KernelStatus();
  if (x.acc == nullptr || x.part == nullptr) {
    return KernelStatus::invalid_argument("accumulate: a tensor has a null buffer with n > 0");
  }
  if (!aligned_to(x.acc, es) || !aligned_to(x.part, es)) {
    return KernelStatus::invalid_argument("accumulate: a buffer is not aligned to its element size");
  }
  const auto* a = static_cast<const uint8_t*>(x.acc);
  const auto* b = static_cast<const uint8_t*>(x.part);
  const int64_t bytes = x.n * static_cast<int64_t>(es);
  if (a < b + bytes && b < a + bytes) return KernelStatus::invalid_argument("accumulate: acc and part overlap");
  return KernelStatus();
}

// ---- CUDA launch tables (built on the host, read by the kernels) ----

constexpr int64_t kCudaChunk = 16384;  // elements per block; never spans two tensors
constexpr int kParamDescs = 96;        // descriptors in kernel parameters (32 bytes each)

struct NormDesc {
  const void* data;
  int64_t n;
  int32_t chunk_begin;  // first chunk of this tensor in the launch
  int32_t chunks;
  int32_t head;  // elements before `data` reaches 16-byte alignment; -1: never
  int32_t pad;
};

struct ScaleDesc {
  const void* in;
  void* out;
  int64_t n;
  int32_t chunk_begin;
  int32_t head;  // common head of in and out to vector alignment; -1: none
};

// Leading elements after which `p` (element size es) is aligned to `vec` elements of
// vec * es bytes, or -1 when it never is.
inline int32_t vector_head(const void* p, size_t es, int vec) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const uintptr_t align = vec * es;
  if (a % es != 0) return -1;
  return static_cast<int32_t>(((align - a % align) % align) / es);
}

inline int64_t chunks_of(int64_t n) { return (n + kCudaChunk - 1) / kCudaChunk; }
inline int64_t align16(int64_t bytes) { return (bytes + 15) / 16 * 16; }

// l2_norm scratch: [descs][chunk sums (float)][tensor sums (double)][counter].
struct NormScratch {
  int64_t descs_at, partials_at, tensor_sq_at, counter_at, bytes;
};

inline NormScratch norm_scratch_layout(int64_t num_tensors, int64_t total_chunks) {
  NormScratch s;
  s.descs_at = 0;
  s.partials_at = align16(num_tensors * static_cast<int64_t>(sizeof(NormDesc)));
  s.tensor_sq_at = s.partials_at + align16(total_chunks * 4);
  s.counter_at = s.tensor_sq_at + align16(num_tensors * 8);
  s.bytes = s.counter_at + 16;
  return s;
}

// accumulate_cuda scratch: [piece sums (double), every tensor's in order][running total].
struct AccumulateScratch {
  int64_t total_at, bytes;
};

inline AccumulateScratch accumulate_scratch_layout(int64_t total_pieces) {
  AccumulateScratch s;
  s.total_at = align16(total_pieces * 8);
  s.bytes = s.total_at + 16;
  return s;
}

}  // namespace colossal::kernels::multi_tensor::internal

#endif  // COLOSSAL_KERNELS_MULTI_TENSOR_MULTI_TENSOR_INTERNAL_H_
