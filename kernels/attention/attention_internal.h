// Private to kernels/attention: argument checks shared by the CPU and CUDA
// paths, so both accept exactly the same geometry; and the choice between the
// CUDA forward kernels (ForwardPath) and backward kernels (BackwardPath),
// which the tests and the benchmark make explicitly.
#ifndef COLOSSAL_KERNELS_ATTENTION_ATTENTION_INTERNAL_H_
#define COLOSSAL_KERNELS_ATTENTION_ATTENTION_INTERNAL_H_

#include <climits>
#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "kernels/common/dtype.h"
#include "kernels/common/status.h"

#if COLOSSAL_WITH_CUDA
typedef struct CUstream_st* cudaStream_t;
#endif

namespace colossal::kernels::attention {
enum class AttentionMask;  // attention.h
}  // namespace colossal::kernels::attention

namespace colossal::kernels::attention::internal {

// heads query heads share kv_heads key/value heads: query head h reads kv head
// h / group(), group() = heads / kv_heads (1 without grouping).
struct Geometry {
  int64_t batch, heads, kv_heads, seq, head_dim, qkv_row_stride, o_row_stride;
  bool empty() const { return batch == 0 || heads == 0 || seq == 0 || head_dim == 0; }
  int64_t group() const { return heads / kv_heads; }
};

// Non-negative sizes, heads a multiple of kv_heads (kv_heads >= 1 unless
// heads == 0), strides that hold a row of heads * head_dim, and sizes whose
// byte extents fit in int64_t.
inline KernelStatus check_geometry(const Geometry& g) {
  if (g.batch < 0 || g.heads < 0 || g.kv_heads < 0 || g.seq < 0 || g.head_dim < 0) {
    return KernelStatus::invalid_argument("attention: negative size");
  }
  if (g.kv_heads == 0 ? g.heads != 0 : g.heads % g.kv_heads != 0) {
    return KernelStatus::invalid_argument("attention: heads is not a multiple of kv_heads");
  }
  if (g.empty()) return KernelStatus();
  int64_t row = 0, rows = 0, bytes = 0;
  if (__builtin_mul_overflow(g.heads, g.head_dim, &row) ||
      __builtin_mul_overflow(g.batch, g.seq, &rows)) {
    return KernelStatus::invalid_argument("attention: tensor too large");
  }
  if (g.qkv_row_stride < row || g.o_row_stride < row) {
    return KernelStatus::invalid_argument(
        "attention: a row stride is smaller than heads * head_dim");
  }
  for (int64_t stride : {g.qkv_row_stride, g.o_row_stride}) {
    if (__builtin_mul_overflow(rows, stride, &bytes) ||
        __builtin_mul_overflow(bytes, int64_t{8}, &bytes)) {
      return KernelStatus::invalid_argument("attention: tensor too large");
    }
  }
  if (__builtin_mul_overflow(rows, g.heads, &bytes)) {
    return KernelStatus::invalid_argument("attention: tensor too large");
  }
  return KernelStatus();
}

// The varlen layout (attention.h): num_seqs sequences packed back to back in
// total_tokens rows. Its q, k, v and o are the rows of one sequence of
// total_tokens positions (flat_geometry): what the size checks and the
// extents below see. lse is [heads, total_tokens], as many floats as the flat
// geometry's [1, heads, total_tokens].
inline Geometry flat_geometry(int64_t total_tokens, int64_t heads, int64_t kv_heads,
                              int64_t head_dim, int64_t qkv_row_stride, int64_t o_row_stride) {
  return {1, heads, kv_heads, total_tokens, head_dim, qkv_row_stride, o_row_stride};
}

// check_geometry of the flat geometry, num_seqs >= 0, total_tokens within
// cu_seqlens' int32 and no tokens without a sequence. (The CPU path also reads
// cu_seqlens itself; the CUDA path cannot without a sync.)
inline KernelStatus check_varlen_geometry(const Geometry& flat, int64_t num_seqs) {
  if (num_seqs < 0) return KernelStatus::invalid_argument("attention: negative size");
  KernelStatus s = check_geometry(flat);
  if (!s.ok()) return s;
  if (flat.seq > INT32_MAX) {
    return KernelStatus::invalid_argument(
        "attention varlen: total_tokens above 2^31 - 1 (cu_seqlens is int32)");
  }
  if (num_seqs == 0 && flat.seq > 0) {
    return KernelStatus::invalid_argument("attention varlen: total_tokens > 0 but no sequence");
  }
  return KernelStatus();
}

// Byte range [begin, end) that a strided [batch * seq, heads * head_dim] tensor spans
// (heads: g.heads for q, o and their gradients, g.kv_heads for k, v, dk, dv).
struct Extent {
  uintptr_t begin, end;
};

inline Extent extent(const void* p, const Geometry& g, int64_t row_stride, int64_t heads,
                     size_t elem) {
  const uintptr_t b = reinterpret_cast<uintptr_t>(p);
  const uint64_t last = static_cast<uint64_t>((g.batch * g.seq - 1) * row_stride) +
                        static_cast<uint64_t>(heads * g.head_dim);
  return {b, b + static_cast<uintptr_t>(last * elem)};
}

// The extents of one call's q, k, v (or dq, dk, dv) at qkv_row_stride.
struct QkvExtents {
  Extent q, k, v;
};

inline QkvExtents qkv_extents(const void* q, const void* k, const void* v, const Geometry& g,
                              size_t elem) {
  return {extent(q, g, g.qkv_row_stride, g.heads, elem),
          extent(k, g, g.qkv_row_stride, g.kv_heads, elem),
          extent(v, g, g.qkv_row_stride, g.kv_heads, elem)};
}

inline Extent plain_extent(const void* p, size_t bytes) {
  const uintptr_t b = reinterpret_cast<uintptr_t>(p);
  return {b, b + bytes};
}

inline bool overlap(Extent a, Extent b) { return a.begin < b.end && b.begin < a.end; }

// True when any output extent shares a byte with any input extent.
inline bool outputs_overlap_inputs(std::initializer_list<Extent> outputs,
                                   std::initializer_list<Extent> inputs) {
  for (const Extent& o : outputs) {
    for (const Extent& i : inputs) {
      if (overlap(o, i)) return true;
    }
  }
  return false;
}

inline bool any_null(std::initializer_list<const void*> ptrs) {
  for (const void* p : ptrs) {
    if (p == nullptr) return true;
  }
  return false;
}

#if COLOSSAL_WITH_CUDA
// Which kernel runs attention_forward_cuda's work (either mask):
//   kAuto      the Hopper kernel (attention_hopper.cu: wgmma + TMA) when the
//              current device has compute capability 9.0 and
//              hopper_forward_supports() the problem (head_dim 64, 96 or
//              128), else the portable one; what attention_forward_cuda does.
//   kPortable  the portable FlashAttention-2 kernel (mma.sync, sm_80+).
//   kHopper    the Hopper kernel, or kUnsupported where it cannot run (another
//              device, or a problem it does not take).
// Both kernels write o and lse to the same contract (attention.h), so either
// forward feeds the one backward.
enum class ForwardPath { kAuto, kPortable, kHopper };

// Whether the current device has compute capability 9.0 (H100, H200): the
// only devices the sm_90a Hopper kernel runs on. Asked of the driver once per
// device, then cached.
bool hopper_device();

// attention_forward_cuda through `path`: the same arguments, checks and
// results.
KernelStatus attention_forward_cuda_path(ForwardPath path, AttentionMask mask, void* o,
                                         float* lse, const void* q, const void* k, const void* v,
                                         int64_t batch, int64_t heads, int64_t kv_heads,
                                         int64_t seq, int64_t head_dim, int64_t qkv_row_stride,
                                         int64_t o_row_stride, DType dtype, float scale,
                                         cudaStream_t stream);

// attention_forward_cuda_path with AttentionMask::kCausal.
KernelStatus causal_attention_forward_cuda_path(ForwardPath path, void* o, float* lse,
                                                const void* q, const void* k, const void* v,
                                                int64_t batch, int64_t heads, int64_t kv_heads,
                                                int64_t seq, int64_t head_dim,
                                                int64_t qkv_row_stride, int64_t o_row_stride,
                                                DType dtype, float scale, cudaStream_t stream);

// Which kernels run attention_backward_cuda's work (the delta kernel,
// rowsum(dO * O), is the same for all; either mask):
//   kAuto      on a compute capability 9.0 device where
//              hopper_backward_supports() the problem, the Hopper backward:
//              fused dQ at head_dim 96 and 128, the deterministic two-kernel
//              one at 64 (the faster at each); else the portable kernels.
//              What attention_backward_cuda(deterministic = false) does.
//   kAutoDeterministic  the same with the deterministic Hopper backward at
//              every head_dim (attention_backward_cuda(deterministic = true)).
//   kPortable  the portable dK/dV and dQ kernels (mma.sync, sm_80+).
//   kHopper    the deterministic Hopper kernels (dK/dV, then dQ), or
//              kUnsupported where they cannot run.
//   kHopperFusedDq  the Hopper backward with dQ fused into the dK/dV kernel
//              (bulk fp32 reductions into the workspace's second part, so
//              not deterministic in dq's last bits), or kUnsupported; its
//              workspace: fused_dq_workspace_bytes() (at head_dim 64 more
//              than attention_backward_workspace_bytes()).
// Every path overwrites dq, dk, dv and takes the lse of either forward path;
// the others take the workspace of attention_backward_workspace_bytes().
enum class BackwardPath { kAuto, kAutoDeterministic, kPortable, kHopper, kHopperFusedDq };

// Bytes of workspace the fused-dQ backward needs at any head_dim: delta, then
// the float32 dQ parts.
size_t fused_dq_workspace_bytes(int64_t batch, int64_t heads, int64_t seq, int64_t head_dim);

// attention_backward_cuda through `path`: the same arguments, checks and
// results.
KernelStatus attention_backward_cuda_path(
    BackwardPath path, AttentionMask mask, void* dq, void* dk, void* dv, const void* d_o,
    const void* q, const void* k, const void* v, const void* o, const float* lse, void* workspace,
    int64_t batch, int64_t heads, int64_t kv_heads, int64_t seq, int64_t head_dim,
    int64_t qkv_row_stride, int64_t o_row_stride, DType dtype, float scale, cudaStream_t stream);

// attention_backward_cuda_path with AttentionMask::kCausal.
KernelStatus causal_attention_backward_cuda_path(
    BackwardPath path, void* dq, void* dk, void* dv, const void* d_o, const void* q, const void* k,
    const void* v, const void* o, const float* lse, void* workspace, int64_t batch, int64_t heads,
    int64_t kv_heads, int64_t seq, int64_t head_dim, int64_t qkv_row_stride, int64_t o_row_stride,
    DType dtype, float scale, cudaStream_t stream);

// attention_varlen_forward_cuda / attention_varlen_backward_cuda through
// `path`: the same arguments, checks and results. The paths choose as for
// the batch layout, except that the backward's kAuto runs the deterministic
// Hopper kernels and kHopperFusedDq is kUnsupported (its scratch is sized for
// the batch layout).
KernelStatus attention_varlen_forward_cuda_path(
    ForwardPath path, AttentionMask mask, void* o, float* lse, const void* q, const void* k,
    const void* v, const int32_t* cu_seqlens, int64_t num_seqs, int64_t total_tokens,
    int64_t max_seqlen, int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t qkv_row_stride,
    int64_t o_row_stride, DType dtype, float scale, cudaStream_t stream);

KernelStatus attention_varlen_backward_cuda_path(
    BackwardPath path, AttentionMask mask, void* dq, void* dk, void* dv, const void* d_o,
    const void* q, const void* k, const void* v, const void* o, const float* lse, void* workspace,
    const int32_t* cu_seqlens, int64_t num_seqs, int64_t total_tokens, int64_t max_seqlen,
    int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t qkv_row_stride,
    int64_t o_row_stride, DType dtype, float scale, cudaStream_t stream);
#endif

}  // namespace colossal::kernels::attention::internal

#endif  // COLOSSAL_KERNELS_ATTENTION_ATTENTION_INTERNAL_H_
