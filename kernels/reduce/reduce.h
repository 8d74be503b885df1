// colossal::kernels::reduce — elementwise reduction of one buffer into another.
//
// dst[i] = op(dst[i], src[i]) for 0 <= i < n. This is the step a ring
// all-reduce or reduce-scatter performs on each chunk it receives (comm/'s
// builtin backend uses it on CPU buffers and on GPU buffers alike).
//
// Semantics, identical on CPU and CUDA (results are bit-for-bit equal):
//   * float16/bfloat16 compute in float32 and round to nearest even once;
//     float32/float64 compute in their own precision; integers wrap.
//   * kMax/kMin propagate NaN: if either input is NaN the result is NaN, so a
//     non-finite gradient on one rank is seen by all.
//   * dst and src may not overlap unless dst == src.
//
//   using namespace colossal::kernels;
//   KernelStatus s = reduce::reduce_into_cpu(dst, src, n, DType::kF32, reduce::ReduceOp::kSum);
//   #if COLOSSAL_WITH_CUDA
//   s = reduce::reduce_into_cuda(d_dst, d_src, n, DType::kBF16, reduce::ReduceOp::kMax, stream);
//   #endif
#ifndef COLOSSAL_KERNELS_REDUCE_REDUCE_H_
#define COLOSSAL_KERNELS_REDUCE_REDUCE_H_

#include <cstdint>

#include "kernels/common/dtype.h"
#include "kernels/common/status.h"

#if COLOSSAL_WITH_CUDA
typedef struct CUstream_st* cudaStream_t;
#endif

namespace colossal::kernels::reduce {

enum class ReduceOp : int { kSum, kProd, kMax, kMin };

const char* reduce_op_name(ReduceOp op);

// CPU reference and CPU backend. Accepts every DType.
KernelStatus reduce_into_cpu(void* dst, const void* src, int64_t n, DType dtype, ReduceOp op);

#if COLOSSAL_WITH_CUDA
// CUDA: dst and src are device pointers; enqueued on `stream`, not synchronised.
// Returns the launch status (asynchronous faults surface at the next sync).
KernelStatus reduce_into_cuda(void* dst, const void* src, int64_t n, DType dtype, ReduceOp op,
                              cudaStream_t stream);
#endif

}  // namespace colossal::kernels::reduce

#endif  // COLOSSAL_KERNELS_REDUCE_REDUCE_H_
